package dev.stoker.operators.video;

import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import java.nio.file.Path;
import java.util.Arrays;

/**
 * One video from its file to the model's inputs, as the Hugging Face processor of the model does it
 * with frame sampling on ({@code do_sample_frames=True}): {@link VideoDecoder} reads the
 * container's frame count and rate, the model's {@link FrameRule} picks the frame indices for the
 * requested fps, the decoder decodes those frames to RGB, and {@link QwenVideoProcessor} resizes,
 * normalises and patchifies them with the sampled frames' rate ({@link
 * QwenVideoProcessor#sampledFps}). What the video stage runs per video.
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
     *     VIDEO_TOO_MANY_FRAMES (decoding; CORRUPT_VIDEO also when no sampled frame decodes),
     *     VIDEO_TOO_SHORT (sampling: also a container that reports no frame count),
     *     EXTREME_ASPECT_RATIO, VIDEO_TOO_LARGE (resizing)
     */
    public Result preprocess(Path file) throws RejectedRecordException {
        try (VideoDecoder decoder = VideoDecoder.open(file, limits)) {
            VideoMetadata meta = decoder.metadata();
            int[] indices =
                    switch (rule) {
                        case QWEN2_VL ->
                                FrameSampling.qwen2Vl(
                                        meta.totalFrames(),
                                        meta.fps(),
                                        fps,
                                        config.minFrames,
                                        config.maxFrames,
                                        config.temporalPatchSize);
                        case QWEN3_VL ->
                                FrameSampling.qwen3Vl(
                                        meta.totalFrames(),
                                        meta.fps(),
                                        fps,
                                        config.minFrames,
                                        config.maxFrames);
                    };
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
            return new Result(
                    meta,
                    frames.indices(),
                    sampledFps,
                    processor.process(frames.frames(), sampledFps));
        }
    }
}
