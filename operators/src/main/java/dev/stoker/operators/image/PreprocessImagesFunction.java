package dev.stoker.operators.image;

import dev.stoker.operators.metrics.MetricNames;
import dev.stoker.operators.model.DeadLetter;
import dev.stoker.operators.model.DeadLetters;
import dev.stoker.operators.model.FetchedRecord;
import dev.stoker.operators.model.ImageRef;
import dev.stoker.operators.model.PerSource;
import dev.stoker.operators.model.PreprocessedImage;
import dev.stoker.operators.model.PreprocessedRecord;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SftRecord;
import java.util.HashMap;
import java.util.Map;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.types.Either;
import org.apache.flink.util.Collector;

/**
 * The CPU-heavy image stage: decodes and resizes every image of a fetched record with {@link
 * QwenImageProcessor}, with the vision config of the record's mixture source (a source may have its
 * own pixel budget) (normalisation and patchification, a few percent of the work, happen in the
 * sink: {@link Patchifier}).
 *
 * <p>Input: {@code Either.Left} dead letters from the fetch stage, forwarded unchanged to {@link
 * DeadLetters#TAG}; {@code Either.Right} fetched records. Output: one {@link PreprocessedRecord}
 * per record whose images all preprocess, with images in record order; a record with any rejected
 * image becomes one {@link DeadLetter} on {@link DeadLetters#TAG} whose message names the image
 * ({@code image 2 'images/x.png': ...}). Text-only records pass with an empty image array.
 *
 * <p>Metrics on the operator's group: counters {@code imagesPreprocessed}, {@code imagesRejected}
 * and {@code imagePreprocessNanos} (total wall time in {@link QwenImageProcessor#process},
 * nanoseconds; divide its rate by the rate of {@code imagesPreprocessed} for the mean time per
 * image), and the cost per megapixel ({@link PreprocessMetrics}).
 */
public class PreprocessImagesFunction
        extends ProcessFunction<Either<DeadLetter, FetchedRecord>, PreprocessedRecord> {
    private static final long serialVersionUID = 1L;

    private final PerSource<QwenVisionConfig> configs;
    private transient Map<String, QwenImageProcessor> processors;
    private transient Counter imagesPreprocessed;
    private transient Counter imagesRejected;
    private transient Counter preprocessNanos;
    private transient PreprocessMetrics cost;

    /**
     * @param configs each source's vision config (they differ at most in the pixel budget)
     */
    public PreprocessImagesFunction(PerSource<QwenVisionConfig> configs) {
        this.configs = configs;
    }

    @Override
    public void open(OpenContext openContext) {
        processors = new HashMap<>();
        QwenImageProcessor any = new QwenImageProcessor(configs.first());
        MetricGroup metrics = getRuntimeContext().getMetricGroup();
        imagesPreprocessed = metrics.counter(MetricNames.Preprocess.IMAGES_PREPROCESSED);
        imagesRejected = metrics.counter(MetricNames.Preprocess.IMAGES_REJECTED);
        preprocessNanos = metrics.counter(MetricNames.Preprocess.IMAGE_PREPROCESS_NANOS);
        cost =
                new PreprocessMetrics(
                        metrics, configs.first().patchSize, any.nativeJpeg(), any.nativeWebp());
    }

    @Override
    public void processElement(
            Either<DeadLetter, FetchedRecord> value,
            Context ctx,
            Collector<PreprocessedRecord> out) {
        if (value.isLeft()) {
            ctx.output(DeadLetters.TAG, value.left());
            return;
        }
        FetchedRecord fetched = value.right();
        SftRecord record = fetched.record;
        ImageRef[] refs = record.images == null ? new ImageRef[0] : record.images;
        QwenImageProcessor processor =
                processors.computeIfAbsent(
                        record.ref.source, s -> new QwenImageProcessor(configs.of(record.ref)));
        PreprocessedImage[] images = new PreprocessedImage[refs.length];
        for (int i = 0; i < refs.length; i++) {
            long start = System.nanoTime();
            try {
                images[i] = processor.process(fetched.imageBytes[i], refs[i]);
                imagesPreprocessed.inc();
                cost.imageDone(System.nanoTime() - start, images[i]);
            } catch (RejectedRecordException e) {
                imagesRejected.inc();
                String message =
                        "image "
                                + (i + 1)
                                + " of "
                                + refs.length
                                + " '"
                                + refs[i].path
                                + "': "
                                + e.getMessage();
                ctx.output(
                        DeadLetters.TAG,
                        DeadLetter.of(
                                record.ref, new RejectedRecordException(e.reason(), message, e)));
                return;
            } finally {
                preprocessNanos.inc(System.nanoTime() - start);
            }
        }
        out.collect(new PreprocessedRecord(record, images));
    }
}
