package dev.stoker.job;

import dev.stoker.connectors.fetch.ImageFetchFunction;
import dev.stoker.connectors.fetch.ImageStore;
import dev.stoker.connectors.fetch.S3ClientSettings;
import dev.stoker.connectors.fetch.S3ImageFetchFunction;
import dev.stoker.connectors.fetch.S3ImageStore;
import dev.stoker.connectors.source.DatasetListing;
import dev.stoker.connectors.source.JsonlSource;
import dev.stoker.operators.accounting.DeadLetterAccounting;
import dev.stoker.operators.batch.BatchAssembler;
import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.image.PreprocessImagesFunction;
import dev.stoker.operators.image.QwenVisionConfig;
import dev.stoker.operators.model.DeadLetter;
import dev.stoker.operators.model.DeadLetters;
import dev.stoker.operators.model.FetchedRecord;
import dev.stoker.operators.model.PreprocessedRecord;
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.SlotResult;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import dev.stoker.operators.parse.ParseRecordFunction;
import dev.stoker.operators.tokenize.TokenizeFunction;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.datastream.AsyncDataStream;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.async.RichAsyncFunction;
import org.apache.flink.types.Either;

/**
 * The Stoker dataflow, without its sinks:
 *
 * <pre>
 * JSONL source -> parse -> async image fetch (S3 client for s3:// roots, else Flink FileSystem) -> preprocess images -> tokenize -+-> batch assembler (keyed by rank) -> batches
 *                   |            |                   |                |        |
 *                   +------------+-------------------+----------------+--> dead letters --(empty slots)--+
 * </pre>
 *
 * <p>Every operator has a stable {@code uid} so savepoints map onto it.
 */
public final class StokerPipeline {

    /** The pipeline's two outputs. */
    public static final class Outputs {
        /** One batch per (step, rank), for the Arrow shared-memory sink. */
        public final DataStream<TrainingBatch> batches;

        /** Rejected records, for the dead-letter output. */
        public final DataStream<DeadLetter> deadLetters;

        Outputs(DataStream<TrainingBatch> batches, DataStream<DeadLetter> deadLetters) {
            this.batches = batches;
            this.deadLetters = deadLetters;
        }
    }

    private StokerPipeline() {}

    /**
     * Adds the dataflow to {@code env}.
     *
     * @param conf job configuration ({@link StokerOptions})
     * @param listing the dataset's files and record count, scanned at planning time
     * @param plan the batch plan derived from the listing
     */
    public static Outputs build(
            StreamExecutionEnvironment env,
            Configuration conf,
            DatasetListing listing,
            BatchPlan plan) {
        int maxLine = (int) conf.get(StokerOptions.MAX_LINE_LENGTH).getBytes();
        DataStream<dev.stoker.operators.model.JsonlLine> lines =
                env.fromSource(
                                JsonlSource.forListing(listing, maxLine),
                                WatermarkStrategy.noWatermarks(),
                                "jsonl-source")
                        .uid("jsonl-source");

        SingleOutputStreamOperator<SftRecord> records =
                lines.process(new ParseRecordFunction()).name("parse").uid("parse");

        long maxObjectBytes = conf.get(StokerOptions.MAX_OBJECT_SIZE).getBytes();
        long timeoutMs = conf.get(StokerOptions.FETCH_TIMEOUT).toMillis();
        RichAsyncFunction<SftRecord, Either<DeadLetter, FetchedRecord>> fetch =
                S3ImageStore.isS3(listing.root())
                        ? new S3ImageFetchFunction(
                                listing.root(),
                                maxObjectBytes,
                                s3Settings(conf),
                                conf.get(StokerOptions.FETCH_TIMEOUT))
                        : new ImageFetchFunction(
                                new ImageStore(listing.root(), maxObjectBytes),
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

        QwenVisionConfig vision = visionConfig(conf);
        SingleOutputStreamOperator<PreprocessedRecord> preprocessed =
                fetched.process(new PreprocessImagesFunction(vision))
                        .name("preprocess-images")
                        .uid("preprocess-images");

        SingleOutputStreamOperator<TokenizedSample> tokenized =
                preprocessed
                        .process(
                                new TokenizeFunction(
                                        conf.get(StokerOptions.TOKENIZER_PATH),
                                        vision.mergeSize,
                                        ModelOptions.chatTemplate(conf)))
                        .name("tokenize")
                        .uid("tokenize");

        DataStream<DeadLetter> deadLetters =
                records.getSideOutput(DeadLetters.TAG)
                        .union(
                                preprocessed.getSideOutput(DeadLetters.TAG),
                                tokenized.getSideOutput(DeadLetters.TAG));

        TypeInformation<SlotResult> slotType = TypeInformation.of(SlotResult.class);
        DataStream<SlotResult> slots =
                tokenized
                        .map(SlotResult::of)
                        .returns(slotType)
                        .name("filled-slots")
                        .uid("filled-slots")
                        .union(
                                deadLetters
                                        .map(new DeadLetterAccounting())
                                        .returns(slotType)
                                        .name("dead-letter-accounting")
                                        .uid("dead-letter-accounting"));
        if (plan.numPaddingSlots() > 0) {
            slots =
                    slots.union(
                            env.fromSequence(
                                            plan.numRecords(),
                                            plan.numRecords() + plan.numPaddingSlots() - 1)
                                    .uid("padding-slots")
                                    .map(SlotResult::empty)
                                    .returns(slotType)
                                    .name("padding-slots-to-empty")
                                    .uid("padding-slots-to-empty"));
        }

        DataStream<TrainingBatch> batches =
                slots.keyBy(slot -> BatchAssembler.rankKey(slot, plan), Types.INT)
                        .process(new BatchAssembler(plan))
                        .returns(TypeInformation.of(TrainingBatch.class))
                        .name("batch-assembler")
                        .uid("batch-assembler");
        return new Outputs(batches, deadLetters);
    }

    /** The S3 client settings of the image fetch, from the {@code stoker.s3.*} options. */
    static S3ClientSettings s3Settings(Configuration conf) {
        S3ClientSettings s = new S3ClientSettings();
        s.endpoint = conf.get(StokerOptions.S3_ENDPOINT);
        s.region = conf.get(StokerOptions.S3_REGION);
        s.pathStyleAccess = conf.get(StokerOptions.S3_PATH_STYLE_ACCESS);
        s.accessKey = conf.get(StokerOptions.S3_ACCESS_KEY);
        s.secretKey = conf.get(StokerOptions.S3_SECRET_KEY);
        s.maxConcurrency = conf.get(StokerOptions.FETCH_CAPACITY);
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
        return s;
    }

    /** The model preset's vision config with the {@code stoker.image.*} overrides. */
    static QwenVisionConfig visionConfig(Configuration conf) {
        return ModelOptions.visionConfig(conf);
    }
}
