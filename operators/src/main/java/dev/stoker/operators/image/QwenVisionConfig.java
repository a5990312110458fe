package dev.stoker.operators.image;

import java.io.Serializable;

/**
 * Qwen-VL image preprocessing settings, as in a model's {@code preprocessor_config.json}. Defaults
 * are Qwen2-VL / Qwen2.5-VL: patch 14, temporal patch 2, merge 2, {@code min_pixels} 3136 (56*56),
 * {@code max_pixels} 12845056 (28*28*16384), CLIP mean/std (per RGB channel, on the 0..1 scale).
 *
 * <p>{@code maxSourcePixels} is the largest decoded source image (width*height, pixels) accepted
 * before any pixel buffer is allocated; the default 178956970 is Pillow's decompression-bomb error
 * threshold ({@code 2 * Image.MAX_IMAGE_PIXELS}), i.e. at most about 537 MB of RGB bytes.
 *
 * <p>{@code dctDownscale}: decode a JPEG at the DCT scale 1/2, 1/4 or 1/8 when the resize target
 * allows it ({@link ImageDecoder#decode(byte[], long, ImageDecoder.TargetSize)}); faster for large
 * photos, but the pixels are no longer those of Hugging Face's processor (docs/parity.md). Off by
 * default.
 *
 * <p>Mutable bean for configuration; treat an instance as immutable once handed to an operator.
 */
public class QwenVisionConfig implements Serializable {
    private static final long serialVersionUID = 1L;

    /** Pillow's {@code 2 * MAX_IMAGE_PIXELS}: above this Pillow raises DecompressionBombError. */
    public static final long DEFAULT_MAX_SOURCE_PIXELS = 178_956_970L;

    /**
     * {@code rescale_factor} of every Qwen-VL {@code preprocessor_config.json}: the double {@code
     * 1/255} (0.00392156862745098) that uint8 samples are multiplied by before normalising.
     */
    public static final double RESCALE_FACTOR = 1 / 255.0;

    public int patchSize = 14;
    public int temporalPatchSize = 2;
    public int mergeSize = 2;
    public long minPixels = 3136;
    public long maxPixels = 12_845_056;
    public double[] imageMean = {0.48145466, 0.4578275, 0.40821073};
    public double[] imageStd = {0.26862954, 0.26130258, 0.27577711};
    public long maxSourcePixels = DEFAULT_MAX_SOURCE_PIXELS;
    public boolean dctDownscale;

    /** Qwen2-VL / Qwen2.5-VL defaults. */
    public QwenVisionConfig() {}

    /** A copy with the same settings (the mean and std arrays copied too). */
    public QwenVisionConfig copy() {
        QwenVisionConfig c = new QwenVisionConfig();
        c.patchSize = patchSize;
        c.temporalPatchSize = temporalPatchSize;
        c.mergeSize = mergeSize;
        c.minPixels = minPixels;
        c.maxPixels = maxPixels;
        c.imageMean = imageMean.clone();
        c.imageStd = imageStd.clone();
        c.maxSourcePixels = maxSourcePixels;
        c.dctDownscale = dctDownscale;
        return c;
    }

    /** Side multiple of resized images in pixels: {@code patchSize * mergeSize} (28 by default). */
    public int factor() {
        return patchSize * mergeSize;
    }

    /**
     * Length of one {@code pixel_values} row: {@code 3 * temporalPatchSize * patchSize^2} (1176).
     */
    public int patchDim() {
        return 3 * temporalPatchSize * patchSize * patchSize;
    }
}
