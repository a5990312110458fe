package dev.stoker.operators.image;

import dev.stoker.operators.model.ImageRef;
import dev.stoker.operators.model.PreprocessedImage;
import dev.stoker.operators.model.RejectedRecordException;

/**
 * Qwen-VL image preprocessing for one still image, matching the slow path of Hugging Face
 * transformers' {@code Qwen2VLImageProcessor._preprocess}: decode ({@link ImageDecoder}), {@link
 * SmartResize}, Pillow bicubic resize ({@link BicubicResampler}), rescale by 1/255, normalise with
 * {@code image_mean}/{@code image_std}, repeat the frame to {@code temporal_patch_size}, and
 * patchify:
 *
 * <pre>
 * patches.reshape(grid_t, tps, C, grid_h/m, m, ps, grid_w/m, m, ps)
 *        .transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
 *        .reshape(grid_t * grid_h * grid_w, C * tps * ps * ps)
 * </pre>
 *
 * <p>Output: {@link PreprocessedImage} with float32 {@code pixelValues} of shape {@code (grid_h *
 * grid_w, 3 * tps * ps * ps)}, {@code gridT = 1}, {@code gridH = height / ps}, {@code gridW = width
 * / ps}. Each value is computed in float32 as HF does: {@code ((float) (u8 * (1/255.0)) - (float)
 * mean[c]) / (float) std[c]}. Normalisation and the patch reorder are one loop over a 256-entry
 * table per channel.
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

    /**
     * {@code lut[c * 256 + u]}: the normalised float32 value of channel {@code c} sample {@code u}.
     */
    private final float[] lut = new float[3 * 256];

    /** A processor whose decoder uses libjpeg-turbo when it is installed. */
    public QwenImageProcessor(QwenVisionConfig config) {
        this(config, new ImageDecoder());
    }

    QwenImageProcessor(QwenVisionConfig config, ImageDecoder decoder) {
        this.config = config;
        this.decoder = decoder;
        for (int c = 0; c < 3; c++) {
            float mean = (float) config.imageMean[c];
            float std = (float) config.imageStd[c];
            for (int u = 0; u < 256; u++) {
                lut[c * 256 + u] = ((float) (u * (1 / 255.0)) - mean) / std;
            }
        }
    }

    /**
     * Preprocesses one encoded image.
     *
     * @param encoded the image file's bytes
     * @param ref the image reference; its {@code minPixels}/{@code maxPixels} override the
     *     configured bounds when positive
     * @return pixel values and grid
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
        return patchify(resized);
    }

    /** Whether JPEGs are decoded with libjpeg-turbo (else with ImageIO). */
    public boolean nativeJpeg() {
        return decoder.nativeJpeg();
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

    /**
     * Normalises and patchifies an image whose sides are multiples of {@code patchSize *
     * mergeSize}.
     */
    public PreprocessedImage patchify(RgbImage img) {
        int ps = config.patchSize;
        int m = config.mergeSize;
        int tps = config.temporalPatchSize;
        int width = img.width();
        int gridH = img.height() / ps;
        int gridW = width / ps;
        if (gridH * ps != img.height() || gridW * ps != width || gridH % m != 0 || gridW % m != 0) {
            throw new IllegalArgumentException(
                    "image "
                            + width
                            + "x"
                            + img.height()
                            + " is not a multiple of "
                            + config.factor());
        }
        int patchArea = ps * ps;
        int frameLen = 3 * patchArea;
        int patchDim = frameLen * tps;
        float[] out = new float[gridH * gridW * patchDim];
        byte[] px = img.pixels();
        int row = 0;
        for (int bh = 0; bh < gridH / m; bh++) {
            for (int bw = 0; bw < gridW / m; bw++) {
                for (int mh = 0; mh < m; mh++) {
                    for (int mw = 0; mw < m; mw++, row++) {
                        int base = row * patchDim;
                        int y0 = (bh * m + mh) * ps;
                        int x0 = (bw * m + mw) * ps;
                        for (int y = 0; y < ps; y++) {
                            int src = ((y0 + y) * width + x0) * 3;
                            int dst = base + y * ps;
                            for (int x = 0; x < ps; x++, src += 3) {
                                out[dst + x] = lut[px[src] & 0xFF];
                                out[dst + tps * patchArea + x] = lut[256 + (px[src + 1] & 0xFF)];
                                out[dst + 2 * tps * patchArea + x] =
                                        lut[512 + (px[src + 2] & 0xFF)];
                            }
                        }
                        for (int c = 0; c < 3; c++) {
                            int first = base + c * tps * patchArea;
                            for (int t = 1; t < tps; t++) {
                                System.arraycopy(out, first, out, first + t * patchArea, patchArea);
                            }
                        }
                    }
                }
            }
        }
        return new PreprocessedImage(out, 1, gridH, gridW);
    }
}
