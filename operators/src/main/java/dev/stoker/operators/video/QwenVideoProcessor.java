package dev.stoker.operators.video;

import dev.stoker.operators.image.BicubicResampler;
import dev.stoker.operators.image.QwenVisionConfig;
import dev.stoker.operators.image.RgbImage;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import java.util.List;
import java.util.OptionalDouble;

/**
 * Qwen-VL video preprocessing from sampled frames to the model's video inputs, matching the Hugging
 * Face video processors of transformers 5.23.0 on CPU: {@code Qwen2VLVideoProcessor._preprocess}
 * ({@code models/qwen2_vl/video_processing_qwen2_vl.py}, Qwen2-VL and Qwen2.5-VL) and {@code
 * Qwen3VLVideoProcessor._preprocess} ({@code models/qwen3_vl/video_processing_qwen3_vl.py}), given
 * the frames they receive (uint8 RGB, sampled by the caller) and {@code cap_pixels_per_frame} as
 * {@link QwenVideoConfig#capPixelsPerFrame}:
 *
 * <ol>
 *   <li>{@link #resize}: the target size ({@link #targetSize}: {@link VideoSmartResize}), then each
 *       frame resized by torchvision's {@code resize(uint8, BICUBIC, antialias=True)} ({@code
 *       TorchvisionBackend.resize} of {@code image_processing_backends.py}), bit-exact with {@link
 *       BicubicResampler.Weights#TORCH}; a frame already at the target size is kept as it is.
 *   <li>{@link #patchify}: {@code rescale_and_normalize} fused as {@code TorchvisionBackend} does
 *       it ({@code _fuse_mean_std_and_rescale_factor}: mean and std as float32 tensors times {@code
 *       1 / rescale_factor}, i.e. {@code m = (float) mean * 255f}, {@code s = (float) std * 255f};
 *       then torchvision's {@code normalize} on the frames cast to float32: {@code (u - m) / s},
 *       one float32 subtraction and one float32 division), the frame count padded to a multiple of
 *       {@code temporal_patch_size} by repeating the last frame, and the processor's {@code
 *       patchify}: {@code view(B, gt, tps, C, gh/m, m, ps, gw/m, m, ps).permute(0, 1, 4, 7, 5, 8,
 *       3, 2, 6, 9)}, so rows run over {@code (gt, gh/m, gw/m, m, m)} and each row is {@code (C,
 *       tps, ps, ps)}. Padding after or before the per-frame steps gives the same values.
 * </ol>
 *
 * <p>The result is bit-identical to the processor's (integer resize, and the same float32
 * operations in the same order); {@code docs/parity.md} gives the measurements.
 *
 * <p>Not thread-safe (the resampler reuses buffers); use one instance per task thread.
 */
public final class QwenVideoProcessor {
    /** Largest Java array; a video whose resized samples exceed it is refused. */
    private static final long MAX_SAMPLES = Integer.MAX_VALUE - 8;

    /**
     * {@code VideoMetadata.sampled_fps} of transformers' {@code video_utils.py} when the container
     * frame rate is unknown.
     */
    public static final double UNKNOWN_FPS = 24;

    /** Receives the rows of {@code pixel_values_videos} in order. */
    @FunctionalInterface
    public interface PatchRows {
        /**
         * @param row one row of {@link QwenVideoConfig#patchDim()} float32 values; the array is
         *     reused for the next row, so copy it before returning
         */
        void accept(float[] row);
    }

    private final QwenVideoConfig config;
    private final BicubicResampler resampler = new BicubicResampler(BicubicResampler.Weights.TORCH);

    /** {@code lut[c * 256 + u]}: the normalised float32 value of channel {@code c} sample u. */
    private final float[] lut = new float[3 * 256];

    private final float[] row;

    /**
     * @param config the model's video processor settings (copied)
     * @throws IllegalArgumentException if the settings are invalid ({@link
     *     QwenVideoConfig#validate()})
     */
    public QwenVideoProcessor(QwenVideoConfig config) {
        config.validate();
        this.config = config.copy();
        this.row = new float[config.patchDim()];
        float scale = (float) (1.0 / QwenVisionConfig.RESCALE_FACTOR);
        for (int c = 0; c < 3; c++) {
            float mean = (float) config.imageMean[c] * scale;
            float std = (float) config.imageStd[c] * scale;
            for (int u = 0; u < 256; u++) {
                lut[c * 256 + u] = ((float) u - mean) / std;
            }
        }
    }

    /**
     * The resized frame size for a video of {@code numFrames} frames of {@code height x width}:
     * {@link VideoSmartResize#perFrame} or {@link VideoSmartResize#wholeVideo} with {@code factor =
     * patch_size * merge_size}, {@code temporal_factor = temporal_patch_size} and the pixel bounds,
     * the upper one first capped as the processor's {@code resize} caps it when {@link
     * QwenVideoConfig#capPixelsPerFrame} is set.
     *
     * @param numFrames frames given (not padded), at least 1
     * @param height frame height in pixels
     * @param width frame width in pixels
     * @return {@code {height, width}} in pixels, multiples of {@link QwenVideoConfig#factor()}
     * @throws RejectedRecordException EXTREME_ASPECT_RATIO, or VIDEO_TOO_SHORT (Qwen3-VL with fewer
     *     frames than {@code temporal_patch_size})
     */
    public int[] targetSize(int numFrames, int height, int width) throws RejectedRecordException {
        if (numFrames < 1) {
            throw new IllegalArgumentException("a video needs at least one frame: " + numFrames);
        }
        int factor = config.factor();
        long maxPixels = config.maxPixels;
        if (config.budget == QwenVideoConfig.PixelBudget.PER_FRAME) {
            if (config.capPixelsPerFrame) {
                // Qwen2VLVideoProcessor.resize
                long total = (long) ((double) config.maxVideoTokens * factor * factor * 0.9);
                maxPixels =
                        Math.max(
                                Math.min(maxPixels, total * config.temporalPatchSize / numFrames),
                                (long) (config.minPixels * 1.05));
            }
            return VideoSmartResize.perFrame(height, width, factor, config.minPixels, maxPixels);
        }
        if (config.capPixelsPerFrame) {
            // Qwen3VLVideoProcessor.resize
            long frameCap = (long) config.maxVideoTokens * factor * factor;
            long perFrame =
                    Math.max(
                            Math.min(frameCap, maxPixels / numFrames),
                            (long) (config.minPixels * 1.05));
            maxPixels = perFrame * numFrames;
        }
        return VideoSmartResize.wholeVideo(
                numFrames,
                height,
                width,
                config.temporalPatchSize,
                factor,
                config.minPixels,
                maxPixels);
    }

    /**
     * Resizes the frames of one video to its {@link #targetSize}.
     *
     * @param frames the sampled frames in order, all of one size, at least one
     * @return the resized frames in a new array, with the grid
     * @throws RejectedRecordException EXTREME_ASPECT_RATIO, VIDEO_TOO_SHORT as {@link #targetSize};
     *     VIDEO_TOO_LARGE when the resized frames (padded to a multiple of {@code
     *     temporal_patch_size}) hold more than {@code 2^31 - 9} samples
     * @throws IllegalArgumentException if there are no frames or their sizes differ
     */
    public ResizedVideo resize(List<RgbImage> frames) throws RejectedRecordException {
        if (frames.isEmpty()) {
            throw new IllegalArgumentException("a video needs at least one frame, got none");
        }
        int srcH = frames.get(0).height();
        int srcW = frames.get(0).width();
        for (int i = 1; i < frames.size(); i++) {
            RgbImage f = frames.get(i);
            if (f.height() != srcH || f.width() != srcW) {
                throw new IllegalArgumentException(
                        "frame "
                                + i
                                + " is "
                                + f.width()
                                + "x"
                                + f.height()
                                + ", frame 0 is "
                                + srcW
                                + "x"
                                + srcH
                                + ": all frames of a video must have one size");
            }
        }
        int t = frames.size();
        int[] hw = targetSize(t, srcH, srcW);
        int h = hw[0];
        int w = hw[1];
        int tps = config.temporalPatchSize;
        int gridT = (t + tps - 1) / tps;
        long samples = (long) gridT * tps * h * w * 3;
        if (samples > MAX_SAMPLES) {
            throw new RejectedRecordException(
                    RejectReason.VIDEO_TOO_LARGE,
                    t
                            + " frames resized to "
                            + w
                            + "x"
                            + h
                            + " are "
                            + samples
                            + " samples, more than one array holds ("
                            + MAX_SAMPLES
                            + ")");
        }
        int frameBytes = h * w * 3;
        byte[] rgb = new byte[t * frameBytes];
        for (int i = 0; i < t; i++) {
            RgbImage resized = resampler.resize(frames.get(i), w, h);
            System.arraycopy(resized.pixels(), 0, rgb, i * frameBytes, frameBytes);
        }
        int ps = config.patchSize;
        return new ResizedVideo(rgb, t, h, w, gridT, h / ps, w / ps);
    }

    /**
     * Rescales, normalises and patchifies resized frames, handing the rows of {@code
     * pixel_values_videos} to {@code out} in order: {@code video.rows()} rows of {@link
     * QwenVideoConfig#patchDim()} values.
     *
     * @param video frames resized by this processor's {@link #resize} (or to the same grid)
     * @param out receives the rows
     * @throws IllegalArgumentException if the video's grid does not fit this processor's patch and
     *     merge sizes
     */
    public void patchify(ResizedVideo video, PatchRows out) {
        int ps = config.patchSize;
        int m = config.mergeSize;
        int tps = config.temporalPatchSize;
        int gh = video.gridH();
        int gw = video.gridW();
        if (gh * ps != video.height()
                || gw * ps != video.width()
                || gh % m != 0
                || gw % m != 0
                || video.gridT() * tps < video.frames()
                || (video.gridT() - 1) * tps >= video.frames()) {
            throw new IllegalArgumentException(
                    "a video of "
                            + video.frames()
                            + " frames of "
                            + video.width()
                            + "x"
                            + video.height()
                            + " does not fit the grid "
                            + video.gridT()
                            + "x"
                            + gh
                            + "x"
                            + gw
                            + " with patch "
                            + ps
                            + ", merge "
                            + m
                            + ", temporal patch "
                            + tps);
        }
        byte[] rgb = video.rgb();
        int width = video.width();
        int frameBytes = video.height() * width * 3;
        int patchArea = ps * ps;
        for (int gt = 0; gt < video.gridT(); gt++) {
            for (int bh = 0; bh < gh / m; bh++) {
                for (int bw = 0; bw < gw / m; bw++) {
                    for (int mh = 0; mh < m; mh++) {
                        for (int mw = 0; mw < m; mw++) {
                            int y0 = (bh * m + mh) * ps;
                            int x0 = (bw * m + mw) * ps;
                            for (int tt = 0; tt < tps; tt++) {
                                // frames past the last repeat it (the processor's padding)
                                int f = Math.min(gt * tps + tt, video.frames() - 1);
                                for (int y = 0; y < ps; y++) {
                                    int src = f * frameBytes + ((y0 + y) * width + x0) * 3;
                                    int dst = tt * patchArea + y * ps;
                                    for (int x = 0; x < ps; x++, src += 3) {
                                        row[dst + x] = lut[rgb[src] & 0xFF];
                                        row[dst + tps * patchArea + x] =
                                                lut[256 + (rgb[src + 1] & 0xFF)];
                                        row[dst + 2 * tps * patchArea + x] =
                                                lut[512 + (rgb[src + 2] & 0xFF)];
                                    }
                                }
                            }
                            out.accept(row);
                        }
                    }
                }
            }
        }
    }

    /**
     * {@link #patchify(ResizedVideo, PatchRows)} into a new array.
     *
     * @return {@code pixel_values_videos}, row-major {@code (video.rows(), patchDim)}
     * @throws IllegalArgumentException as {@link #patchify(ResizedVideo, PatchRows)}
     */
    public float[] patchify(ResizedVideo video) {
        int dim = row.length;
        float[] values = new float[Math.toIntExact((long) video.rows() * dim)];
        int[] next = {0};
        patchify(
                video,
                r -> {
                    System.arraycopy(r, 0, values, next[0], dim);
                    next[0] += dim;
                });
        return values;
    }

    /**
     * All of it: {@link #resize}, {@link #patchify(ResizedVideo)}, and {@code second_per_grid_ts =
     * temporal_patch_size / sampledFps} for a model that takes it ({@code
     * Qwen2_5_VLProcessor._process_videos}).
     *
     * @param frames the sampled frames in order, all of one size, at least one
     * @param sampledFps frames per second of the sampled frames ({@link #sampledFps}), positive
     * @return the model inputs of this video
     * @throws RejectedRecordException as {@link #resize}
     * @throws IllegalArgumentException as {@link #resize}, or if {@code sampledFps} is not positive
     */
    public PreprocessedVideo process(List<RgbImage> frames, double sampledFps)
            throws RejectedRecordException {
        if (!(sampledFps > 0) || Double.isInfinite(sampledFps)) {
            throw new IllegalArgumentException("sampled fps must be positive: " + sampledFps);
        }
        ResizedVideo resized = resize(frames);
        OptionalDouble secondPerGridT =
                config.secondPerGridTs
                        ? OptionalDouble.of(config.temporalPatchSize / sampledFps)
                        : OptionalDouble.empty();
        return new PreprocessedVideo(patchify(resized), resized, secondPerGridT);
    }

    /**
     * The frame rate of sampled frames as transformers' {@code VideoMetadata.sampled_fps} ({@code
     * video_utils.py}) computes it: {@code sampledFrames / totalFrames * containerFps}, or {@link
     * #UNKNOWN_FPS} when the container's rate is unknown.
     *
     * @param sampledFrames frames sampled, at least 1
     * @param totalFrames frames in the video, at least {@code sampledFrames}
     * @param containerFps the video's frame rate, or 0 (or NaN) when unknown
     * @return frames per second, positive
     * @throws IllegalArgumentException if the counts are out of range
     */
    public static double sampledFps(int sampledFrames, long totalFrames, double containerFps) {
        if (sampledFrames < 1 || totalFrames < sampledFrames) {
            throw new IllegalArgumentException(
                    "need 1 <= sampled frames <= total frames: "
                            + sampledFrames
                            + ", "
                            + totalFrames);
        }
        if (!(containerFps > 0) || Double.isInfinite(containerFps)) {
            return UNKNOWN_FPS;
        }
        return (double) sampledFrames / totalFrames * containerFps;
    }
}
