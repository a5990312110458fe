package dev.stoker.operators.video;

import dev.stoker.operators.image.SmartResize;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;

/**
 * The resized frame size of a video, as the Hugging Face video processors of transformers 5.23.0
 * compute it. All arithmetic is IEEE double as in Python (integer products below {@code 2^53} are
 * exact there, so Python's int/int true division rounds the same); Python's {@code round} is
 * half-to-even ({@link Math#rint}).
 *
 * <p>{@link #perFrame}: {@code smart_resize} of {@code
 * models/qwen2_vl/video_processing_qwen2_vl.py} (Qwen2-VL, Qwen2.5-VL), per frame. It differs from
 * the image path's {@link SmartResize} in one place, as transformers does: the sides are rounded to
 * a multiple of {@code factor} without the floor of {@code factor}, so a side below {@code factor /
 * 2} rounds to 0 and the min-pixels rule scales the frame up.
 *
 * <p>{@link #wholeVideo}: {@code smart_resize} of {@code
 * models/qwen3_vl/video_processing_qwen3_vl.py} (Qwen3-VL): the bounds apply to {@code t_bar * h *
 * w} with {@code t_bar = round(T / tf) * tf}; a side below {@code factor} first scales both sides
 * up until it reaches {@code factor} (truncated to int), and fewer than {@code tf} frames are
 * refused.
 */
public final class VideoSmartResize {
    private VideoSmartResize() {}

    /**
     * Qwen2-VL / Qwen2.5-VL: the size of each frame.
     *
     * <pre>
     * h_bar = round(h / factor) * factor; w_bar likewise
     * if h_bar * w_bar > max: beta = sqrt(h * w / max); h_bar = max(factor, floor(h / beta / factor) * factor) ...
     * elif h_bar * w_bar < min: beta = sqrt(min / (h * w)); h_bar = ceil(h * beta / factor) * factor ...
     * </pre>
     *
     * @param height frame height in pixels, at least 1
     * @param width frame width in pixels, at least 1
     * @param factor both sides become multiples of this ({@code patch_size * merge_size})
     * @param minPixels smallest frame area, at least 1
     * @param maxPixels largest frame area
     * @return {@code {height, width}} in pixels, positive multiples of {@code factor}
     * @throws RejectedRecordException EXTREME_ASPECT_RATIO when the longer side is more than 200
     *     times the shorter
     */
    public static int[] perFrame(int height, int width, int factor, long minPixels, long maxPixels)
            throws RejectedRecordException {
        checkPositive(height, width);
        checkAspect(height, width);
        return bounded(1, 1, height, width, factor, minPixels, maxPixels);
    }

    /**
     * Qwen3-VL: the size of every frame of a video of {@code numFrames} frames.
     *
     * @param numFrames frames sampled (before any padding to a multiple of {@code temporalFactor})
     * @param height frame height in pixels, at least 1
     * @param width frame width in pixels, at least 1
     * @param temporalFactor {@code temporal_patch_size}
     * @param factor both sides become multiples of this ({@code patch_size * merge_size})
     * @param minPixels smallest {@code t_bar * h * w}, at least 1
     * @param maxPixels largest {@code t_bar * h * w}
     * @return {@code {height, width}} in pixels, positive multiples of {@code factor}
     * @throws RejectedRecordException VIDEO_TOO_SHORT when {@code numFrames < temporalFactor},
     *     EXTREME_ASPECT_RATIO as {@link #perFrame}
     */
    public static int[] wholeVideo(
            int numFrames,
            int height,
            int width,
            int temporalFactor,
            int factor,
            long minPixels,
            long maxPixels)
            throws RejectedRecordException {
        checkPositive(height, width);
        if (numFrames < temporalFactor) {
            throw new RejectedRecordException(
                    RejectReason.VIDEO_TOO_SHORT,
                    numFrames
                            + " frame(s): the model's video processor needs at least "
                            + temporalFactor
                            + " (temporal_patch_size)");
        }
        int h = height;
        int w = width;
        if (h < factor || w < factor) {
            double scale = Math.max((double) factor / h, (double) factor / w);
            h = (int) (h * scale);
            w = (int) (w * scale);
        }
        checkAspect(h, w);
        long tBar = (long) Math.rint((double) numFrames / temporalFactor) * temporalFactor;
        return bounded(numFrames, tBar, h, w, factor, minPixels, maxPixels);
    }

    /** The bounds of both variants: {@code frames * h * w} against the bounds via {@code tBar}. */
    private static int[] bounded(
            long frames,
            long tBar,
            int height,
            int width,
            int factor,
            long minPixels,
            long maxPixels) {
        long hBar = (long) Math.rint((double) height / factor) * factor;
        long wBar = (long) Math.rint((double) width / factor) * factor;
        double volume = (double) (frames * height * width);
        if (tBar * hBar * wBar > maxPixels) {
            double beta = Math.sqrt(volume / maxPixels);
            hBar = Math.max(factor, (long) Math.floor(height / beta / factor) * factor);
            wBar = Math.max(factor, (long) Math.floor(width / beta / factor) * factor);
        } else if (tBar * hBar * wBar < minPixels) {
            double beta = Math.sqrt(minPixels / volume);
            hBar = (long) Math.ceil(height * beta / factor) * factor;
            wBar = (long) Math.ceil(width * beta / factor) * factor;
        }
        return new int[] {Math.toIntExact(hBar), Math.toIntExact(wBar)};
    }

    private static void checkPositive(int height, int width) {
        if (height < 1 || width < 1) {
            throw new IllegalArgumentException(
                    "frame size must be positive: " + width + "x" + height);
        }
    }

    private static void checkAspect(int height, int width) throws RejectedRecordException {
        double ratio = (double) Math.max(height, width) / Math.min(height, width);
        if (ratio > SmartResize.MAX_ASPECT_RATIO) {
            throw new RejectedRecordException(
                    RejectReason.EXTREME_ASPECT_RATIO,
                    "aspect ratio "
                            + ratio
                            + " > "
                            + (int) SmartResize.MAX_ASPECT_RATIO
                            + " ("
                            + width
                            + "x"
                            + height
                            + ")");
        }
    }
}
