package dev.stoker.operators.image;

import dev.stoker.operators.model.ImageRef;
import dev.stoker.operators.model.PreprocessedImage;
import dev.stoker.operators.model.RejectedRecordException;
import java.util.Arrays;

/**
 * Qwen-VL image preprocessing for one still image up to the resized pixels, matching the slow path
 * of Hugging Face transformers' {@code Qwen2VLImageProcessor._preprocess}: decode ({@link
 * ImageDecoder}), {@link SmartResize}, Pillow bicubic resize ({@link BicubicResampler}). The rest
 * of that processor (rescale, normalise, temporal repeat, patchify) is {@link Patchifier}, which
 * the job runs in the sink.
 *
 * <p>Output: {@link PreprocessedImage} with the resized image as interleaved uint8 RGB of shape
 * {@code (grid_h * ps, grid_w * ps, 3)}, {@code gridT = 1}, {@code gridH = height / ps}, {@code
 * gridW = width / ps}.
 *
 * <p>With {@link QwenVisionConfig#dctDownscale} a JPEG may be decoded at a reduced DCT scale; the
 * target size is still computed from the full displayed size, as Hugging Face computes it.
 *
 * <p>Not thread-safe (the decoder and resampler reuse buffers); use one instance per task thread.
 */
public final class QwenImageProcessor {
    private final QwenVisionConfig config;
    private final ImageDecoder decoder;
    private final BicubicResampler resampler = new BicubicResampler();

    /** A processor whose decoder uses libjpeg-turbo when it is installed. */
    public QwenImageProcessor(QwenVisionConfig config) {
        this(config, new ImageDecoder());
    }

    QwenImageProcessor(QwenVisionConfig config, ImageDecoder decoder) {
        this.config = config;
        this.decoder = decoder;
    }

    /**
     * Preprocesses one encoded image.
     *
     * @param encoded the image file's bytes
     * @param ref the image reference; its {@code minPixels}/{@code maxPixels} override the
     *     configured bounds when positive
     * @return the resized RGB pixels (a new array of exactly {@code height * width * 3} bytes) and
     *     the patch grid
     * @throws RejectedRecordException from decoding (UNSUPPORTED_IMAGE, CORRUPT_IMAGE,
     *     IMAGE_TOO_MANY_PIXELS) or resizing (EXTREME_ASPECT_RATIO)
     */
    public PreprocessedImage process(byte[] encoded, ImageRef ref) throws RejectedRecordException {
        int[][] target = new int[1][];
        RgbImage decoded =
                decoder.decode(
                        encoded,
                        config.maxSourcePixels,
                        config.dctDownscale ? (h, w) -> target[0] = targetSize(h, w, ref) : null);
        int[] hw =
                target[0] != null ? target[0] : targetSize(decoded.height(), decoded.width(), ref);
        RgbImage resized = resampler.resize(decoded, hw[1], hw[0]);
        int ps = config.patchSize;
        byte[] rgb = Arrays.copyOf(resized.pixels(), hw[0] * hw[1] * 3);
        return new PreprocessedImage(rgb, 1, hw[0] / ps, hw[1] / ps);
    }

    /** Whether JPEGs are decoded with libjpeg-turbo (else with ImageIO). */
    public boolean nativeJpeg() {
        return decoder.nativeJpeg();
    }

    /** Whether WebP is decoded with libwebp (else with TwelveMonkeys' ImageIO reader). */
    public boolean nativeWebp() {
        return decoder.nativeWebp();
    }

    /**
     * The resized size of a decoded image: {@link SmartResize} with this config's factor and pixel
     * bounds, or the image reference's own bounds where it has them.
     *
     * @param height decoded height in pixels (after EXIF orientation)
     * @param width decoded width in pixels
     * @param ref the image reference; its positive {@code minPixels}/{@code maxPixels} override the
     *     configured bounds, {@code null} keeps them
     * @return {@code {height, width}} in pixels, multiples of {@link QwenVisionConfig#factor()}
     * @throws RejectedRecordException EXTREME_ASPECT_RATIO, as {@link SmartResize#compute}
     */
    public int[] targetSize(int height, int width, ImageRef ref) throws RejectedRecordException {
        long minPixels = ref != null && ref.minPixels > 0 ? ref.minPixels : config.minPixels;
        long maxPixels = ref != null && ref.maxPixels > 0 ? ref.maxPixels : config.maxPixels;
        return SmartResize.compute(height, width, config.factor(), minPixels, maxPixels);
    }
}
