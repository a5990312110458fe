package dev.stoker.operators.media;

import dev.stoker.operators.image.Patchifier;
import dev.stoker.operators.image.PreprocessMetrics;
import dev.stoker.operators.image.QwenImageProcessor;
import dev.stoker.operators.image.QwenVisionConfig;
import dev.stoker.operators.metrics.MetricNames;
import dev.stoker.operators.model.DeadLetter;
import dev.stoker.operators.model.DeadLetters;
import dev.stoker.operators.model.FetchedRecord;
import dev.stoker.operators.model.ImageRef;
import dev.stoker.operators.model.PerSource;
import dev.stoker.operators.model.PreprocessedImage;
import dev.stoker.operators.model.PreprocessedRecord;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SampledVideo;
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.VideoRef;
import dev.stoker.operators.video.VideoPreprocessor;
import dev.stoker.operators.video.VideoSettings;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.types.Either;
import org.apache.flink.util.Collector;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The CPU-heavy media stage: decodes and resizes every image of a fetched record with {@link
 * QwenImageProcessor}, with the vision config of the record's mixture source (a source may have its
 * own pixel budget), and decodes, samples and resizes every video with {@link
 * VideoPreprocessor#sample} (the job's video settings; a video's own {@code fps} and pixel bounds
 * from the record), from memory or, for a large video, from the fetch stage's spill file ({@link
 * FetchedRecord#videoFiles}), which it deletes as soon as the video is decoded or rejected, and
 * whichever way the record ends (also as a dead letter, or on an unexpected error); a video given
 * as a list of frame images decodes its frames with the image decoder and resizes them all,
 * unsampled, with {@link VideoPreprocessor#sampleFrames}. Normalisation and patchification, a few
 * percent of the work, happen in the sink ({@link Patchifier}): images leave as {@link
 * PreprocessedImage}, videos as {@link SampledVideo}, both uint8.
 *
 * <p>Input: {@code Either.Left} dead letters from the fetch stage, forwarded unchanged to {@link
 * DeadLetters#TAG}; {@code Either.Right} fetched records. Output: one {@link PreprocessedRecord}
 * per record whose images and videos all preprocess, in record order; a record with any rejected
 * image or video becomes one {@link DeadLetter} on {@link DeadLetters#TAG} whose message names it
 * ({@code image 2 of 3 'images/x.png': ...}, {@code video 1 of 1 'clips/a.mp4': ...}, {@code video
 * 1 of 1 8 frames 'f/1.jpg' .. 'f/8.jpg': frame 3 of 8 'f/3.jpg': ...}). Text-only records pass
 * with empty arrays.
 *
 * <p>Metrics on the operator's group: counters {@code imagesPreprocessed}, {@code imagesRejected}
 * and {@code imagePreprocessNanos} (total wall time in {@link QwenImageProcessor#process},
 * nanoseconds; divide its rate by the rate of {@code imagesPreprocessed} for the mean time per
 * image), the cost per megapixel ({@link PreprocessMetrics}); for videos {@code
 * videosPreprocessed}, {@code videosRejected}, {@code videoPreprocessNanos} and {@code
 * videoFramesSampled}.
 */
public class PreprocessMediaFunction
        extends ProcessFunction<Either<DeadLetter, FetchedRecord>, PreprocessedRecord> {
    private static final long serialVersionUID = 1L;
    private static final Logger LOG = LoggerFactory.getLogger(PreprocessMediaFunction.class);

    private final PerSource<QwenVisionConfig> configs;
    private final VideoSettings video;
    private transient Map<String, QwenImageProcessor> processors;
    private transient VideoPreprocessor videos;
    private transient Counter imagesPreprocessed;
    private transient Counter imagesRejected;
    private transient Counter preprocessNanos;
    private transient Counter videosPreprocessed;
    private transient Counter videosRejected;
    private transient Counter videoNanos;
    private transient Counter videoFrames;
    private transient PreprocessMetrics cost;

    /**
     * @param configs each source's vision config (they differ at most in the pixel budget)
     * @param video the video settings (one for the job)
     */
    public PreprocessMediaFunction(PerSource<QwenVisionConfig> configs, VideoSettings video) {
        this.configs = configs;
        this.video = video;
    }

    @Override
    public void open(OpenContext openContext) {
        processors = new HashMap<>();
        videos = video.newPreprocessor();
        QwenImageProcessor any = new QwenImageProcessor(configs.first());
        MetricGroup metrics = getRuntimeContext().getMetricGroup();
        imagesPreprocessed = metrics.counter(MetricNames.Preprocess.IMAGES_PREPROCESSED);
        imagesRejected = metrics.counter(MetricNames.Preprocess.IMAGES_REJECTED);
        preprocessNanos = metrics.counter(MetricNames.Preprocess.IMAGE_PREPROCESS_NANOS);
        videosPreprocessed = metrics.counter(MetricNames.Preprocess.VIDEOS_PREPROCESSED);
        videosRejected = metrics.counter(MetricNames.Preprocess.VIDEOS_REJECTED);
        videoNanos = metrics.counter(MetricNames.Preprocess.VIDEO_PREPROCESS_NANOS);
        videoFrames = metrics.counter(MetricNames.Preprocess.VIDEO_FRAMES_SAMPLED);
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
        try {
            preprocess(fetched, ctx, out);
        } finally {
            // the spill files of videos not reached (a rejected image or video ends the record)
            for (String file : fetched.videoFiles) {
                deleteSpillFile(file);
            }
        }
    }

    private void preprocess(FetchedRecord fetched, Context ctx, Collector<PreprocessedRecord> out) {
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
                reject(ctx, record, "image", i, refs.length, "'" + refs[i].path + "'", e);
                return;
            } finally {
                preprocessNanos.inc(System.nanoTime() - start);
            }
        }
        VideoRef[] videoRefs = record.videos == null ? new VideoRef[0] : record.videos;
        SampledVideo[] sampled = new SampledVideo[videoRefs.length];
        for (int i = 0; i < videoRefs.length; i++) {
            long start = System.nanoTime();
            String file = fetched.videoFile(i);
            try {
                sampled[i] =
                        videoRefs[i].givenAsFrames()
                                ? videos.sampleFrames(fetched.framesOf(i), videoRefs[i])
                                : file != null
                                        ? videos.sample(Path.of(file), videoRefs[i])
                                        : videos.sample(fetched.videoBytes[i], videoRefs[i]);
                videosPreprocessed.inc();
                videoFrames.inc(sampled[i].frames);
            } catch (RejectedRecordException e) {
                videosRejected.inc();
                String name =
                        videoRefs[i].givenAsFrames()
                                ? videoRefs[i].name()
                                : "'" + videoRefs[i].path + "'";
                reject(ctx, record, "video", i, videoRefs.length, name, e);
                return;
            } finally {
                deleteSpillFile(file);
                videoNanos.inc(System.nanoTime() - start);
            }
        }
        PreprocessedRecord result = new PreprocessedRecord(record, images);
        result.videos = sampled;
        out.collect(result);
    }

    /**
     * Deletes a video's spill file ({@link FetchedRecord#videoFiles}) once it is no longer needed;
     * does nothing for null (a video in memory) or a file already deleted. A file that cannot be
     * deleted is logged and left to the fetch operator, which deletes its spill directory on close.
     */
    private static void deleteSpillFile(String file) {
        if (file == null) {
            return;
        }
        try {
            Files.deleteIfExists(Path.of(file));
        } catch (IOException e) {
            LOG.warn("Could not delete the video spill file {}", file, e);
        }
    }

    /**
     * The record's dead letter, naming the image or video ({@code what} {@code index}; {@code name}
     * as the message quotes it).
     */
    private static void reject(
            Context ctx,
            SftRecord record,
            String what,
            int index,
            int count,
            String name,
            RejectedRecordException e) {
        String message =
                what + " " + (index + 1) + " of " + count + " " + name + ": " + e.getMessage();
        ctx.output(
                DeadLetters.TAG,
                DeadLetter.of(record.ref, new RejectedRecordException(e.reason(), message, e)));
    }
}
