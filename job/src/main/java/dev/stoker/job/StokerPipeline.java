package dev.stoker.job;

import dev.stoker.connectors.fetch.ImageFetchFunction;
import dev.stoker.connectors.fetch.S3ImageFetchFunction;
import dev.stoker.connectors.source.PrefetchGate;
import dev.stoker.connectors.source.ShuffledJsonlSource;
import dev.stoker.operators.accounting.DeadLetterAccounting;
import dev.stoker.operators.accounting.SampleAccounting;
import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.media.PreprocessMediaFunction;
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
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.FilterFunction;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.functions.KeySelector;
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
     * @param job the submission's plan: the mixture (listings, order, each source's settings), the
     *     batch plan, the topology and each stage's settings
     * @param gate the prefetch bound of this generation
     */
    static Outputs build(StreamExecutionEnvironment env, JobPlan job, PrefetchGate gate) {
        MixturePlan mixture = job.mixture;
        BatchPlan plan = job.batches;
        SingleOutputStreamOperator<JsonlLine> lines =
                env.fromSource(
                                new ShuffledJsonlSource(
                                        mixture.listings,
                                        mixture.order,
                                        plan,
                                        job.source.maxLineBytes(),
                                        job.source.fileCacheBytes(),
                                        gate),
                                WatermarkStrategy.noWatermarks(),
                                "jsonl-source")
                        .uid("jsonl-source");
        if (job.topology.cpuGroup() != null) {
            lines.slotSharingGroup(job.topology.cpuGroup());
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

        JobPlan.FetchSettings f = job.fetch;
        RichAsyncFunction<SftRecord, Either<DeadLetter, FetchedRecord>> fetch =
                f.s3() != null
                        ? new S3ImageFetchFunction(
                                mixture.imageRoots,
                                f.maxObjectBytes(),
                                f.maxVideoBytes(),
                                f.s3(),
                                f.timeout(),
                                f.transientFailures(),
                                f.spill())
                        : new ImageFetchFunction(
                                mixture.imageStores(f.maxObjectBytes(), f.maxVideoBytes()),
                                f.threads(),
                                f.timeout(),
                                f.spill());
        DataStream<Either<DeadLetter, FetchedRecord>> fetched =
                AsyncDataStream.unorderedWait(
                                records,
                                fetch,
                                f.timeout().toMillis(),
                                TimeUnit.MILLISECONDS,
                                f.capacity())
                        .name("fetch-images")
                        .uid("fetch-images");

        SingleOutputStreamOperator<PreprocessedRecord> preprocessed =
                fetched.process(new PreprocessMediaFunction(mixture.visionConfigs, job.video))
                        .name("preprocess-images")
                        .uid("preprocess-images");

        SingleOutputStreamOperator<TokenizedSample> tokenized =
                preprocessed
                        .process(
                                new TokenizeFunction(
                                        job.tokenize.tokenizerPath(),
                                        mixture.visionConfigs.first().mergeSize,
                                        mixture.chatTemplates,
                                        mixture.maxSeqLens,
                                        job.tokenize.maxSeqLenPolicy()))
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
        if (job.output.packing()) {
            packed =
                    slots.keyBy(slot -> plan.stepOf(slot.sampleIndex), Types.LONG)
                            .process(new PackStepFunction(plan, job.output.packingMaxTokens()))
                            .returns(TypeInformation.of(TrainingBatch.class))
                            .name("pack-steps")
                            .uid("pack-steps");
        }
        return new Outputs(slots, packed, plan, job.topology, deadLetters);
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
}
