package dev.stoker.operators.video;

import dev.stoker.operators.image.ImageDecoder;
import dev.stoker.operators.image.RgbImage;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SampledVideo;
import dev.stoker.operators.model.VideoRef;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;

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
 * stage's spill file of a large video), and {@link #sampleFrames(byte[][], VideoRef)} for a video
 * given as a list of frame images.
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
    private ImageDecoder frameDecoder;

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
        return sampled(resized, s.indices(), s.metadata().fps(), s.sampledFps());
    }

    /** The media stage's output for {@code resized}, sampled at {@code indices}. */
    private SampledVideo sampled(
            ResizedVideo resized, int[] indices, double videoFps, double sampledFps) {
        SampledVideo out = new SampledVideo();
        out.resizedRgb = resized.rgb();
        out.frames = resized.frames();
        out.gridT = resized.gridT();
        out.gridH = resized.gridH();
        out.gridW = resized.gridW();
        out.frameIndices = indices;
        out.videoFps = videoFps;
        out.sampledFps = sampledFps;
        out.secondPerGridT = config.temporalPatchSize / sampledFps;
        return out;
    }

    /**
     * A video given as a list of frame images, from the frames' encoded files to the resized uint8
     * frames, as transformers 5.23.0 does with such a video: every frame, in order, none sampled
     * ({@code BaseVideoProcessor._decode_and_sample_videos} in {@code video_processing_utils.py}
     * loads them with {@code fetch_images} and stacks them; it refuses frame sampling for them, so
     * the processor runs with {@code do_sample_frames=False}), then the same resize as {@link
     * #sample} ({@link QwenVideoProcessor#resize}, with the video's own pixel bounds as there). The
     * metadata is what {@code make_batched_metadata} gives a frame list: {@code total_num_frames} =
     * the frame count, {@code frames_indices} = 0 .. n-1, and {@code fps} the record's ({@link
     * VideoRef#fps}, passed as {@code video_metadata}) or, when it gives none, unknown: 24, as
     * {@code VideoMetadata.sampled_fps} ({@code video_utils.py}) and {@code
     * Qwen3VLProcessor.replace_video_token} assume.
     *
     * <p>Each frame is decoded by Stoker's image decoder ({@link ImageDecoder}, Pillow's decoding;
     * the reference loads frames with torchvision's {@code decode_image} in RGB mode, which gives
     * the same pixels for opaque images; a frame with alpha is composited over white as Stoker does
     * for images, where torchvision drops the alpha channel: docs/parity.md).
     *
     * @param frames the frames' encoded image files (JPEG, PNG, ... as {@link ImageDecoder} reads),
     *     in order, at least one, one per {@code ref.frames} entry; not modified
     * @param ref the video (its {@link VideoRef#frames} name the frames in messages) and overrides
     * @return the resized uint8 frames ({@code resizedRgb}: (frames, gridH * patch, gridW * patch,
     *     3), interleaved RGB) with the grid; {@code frameIndices} 0 .. n-1, {@code videoFps} and
     *     {@code sampledFps} the frames' rate (frames per second, 24 when unknown), {@code
     *     secondPerGridT} {@code temporal_patch_size / sampledFps} in seconds
     * @throws RejectedRecordException VIDEO_TOO_MANY_FRAMES (more frames than {@link
     *     VideoLimits#maxFrames()}, or their RGB over {@link VideoLimits#maxSampledBytes()}, both
     *     checked before decoding all); a frame's decoding reason (UNSUPPORTED_IMAGE,
     *     CORRUPT_IMAGE, IMAGE_TOO_MANY_PIXELS over {@link VideoLimits#maxPixelsPerFrame()}) with
     *     {@code frame i of n 'path': } before its message; CORRUPT_VIDEO for a frame whose size
     *     differs from the first's (the reference's {@code torch.stack} fails); VIDEO_TOO_SHORT,
     *     EXTREME_ASPECT_RATIO, VIDEO_TOO_LARGE from resizing
     * @throws IllegalArgumentException if there are no frames, or not one per {@code ref.frames}
     */
    public SampledVideo sampleFrames(byte[][] frames, VideoRef ref) throws RejectedRecordException {
        int n = frames.length;
        if (n == 0 || ref.frames == null || ref.frames.length != n) {
            throw new IllegalArgumentException(
                    n
                            + " frame files for a video given as "
                            + (ref.frames == null ? "a file" : ref.frames.length + " frames"));
        }
        if (n > limits.maxFrames()) {
            throw new RejectedRecordException(
                    RejectReason.VIDEO_TOO_MANY_FRAMES,
                    n + " frame images, more than the limit of " + limits.maxFrames());
        }
        if (frameDecoder == null) {
            frameDecoder = new ImageDecoder();
        }
        List<RgbImage> decoded = new ArrayList<>(n);
        for (int f = 0; f < n; f++) {
            RgbImage image;
            try {
                image = frameDecoder.decode(frames[f], limits.maxPixelsPerFrame());
            } catch (RejectedRecordException e) {
                throw new RejectedRecordException(
                        e.reason(), frameName(f, ref) + ": " + e.getMessage(), e);
            }
            int w = image.width();
            int h = image.height();
            if (f == 0) {
                long bytes = (long) n * w * h * 3;
                if (bytes > limits.maxSampledBytes()) {
                    throw new RejectedRecordException(
                            RejectReason.VIDEO_TOO_MANY_FRAMES,
                            n
                                    + " frame images of "
                                    + w
                                    + "x"
                                    + h
                                    + " are "
                                    + bytes
                                    + " bytes of RGB, more than the limit of "
                                    + limits.maxSampledBytes());
                }
            } else if (w != decoded.get(0).width() || h != decoded.get(0).height()) {
                throw new RejectedRecordException(
                        RejectReason.CORRUPT_VIDEO,
                        String.format(
                                Locale.ROOT,
                                "%s is %dx%d, but the first frame is %dx%d: a video's frames must"
                                        + " all have one size",
                                frameName(f, ref),
                                w,
                                h,
                                decoded.get(0).width(),
                                decoded.get(0).height()));
            }
            // the decoder reuses its pixel buffer: keep a copy of exactly this frame
            decoded.add(new RgbImage(w, h, Arrays.copyOf(image.pixels(), w * h * 3)));
        }
        double rate =
                ref.fps > 0 && Double.isFinite(ref.fps) ? ref.fps : QwenVideoProcessor.UNKNOWN_FPS;
        ResizedVideo resized = processorFor(ref, n).resize(decoded);
        int[] indices = new int[n];
        Arrays.setAll(indices, i -> i);
        return sampled(resized, indices, rate, QwenVideoProcessor.sampledFps(n, n, rate));
    }

    private static String frameName(int index, VideoRef ref) {
        return "frame " + (index + 1) + " of " + ref.frames.length + " '" + ref.frames[index] + "'";
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
