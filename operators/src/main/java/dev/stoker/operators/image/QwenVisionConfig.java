package dev.stoker.operators.image;

import java.io.Serializable;

/**
 * Qwen-VL image preprocessing settings, as in a model's {@code preprocessor_config.json}: patch
 * size, temporal patch size, merge size, {@code min_pixels} / {@code max_pixels}, mean/std (per RGB
 * channel, on the 0..1 scale). The model's values are declared once, in {@link
 * dev.stoker.operators.preset.ModelPreset#visionConfig()}, which is how a config is made; a config
 * made with {@code new} has them unset (zero, null).
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

    public int patchSize;
    public int temporalPatchSize;
    public int mergeSize;
    public long minPixels;
    public long maxPixels;
    public double[] imageMean;
    public double[] imageStd;
    public long maxSourcePixels = DEFAULT_MAX_SOURCE_PIXELS;
    public boolean dctDownscale;

    /**
     * A config with the model's values unset: see {@link
     * dev.stoker.operators.preset.ModelPreset#visionConfig()}.
     */
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

    /**
     * Side multiple of resized images in pixels: {@code patchSize * mergeSize} (28 for Qwen2-VL).
     */
    public int factor() {
        return patchSize * mergeSize;
    }

    /**
     * Length of one {@code pixel_values} row: {@code 3 * temporalPatchSize * patchSize^2} (1176 for
     * Qwen2-VL).
     */
    public int patchDim() {
        return 3 * temporalPatchSize * patchSize * patchSize;
    }
}
