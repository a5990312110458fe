package dev.stoker.operators.image;

import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;

/**
 * Qwen-VL {@code smart_resize}: the target size of an image so that both sides are multiples of
 * {@code factor} (patch size times merge size, 28 for Qwen2-VL) and the area lies within {@code
 * [minPixels, maxPixels]}, keeping the aspect ratio as close as possible.
 *
 * <p>Matches {@code smart_resize} of Hugging Face transformers' {@code
 * models/qwen2_vl/image_processing_qwen2_vl.py} and qwen-vl-utils: reject when {@code max/min >
 * 200}; round each side half-to-even to a multiple of {@code factor} (at least {@code factor});
 * when the area exceeds {@code maxPixels} scale down by {@code sqrt(h*w/maxPixels)} and floor to a
 * multiple (at least {@code factor}); when it is below {@code minPixels} scale up by {@code
 * sqrt(minPixels/(h*w))} and ceil to a multiple. All arithmetic is IEEE double as in Python.
 *
 * <p>One known difference from transformers 5.23.0: it does not clamp the rounded sides to at least
 * {@code factor}, so a side below {@code factor / 2} rounds to 0 and the image is scaled up by the
 * min-pixels rule instead (14x2800 becomes 28x812 there, 28x2800 here and in qwen-vl-utils, which
 * {@code shared/data/bad-inputs/extreme-aspect} specifies). No sample image has such a side; see
 * docs/parity.md.
 */
public final class SmartResize {
    /** Largest accepted ratio of the longer to the shorter side. */
    public static final double MAX_ASPECT_RATIO = 200.0;

    private SmartResize() {}

    /**
     * Computes the target size.
     *
     * @param height source height in pixels, at least 1
     * @param width source width in pixels, at least 1
     * @param factor both output sides are multiples of this (pixels)
     * @param minPixels smallest output area in pixels
     * @param maxPixels largest output area in pixels
     * @return {@code {height, width}} of the output in pixels
     * @throws RejectedRecordException with {@link RejectReason#EXTREME_ASPECT_RATIO} when the
     *     aspect ratio exceeds 200
     */
    public static int[] compute(int height, int width, int factor, long minPixels, long maxPixels)
            throws RejectedRecordException {
        if (height < 1 || width < 1) {
            throw new IllegalArgumentException(
                    "image size must be positive: " + width + "x" + height);
        }
        double ratio = (double) Math.max(height, width) / Math.min(height, width);
        if (ratio > MAX_ASPECT_RATIO) {
            throw new RejectedRecordException(
                    RejectReason.EXTREME_ASPECT_RATIO,
                    "aspect ratio "
                            + ratio
                            + " > "
                            + (int) MAX_ASPECT_RATIO
                            + " ("
                            + width
                            + "x"
                            + height
                            + ")");
        }
        long hBar = Math.max(factor, (long) Math.rint((double) height / factor) * factor);
        long wBar = Math.max(factor, (long) Math.rint((double) width / factor) * factor);
        double area = (double) height * width;
        if (hBar * wBar > maxPixels) {
            double beta = Math.sqrt(area / maxPixels);
            hBar = Math.max(factor, (long) Math.floor(height / beta / factor) * factor);
            wBar = Math.max(factor, (long) Math.floor(width / beta / factor) * factor);
        } else if (hBar * wBar < minPixels) {
            double beta = Math.sqrt(minPixels / area);
            hBar = (long) Math.ceil(height * beta / factor) * factor;
            wBar = (long) Math.ceil(width * beta / factor) * factor;
        }
        return new int[] {Math.toIntExact(hBar), Math.toIntExact(wBar)};
    }
}
