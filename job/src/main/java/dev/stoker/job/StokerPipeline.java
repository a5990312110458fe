package dev.stoker.job;

import dev.stoker.connectors.fetch.ImageFetchFunction;
import dev.stoker.connectors.fetch.ImageStore;
import dev.stoker.connectors.source.DatasetListing;
import dev.stoker.connectors.source.JsonlSource;
import dev.stoker.operators.batch.BatchAssembler;
import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.accounting.DeadLetterAccounting;
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
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.datastream.AsyncDataStream;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.types.Either;

/**
 * The Stoker dataflow, without its sinks:
 *
 * <pre>
 * JSONL source -> parse -> async image fetch -> preprocess images -> tokenize -+-> batch assembler (keyed by rank) -> batches
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
            StreamExecutionEnvironment env, Configuration conf, DatasetListing listing, BatchPlan plan) {
        int maxLine = (int) conf.get(StokerOptions.MAX_LINE_LENGTH).getBytes();
        DataStream<dev.stoker.operators.model.JsonlLine> lines =
                env.fromSource(JsonlSource.forListing(listing, maxLine), WatermarkStrategy.noWatermarks(), "jsonl-source")
                        .uid("jsonl-source");

        SingleOutputStreamOperator<SftRecord> records =
                lines.process(new ParseRecordFunction()).name("parse").uid("parse");

        ImageStore store = new ImageStore(listing.root(), conf.get(StokerOptions.MAX_OBJECT_SIZE).getBytes());
        long timeoutMs = conf.get(StokerOptions.FETCH_TIMEOUT).toMillis();
        DataStream<Either<DeadLetter, FetchedRecord>> fetched =
                AsyncDataStream.unorderedWait(
                                records,
                                new ImageFetchFunction(
                                        store, conf.get(StokerOptions.FETCH_THREADS), conf.get(StokerOptions.FETCH_TIMEOUT)),
                                timeoutMs,
                                TimeUnit.MILLISECONDS,
                                conf.get(StokerOptions.FETCH_CAPACITY))
                        .name("fetch-images")
                        .uid("fetch-images");

        QwenVisionConfig vision = visionConfig(conf);
        SingleOutputStreamOperator<PreprocessedRecord> preprocessed =
                fetched.process(new PreprocessImagesFunction(vision)).name("preprocess-images").uid("preprocess-images");

        SingleOutputStreamOperator<TokenizedSample> tokenized =
                preprocessed
                        .process(new TokenizeFunction(conf.get(StokerOptions.TOKENIZER_PATH), vision.mergeSize))
                        .name("tokenize")
                        .uid("tokenize");

        DataStream<DeadLetter> deadLetters =
                records.getSideOutput(DeadLetters.TAG)
                        .union(preprocessed.getSideOutput(DeadLetters.TAG), tokenized.getSideOutput(DeadLetters.TAG));

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
                            env.fromSequence(plan.numRecords(), plan.numRecords() + plan.numPaddingSlots() - 1)
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

    static QwenVisionConfig visionConfig(Configuration conf) {
        QwenVisionConfig vision = new QwenVisionConfig();
        vision.minPixels = conf.get(StokerOptions.MIN_PIXELS);
        vision.maxPixels = conf.get(StokerOptions.MAX_PIXELS);
        vision.maxSourcePixels = conf.get(StokerOptions.MAX_SOURCE_PIXELS);
        return vision;
    }
}
