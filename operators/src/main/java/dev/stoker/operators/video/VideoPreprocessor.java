package dev.stoker.operators.video;

import dev.stoker.operators.image.RgbImage;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SampledVideo;
import dev.stoker.operators.model.VideoRef;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;

/**
 * One video from its file to the model's inputs, as the Hugging Face processor of the model does it
 * with frame sampling on ({@code do_sample_frames=True}): {@link VideoDecoder} reads the
 * container's frame count and rate, the model's {@link FrameRule} picks the frame indices for the
 * requested fps, the decoder decodes those frames to RGB, and {@link QwenVideoProcessor} resizes,
 * normalises and patchifies them with the sampled frames' rate ({@link
 * QwenVideoProcessor#sampledFps}). {@link #preprocess(Path)} does all of it; {@link #sample(byte[],
 * VideoRef)}, what the job's media stage runs per video, stops after the resize (normalisation and
 * patchification happen in the sink, as for images) and reads the video from memory; {@link
 * #sample(Path, VideoRef)} does the same from a file read as if it were in memory (the fetch
 * stage's spill file of a large video).
 *
 * <p>Not thread-safe (one per task thread, as the processor).
 */
public final class VideoPreprocessor {
    /** Which frames the sampling picks: the model's own video processor's rule. */
    public enum FrameRule {
        /** Qwen2-VL and Qwen2.5-VL: {@link FrameSampling#qwen2Vl} (a float32 arange, floored). */
        QWEN2_VL,
        /** Qwen3-VL: {@link FrameSampling#qwen3Vl} ({@code linspace}, rounded half to even). */
        QWEN3_VL
    }

    /**
     * A preprocessed video and how it was sampled, for the sample's record.
     *
     * @param metadata the container's facts as the decoder read them
     * @param frameIndices the frames decoded, in decode order (0-based), ascending
     * @param sampledFps frames per second of those frames ({@link QwenVideoProcessor#sampledFps})
     * @param video the model inputs
     */
    public record Result(
            VideoMetadata metadata,
            int[] frameIndices,
            double sampledFps,
            PreprocessedVideo video) {}

    /** The decoded frames of one video and how they were sampled. */
    private record Sampled(
            VideoMetadata metadata, int[] indices, List<RgbImage> frames, double sampledFps) {}

    private final QwenVideoConfig config;
    private final FrameRule rule;
    private final double fps;
    private final VideoLimits limits;
    private final QwenVideoProcessor processor;

    /**
     * @param config the model's video processor settings ({@code ModelPreset.videoConfig()})
     * @param rule the frame-index rule
     * @param fps frames per second to sample, positive (the processors' default is 2)
     * @param limits refused before decoding: frames larger than, or more frames than, these
     * @throws IllegalArgumentException if {@code fps} is not positive and finite
     */
    public VideoPreprocessor(
            QwenVideoConfig config, FrameRule rule, double fps, VideoLimits limits) {
        if (!(fps > 0) || Double.isInfinite(fps)) {
            throw new IllegalArgumentException("fps must be positive: " + fps);
        }
        this.config = config;
        this.rule = rule;
        this.fps = fps;
        this.limits = limits;
        this.processor = new QwenVideoProcessor(config);
    }

    /**
     * Decodes, samples and preprocesses the video in {@code file}.
     *
     * @param file a video file (any container and codec FFmpeg reads)
     * @return the model inputs and the sampling
     * @throws RejectedRecordException UNSUPPORTED_VIDEO, CORRUPT_VIDEO, VIDEO_TOO_MANY_PIXELS,
     *     VIDEO_TOO_MANY_FRAMES (decoding, or sampled frames over {@link
     *     VideoLimits#maxSampledBytes()}; CORRUPT_VIDEO also when no sampled frame decodes),
     *     VIDEO_TOO_SHORT (sampling: also a container that reports no frame count),
     *     EXTREME_ASPECT_RATIO, VIDEO_TOO_LARGE (resizing)
     */
    public Result preprocess(Path file) throws RejectedRecordException {
        try (VideoDecoder decoder = VideoDecoder.open(file, limits)) {
            Sampled s = decodeSampled(decoder, fps);
            return new Result(
                    s.metadata(),
                    s.indices(),
                    s.sampledFps(),
                    processor.process(s.frames(), s.sampledFps()));
        }
    }

    /**
     * Decodes and samples the video held in {@code bytes} and resizes its frames, as {@link
     * #preprocess(Path)} does up to {@link QwenVideoProcessor#resize}, with the video's own
     * overrides: its {@link VideoRef#fps} for the sampling, its {@link VideoRef#minPixels} and
     * {@link VideoRef#maxPixels} as each frame's bounds (qwen-vl-utils' meaning). For a model whose
     * processor bounds all frames together ({@link QwenVideoConfig.PixelBudget#WHOLE_VIDEO},
     * Qwen3-VL) a per-frame bound is multiplied by the processor's {@code t_bar = round(frames /
     * temporal_patch_size) * temporal_patch_size}.
     *
     * @param bytes the video file's bytes (any container and codec FFmpeg reads), not modified
     * @param ref the video's path (for messages) and overrides (0 = this preprocessor's)
     * @return the resized uint8 frames with the grid and the sampling ({@link SampledVideo}; its
     *     {@code secondPerGridT} is {@code temporal_patch_size / sampledFps} for every model)
     * @throws RejectedRecordException as {@link #preprocess(Path)}
     */
    public SampledVideo sample(byte[] bytes, VideoRef ref) throws RejectedRecordException {
        try (VideoDecoder decoder = VideoDecoder.open(bytes, ref.path, limits)) {
            return sample(decoder, ref);
        }
    }

    /**
     * Does what {@link #sample(byte[], VideoRef)} does with the file's bytes, reading them from
     * {@code file} as needed instead of from memory ({@link VideoDecoder#openAsBytes}): the same
     * result, or the same rejection, as for those bytes in memory. For the fetch stage's spill
     * files.
     *
     * @param file a local file holding the video's bytes, not modified (nor deleted)
     * @param ref the video's path in the dataset (for messages) and overrides
     * @return the resized uint8 frames with the grid and the sampling
     * @throws RejectedRecordException as {@link #sample(byte[], VideoRef)}; CORRUPT_VIDEO also when
     *     the file cannot be read
     */
    public SampledVideo sample(Path file, VideoRef ref) throws RejectedRecordException {
        try (VideoDecoder decoder = VideoDecoder.openAsBytes(file, ref.path, limits)) {
            return sample(decoder, ref);
        }
    }

    private SampledVideo sample(VideoDecoder decoder, VideoRef ref) throws RejectedRecordException {
        Sampled s = decodeSampled(decoder, ref.fps > 0 ? ref.fps : fps);
        ResizedVideo resized = processorFor(ref, s.frames().size()).resize(s.frames());
        SampledVideo out = new SampledVideo();
        out.resizedRgb = resized.rgb();
        out.frames = resized.frames();
        out.gridT = resized.gridT();
        out.gridH = resized.gridH();
        out.gridW = resized.gridW();
        out.frameIndices = s.indices();
        out.videoFps = s.metadata().fps();
        out.sampledFps = s.sampledFps();
        out.secondPerGridT = config.temporalPatchSize / s.sampledFps();
        return out;
    }

    /** The model's frame-index rule for {@code rate}, then the frames at those indices. */
    private Sampled decodeSampled(VideoDecoder decoder, double rate)
            throws RejectedRecordException {
        VideoMetadata meta = decoder.metadata();
        int[] indices =
                switch (rule) {
                    case QWEN2_VL ->
                            FrameSampling.qwen2Vl(
                                    meta.totalFrames(),
                                    meta.fps(),
                                    rate,
                                    config.minFrames,
                                    config.maxFrames,
                                    config.temporalPatchSize);
                    case QWEN3_VL ->
                            FrameSampling.qwen3Vl(
                                    meta.totalFrames(),
                                    meta.fps(),
                                    rate,
                                    config.minFrames,
                                    config.maxFrames);
                };
        long sampledBytes = (long) indices.length * meta.width() * meta.height() * 3;
        if (sampledBytes > limits.maxSampledBytes()) {
            throw new RejectedRecordException(
                    RejectReason.VIDEO_TOO_MANY_FRAMES,
                    indices.length
                            + " sampled frames of "
                            + meta.width()
                            + "x"
                            + meta.height()
                            + " are "
                            + sampledBytes
                            + " bytes of RGB, more than the limit of "
                            + limits.maxSampledBytes());
        }
        VideoDecoder.DecodedFrames frames = decoder.decode(indices);
        if (frames.frames().isEmpty()) {
            throw new RejectedRecordException(
                    RejectReason.CORRUPT_VIDEO,
                    "none of the sampled frames "
                            + Arrays.toString(indices)
                            + " decoded, of "
                            + meta.totalFrames()
                            + " the container reports");
        }
        double sampledFps =
                QwenVideoProcessor.sampledFps(
                        frames.indices().length, meta.totalFrames(), meta.fps());
        return new Sampled(meta, frames.indices(), frames.frames(), sampledFps);
    }

    /**
     * This preprocessor's processor, or a new one with {@code ref}'s pixel bounds (cheap: a
     * 768-entry table and an empty resampler).
     */
    private QwenVideoProcessor processorFor(VideoRef ref, int frames)
            throws RejectedRecordException {
        if (ref.minPixels <= 0 && ref.maxPixels <= 0) {
            return processor;
        }
        long scale = 1;
        if (config.budget == QwenVideoConfig.PixelBudget.WHOLE_VIDEO) {
            int tps = config.temporalPatchSize;
            scale = Math.max(1, (long) Math.rint((double) frames / tps) * tps);
        }
        // a record's own bounds may lower the job's budget or raise its ceiling, never force frames
        // above it: min_pixels beyond stoker.video.max-pixels would upscale without a bound
        long min = ref.minPixels > 0 ? saturatedProduct(ref.minPixels, scale) : config.minPixels;
        long max = ref.maxPixels > 0 ? saturatedProduct(ref.maxPixels, scale) : config.maxPixels;
        if (min > config.maxPixels) {
            throw new RejectedRecordException(
                    RejectReason.VIDEO_TOO_LARGE,
                    "the video's min_pixels "
                            + ref.minPixels
                            + " asks for more pixels than the job's stoker.video.max-pixels ("
                            + config.maxPixels
                            + (scale > 1 ? ", over all " + scale + " frames" : ", per frame")
                            + ")");
        }
        // one bound given may cross the configured other one: the given one wins
        if (min > max) {
            if (ref.minPixels > 0) {
                max = min;
            } else {
                min = max;
            }
        }
        QwenVideoConfig c = config.copy();
        c.minPixels = min;
        c.maxPixels = max;
        return new QwenVideoProcessor(c);
    }

    private static long saturatedProduct(long a, long b) {
        return a > Long.MAX_VALUE / b ? Long.MAX_VALUE : a * b;
    }
}
