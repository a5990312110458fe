package dev.stoker.job;

import dev.stoker.connectors.fetch.ImageFetchFunction;
import dev.stoker.connectors.fetch.S3ClientSettings;
import dev.stoker.connectors.fetch.S3ImageFetchFunction;
import dev.stoker.connectors.source.PrefetchGate;
import dev.stoker.connectors.source.ShuffledJsonlSource;
import dev.stoker.operators.accounting.DeadLetterAccounting;
import dev.stoker.operators.accounting.SampleAccounting;
import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.image.PreprocessImagesFunction;
import dev.stoker.operators.image.QwenVisionConfig;
import dev.stoker.operators.model.DeadLetter;
import dev.stoker.operators.model.DeadLetters;
import dev.stoker.operators.model.FetchedRecord;
import dev.stoker.operators.model.JsonlLine;
import dev.stoker.operators.model.PreprocessedRecord;
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.SlotResult;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import dev.stoker.operators.pack.PackStepFunction;
import dev.stoker.operators.parse.ParseRecordFunction;
import dev.stoker.operators.tokenize.TokenizeFunction;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.FilterFunction;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.datastream.AsyncDataStream;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.KeyedStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.async.RichAsyncFunction;
import org.apache.flink.types.Either;

/**
 * The Stoker dataflow, without its sinks:
 *
 * <pre>
 * shuffled JSONL source (steps, prefetch gate) -> parse -> async image fetch -> preprocess images -> tokenize -+-> slots keyed by rank (or by step -> pack-steps -> packed batches keyed by rank)
 *         |                                         |            |                    |                |       |
 *         |                                         +------------+--------------------+----------------+--> dead letters --(empty slots)--+
 *         +--> padding markers (slots past the epoch's end) ------------------------------------------------------(empty slots)--+
 * </pre>
 *
 * <p>Upstream operators run unordered; the sink, keyed by DP rank, puts samples back into their
 * slots. With {@code stoker.packing.enabled} a step-keyed operator ({@link PackStepFunction}) first
 * gathers each step's slots and emits its packed batches, which the sink writes as they are. Every
 * operator has a stable {@code uid} so savepoints map onto it. With placement EDGE the source is in
 * the CPU stages' slot sharing group ({@link Topology#cpuGroup}), and every operator after it
 * inherits the group (an operator whose inputs share one group is put in it).
 */
public final class StokerPipeline {

    /** The pipeline's two outputs. */
    public static final class Outputs {
        private final DataStream<SlotResult> slots;
        private final DataStream<TrainingBatch> packed;
        private final BatchPlan plan;
        private final Topology topology;

        /** Rejected records, for the dead-letter output. */
        public final DataStream<DeadLetter> deadLetters;

        Outputs(
                DataStream<SlotResult> slots,
                DataStream<TrainingBatch> packed,
                BatchPlan plan,
                Topology topology,
                DataStream<DeadLetter> deadLetters) {
            this.slots = slots;
            this.packed = packed;
            this.plan = plan;
            this.topology = topology;
            this.deadLetters = deadLetters;
        }

        /**
         * Filled and empty slots of node {@code node}'s ranks, keyed by global DP rank, for that
         * node's Arrow shared-memory sink: routed by the logical stream (node, rank) of the batch
         * plan, never by a host. With one sink for all ranks, every slot.
         */
        KeyedStream<SlotResult, Integer> slotsOfNode(int node) {
            DataStream<SlotResult> routed = slots;
            if (topology.perNodeSinks()) {
                // a filter per node, not partitionCustom: that is refused with unaligned
                // checkpoints
                routed =
                        slots.filter(new OfNode(plan, topology.ranksPerNode, node))
                                .name("route-node-" + node)
                                .uid("route-node-" + node);
            }
            return routed.keyBy(new RankOfSlot(plan), Types.INT);
        }

        /**
         * The packed batches of node {@code node}'s ranks ({@code stoker.packing.enabled}), keyed
         * by global DP rank, for that node's packed-batch sink; with one sink for all ranks, every
         * batch.
         *
         * @throws IllegalStateException if the job does not pack
         */
        KeyedStream<TrainingBatch, Integer> packedOfNode(int node) {
            if (packed == null) {
                throw new IllegalStateException("stoker.packing.enabled is false");
            }
            DataStream<TrainingBatch> routed = packed;
            if (topology.perNodeSinks()) {
                int ranksPerNode = topology.ranksPerNode;
                routed =
                        packed.filter(b -> Topology.nodeOf(b.rank, ranksPerNode) == node)
                                .name("route-node-" + node)
                                .uid("route-node-" + node);
            }
            return routed.keyBy(b -> b.rank, Types.INT);
        }
    }

    private StokerPipeline() {}

    /**
     * Adds the dataflow to {@code env}.
     *
     * @param conf job configuration ({@link StokerOptions})
     * @param mixture the sources (listings, order) and each source's settings
     * @param plan the batch plan over the mixture's records per epoch
     * @param gate the prefetch bound of this generation
     * @param topology nodes, ranks per node and placement
     * @param packingMaxTokens tokens per packed row ({@code stoker.packing.enabled})
     */
    static Outputs build(
            StreamExecutionEnvironment env,
            Configuration conf,
            MixturePlan mixture,
            BatchPlan plan,
            PrefetchGate gate,
            Topology topology,
            int packingMaxTokens) {
        int maxLine = (int) conf.get(StokerOptions.MAX_LINE_LENGTH).getBytes();
        SingleOutputStreamOperator<JsonlLine> lines =
                env.fromSource(
                                new ShuffledJsonlSource(
                                        mixture.listings,
                                        mixture.order,
                                        plan,
                                        maxLine,
                                        conf.get(StokerOptions.FILE_CACHE_SIZE).getBytes(),
                                        gate),
                                WatermarkStrategy.noWatermarks(),
                                "jsonl-source")
                        .uid("jsonl-source");
        if (topology.cpuGroup() != null) {
            lines.slotSharingGroup(topology.cpuGroup());
        }

        SingleOutputStreamOperator<SftRecord> records =
                lines.filter(line -> !line.padding)
                        .name("records")
                        .uid("records")
                        .process(new ParseRecordFunction(mixture.formats))
                        .name("parse")
                        .uid("parse");
        TypeInformation<SlotResult> slotType = TypeInformation.of(SlotResult.class);
        DataStream<SlotResult> paddingSlots =
                lines.filter(line -> line.padding)
                        .name("padding-markers")
                        .uid("padding-markers")
                        .map(line -> SlotResult.empty(line.ref.sampleIndex))
                        .returns(slotType)
                        .name("padding-slots")
                        .uid("padding-slots");

        long maxObjectBytes = conf.get(StokerOptions.MAX_OBJECT_SIZE).getBytes();
        long timeoutMs = conf.get(StokerOptions.FETCH_TIMEOUT).toMillis();
        RichAsyncFunction<SftRecord, Either<DeadLetter, FetchedRecord>> fetch =
                mixture.imagesOnS3()
                        ? new S3ImageFetchFunction(
                                mixture.imageRoots,
                                maxObjectBytes,
                                s3Settings(conf),
                                conf.get(StokerOptions.FETCH_TIMEOUT),
                                conf.get(StokerOptions.FETCH_TRANSIENT_FAILURES))
                        : new ImageFetchFunction(
                                mixture.imageStores(maxObjectBytes),
                                conf.get(StokerOptions.FETCH_THREADS),
                                conf.get(StokerOptions.FETCH_TIMEOUT));
        DataStream<Either<DeadLetter, FetchedRecord>> fetched =
                AsyncDataStream.unorderedWait(
                                records,
                                fetch,
                                timeoutMs,
                                TimeUnit.MILLISECONDS,
                                conf.get(StokerOptions.FETCH_CAPACITY))
                        .name("fetch-images")
                        .uid("fetch-images");

        SingleOutputStreamOperator<PreprocessedRecord> preprocessed =
                fetched.process(new PreprocessImagesFunction(mixture.visionConfigs))
                        .name("preprocess-images")
                        .uid("preprocess-images");

        SingleOutputStreamOperator<TokenizedSample> tokenized =
                preprocessed
                        .process(
                                new TokenizeFunction(
                                        conf.get(StokerOptions.TOKENIZER_PATH),
                                        mixture.visionConfigs.first().mergeSize,
                                        mixture.chatTemplates,
                                        mixture.maxSeqLens,
                                        conf.get(StokerOptions.MAX_SEQ_LEN_POLICY)))
                        .name("tokenize")
                        .uid("tokenize");

        DataStream<DeadLetter> deadLetters =
                records.getSideOutput(DeadLetters.TAG)
                        .union(
                                preprocessed.getSideOutput(DeadLetters.TAG),
                                tokenized.getSideOutput(DeadLetters.TAG));

        DataStream<SlotResult> slots =
                tokenized
                        .map(new SampleAccounting())
                        .returns(slotType)
                        .name("sample-accounting")
                        .uid("sample-accounting")
                        .union(
                                deadLetters
                                        .map(new DeadLetterAccounting())
                                        .returns(slotType)
                                        .name("dead-letter-accounting")
                                        .uid("dead-letter-accounting"),
                                paddingSlots);
        DataStream<TrainingBatch> packed = null;
        if (conf.get(StokerOptions.PACKING_ENABLED)) {
            packed =
                    slots.keyBy(slot -> plan.stepOf(slot.sampleIndex), Types.LONG)
                            .process(new PackStepFunction(plan, packingMaxTokens))
                            .returns(TypeInformation.of(TrainingBatch.class))
                            .name("pack-steps")
                            .uid("pack-steps");
        }
        return new Outputs(slots, packed, plan, topology, deadLetters);
    }

    /** Keeps the slots of one node's ranks. */
    private static final class OfNode implements FilterFunction<SlotResult> {
        private static final long serialVersionUID = 1L;
        private final BatchPlan plan;
        private final int ranksPerNode;
        private final int node;

        OfNode(BatchPlan plan, int ranksPerNode, int node) {
            this.plan = plan;
            this.ranksPerNode = ranksPerNode;
            this.node = node;
        }

        @Override
        public boolean filter(SlotResult slot) {
            return Topology.nodeOf(plan.rankOf(slot.sampleIndex), ranksPerNode) == node;
        }
    }

    /** Key of a slot result: its DP rank in the plan. */
    private static final class RankOfSlot implements KeySelector<SlotResult, Integer> {
        private static final long serialVersionUID = 1L;
        private final BatchPlan plan;

        RankOfSlot(BatchPlan plan) {
            this.plan = plan;
        }

        @Override
        public Integer getKey(SlotResult slot) {
            return plan.rankOf(slot.sampleIndex);
        }
    }

    /** The S3 client settings of the image fetch, from the {@code stoker.s3.*} options. */
    static S3ClientSettings s3Settings(Configuration conf) {
        S3ClientSettings s = new S3ClientSettings();
        s.endpoint = conf.get(StokerOptions.S3_ENDPOINT);
        s.region = conf.get(StokerOptions.S3_REGION);
        s.pathStyleAccess = conf.get(StokerOptions.S3_PATH_STYLE_ACCESS);
        s.accessKey = conf.get(StokerOptions.S3_ACCESS_KEY);
        s.secretKey = conf.get(StokerOptions.S3_SECRET_KEY);
        s.maxConnections = conf.get(StokerOptions.S3_MAX_CONNECTIONS);
        s.maxAttempts = conf.get(StokerOptions.S3_MAX_ATTEMPTS);
        s.requestTimeout = conf.get(StokerOptions.S3_REQUEST_TIMEOUT);
        if (!conf.contains(StokerOptions.S3_REQUEST_TIMEOUT)) {
            // keep the client's give-up inside the operator's timeout so the client frees the
            // connection
            Duration limit = conf.get(StokerOptions.FETCH_TIMEOUT).multipliedBy(9).dividedBy(10);
            s.requestTimeout = s.requestTimeout.compareTo(limit) < 0 ? s.requestTimeout : limit;
        }
        Duration attempt = conf.get(StokerOptions.S3_ATTEMPT_TIMEOUT);
        s.attemptTimeout = attempt.compareTo(s.requestTimeout) < 0 ? attempt : s.requestTimeout;
        s.retryBaseDelay = conf.get(StokerOptions.S3_RETRY_BASE_DELAY);
        s.retryMaxDelay = conf.get(StokerOptions.S3_RETRY_MAX_DELAY);
        s.getsPerSecondPerPrefix = conf.get(StokerOptions.S3_GETS_PER_SECOND_PER_PREFIX);
        s.hedgeAfter = conf.get(StokerOptions.S3_HEDGE_AFTER);
        return s;
    }

    /** The model preset's vision config with the {@code stoker.image.*} overrides. */
    static QwenVisionConfig visionConfig(Configuration conf) {
        return ModelOptions.visionConfig(conf);
    }
}
