package dev.stoker.operators.image;

/**
 * The last two steps of Qwen-VL image preprocessing, matching Hugging Face transformers' {@code
 * Qwen2VLImageProcessor._preprocess}: rescale by 1/255 and normalise with {@code image_mean}/{@code
 * image_std}, repeat the frame to {@code temporal_patch_size}, and patchify:
 *
 * <pre>
 * patches.reshape(grid_t, tps, C, grid_h/m, m, ps, grid_w/m, m, ps)
 *        .transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
 *        .reshape(grid_t * grid_h * grid_w, C * tps * ps * ps)
 * </pre>
 *
 * <p>Input: one resized image as interleaved uint8 RGB, row-major, {@code (grid_h * ps, grid_w *
 * ps, 3)} ({@link QwenImageProcessor#process}'s output). Output: its {@code pixel_values}, float32
 * rows of {@link #patchDim()} values ({@code 3 * tps * ps * ps}, 1176 for Qwen2-VL), one per patch
 * in the processor's order, {@code grid_h * grid_w} rows; {@code grid_t} is 1. Each value is
 * computed in float32 as Hugging Face does: {@code ((float) (u8 * (1/255.0)) - (float) mean[c]) /
 * (float) std[c]}, i.e. the product in double ({@link QwenVisionConfig#RESCALE_FACTOR}) rounded to
 * float32, then a float32 subtraction and a float32 division, from a 256-entry table per channel.
 * {@link #patchifyBytes} gives the same rows before that arithmetic: the uint8 samples themselves
 * ({@code stoker.image.pixel-dtype: UINT8}, where the trainer normalises).
 *
 * <p>The job runs this in the shared-memory sink, straight into the Arrow buffer, so that the
 * records between the image stage and the sink carry one byte per pixel channel instead of {@code 4
 * * tps} (8x smaller for Qwen2-VL).
 *
 * <p>Not thread-safe (reused row buffers); use one instance per thread.
 */
public final class Patchifier {
    /** Receives the patch rows of an image in order. */
    @FunctionalInterface
    public interface PatchRows {
        /**
         * @param row one patch row of {@link Patchifier#patchDim()} float32 values; the array is
         *     reused for the next row, so copy it before returning
         */
        void accept(float[] row);
    }

    /** Receives the uint8 patch rows of an image in order ({@link #patchifyBytes}). */
    @FunctionalInterface
    public interface PatchByteRows {
        /**
         * @param row one patch row of {@link Patchifier#patchDim()} uint8 samples; the array is
         *     reused for the next row, so copy it before returning
         */
        void accept(byte[] row);
    }

    private final int patchSize;
    private final int mergeSize;
    private final int temporalPatchSize;
    private final int patchDim;

    /**
     * {@code lut[c * 256 + u]}: the normalised float32 value of channel {@code c} sample {@code u}.
     */
    private final float[] lut = new float[3 * 256];

    private final float[] row;
    private final byte[] byteRow;

    /**
     * @param config patch, merge and temporal patch sizes, and the per-channel mean and std
     */
    public Patchifier(QwenVisionConfig config) {
        this.patchSize = config.patchSize;
        this.mergeSize = config.mergeSize;
        this.temporalPatchSize = config.temporalPatchSize;
        this.patchDim = config.patchDim();
        this.row = new float[patchDim];
        this.byteRow = new byte[patchDim];
        for (int c = 0; c < 3; c++) {
            float mean = (float) config.imageMean[c];
            float std = (float) config.imageStd[c];
            for (int u = 0; u < 256; u++) {
                lut[c * 256 + u] = ((float) (u * QwenVisionConfig.RESCALE_FACTOR) - mean) / std;
            }
        }
    }

    /** Values per patch row: {@code 3 * temporal_patch_size * patch_size^2}. */
    public int patchDim() {
        return patchDim;
    }

    /**
     * Bytes of resized RGB of an image of {@code gridH x gridW} patches: {@code gridH * ps * gridW
     * * ps * 3}.
     *
     * @throws ArithmeticException if that overflows an int
     */
    public int rgbLength(int gridH, int gridW) {
        return Math.toIntExact((long) gridH * patchSize * gridW * patchSize * 3);
    }

    /**
     * Normalises and patchifies one image, handing its patch rows to {@code out} in order.
     *
     * @param rgb resized interleaved RGB bytes
     * @param offset index in {@code rgb} of the image's first byte
     * @param gridH image height in patches, a multiple of {@code merge_size}
     * @param gridW image width in patches, a multiple of {@code merge_size}
     * @param out receives {@code gridH * gridW} rows
     * @throws IllegalArgumentException if a grid side is not a positive multiple of {@code
     *     merge_size} or {@code rgb} holds fewer than {@link #rgbLength} bytes from {@code offset}
     */
    public void patchify(byte[] rgb, int offset, int gridH, int gridW, PatchRows out) {
        check(rgb, offset, gridH, gridW);
        int ps = patchSize;
        int m = mergeSize;
        int tps = temporalPatchSize;
        int width = gridW * ps;
        int patchArea = ps * ps;
        for (int bh = 0; bh < gridH / m; bh++) {
            for (int bw = 0; bw < gridW / m; bw++) {
                for (int mh = 0; mh < m; mh++) {
                    for (int mw = 0; mw < m; mw++) {
                        int y0 = (bh * m + mh) * ps;
                        int x0 = (bw * m + mw) * ps;
                        for (int y = 0; y < ps; y++) {
                            int src = offset + ((y0 + y) * width + x0) * 3;
                            int dst = y * ps;
                            for (int x = 0; x < ps; x++, src += 3) {
                                row[dst + x] = lut[rgb[src] & 0xFF];
                                row[dst + tps * patchArea + x] = lut[256 + (rgb[src + 1] & 0xFF)];
                                row[dst + 2 * tps * patchArea + x] =
                                        lut[512 + (rgb[src + 2] & 0xFF)];
                            }
                        }
                        for (int c = 0; c < 3; c++) {
                            int first = c * tps * patchArea;
                            for (int t = 1; t < tps; t++) {
                                System.arraycopy(row, first, row, first + t * patchArea, patchArea);
                            }
                        }
                        out.accept(row);
                    }
                }
            }
        }
    }

    /**
     * Patchifies one image without normalising: the rows of {@link #patchify(byte[], int, int, int,
     * PatchRows)}, in the same order and layout, holding the uint8 samples the normalised values
     * are computed from. The loop is that method's with the table lookup left out (kept apart so
     * the float32 path stays one pass).
     *
     * @param rgb resized interleaved RGB bytes
     * @param offset index in {@code rgb} of the image's first byte
     * @param gridH image height in patches, a multiple of {@code merge_size}
     * @param gridW image width in patches, a multiple of {@code merge_size}
     * @param out receives {@code gridH * gridW} rows of {@link #patchDim()} bytes
     * @throws IllegalArgumentException as {@link #patchify(byte[], int, int, int, PatchRows)}
     */
    public void patchifyBytes(byte[] rgb, int offset, int gridH, int gridW, PatchByteRows out) {
        check(rgb, offset, gridH, gridW);
        int ps = patchSize;
        int m = mergeSize;
        int tps = temporalPatchSize;
        int width = gridW * ps;
        int patchArea = ps * ps;
        for (int bh = 0; bh < gridH / m; bh++) {
            for (int bw = 0; bw < gridW / m; bw++) {
                for (int mh = 0; mh < m; mh++) {
                    for (int mw = 0; mw < m; mw++) {
                        int y0 = (bh * m + mh) * ps;
                        int x0 = (bw * m + mw) * ps;
                        for (int y = 0; y < ps; y++) {
                            int src = offset + ((y0 + y) * width + x0) * 3;
                            int dst = y * ps;
                            for (int x = 0; x < ps; x++, src += 3) {
                                byteRow[dst + x] = rgb[src];
                                byteRow[dst + tps * patchArea + x] = rgb[src + 1];
                                byteRow[dst + 2 * tps * patchArea + x] = rgb[src + 2];
                            }
                        }
                        for (int c = 0; c < 3; c++) {
                            int first = c * tps * patchArea;
                            for (int t = 1; t < tps; t++) {
                                System.arraycopy(
                                        byteRow, first, byteRow, first + t * patchArea, patchArea);
                            }
                        }
                        out.accept(byteRow);
                    }
                }
            }
        }
    }

    /**
     * Normalises and patchifies one image into a new array.
     *
     * @return float32 {@code pixel_values}, row-major {@code (gridH * gridW, patchDim)}
     * @throws IllegalArgumentException as {@link #patchify(byte[], int, int, int, PatchRows)}
     */
    public float[] patchify(byte[] rgb, int offset, int gridH, int gridW) {
        check(rgb, offset, gridH, gridW);
        float[] values = new float[Math.toIntExact((long) gridH * gridW * patchDim)];
        int[] next = {0};
        patchify(
                rgb,
                offset,
                gridH,
                gridW,
                r -> {
                    System.arraycopy(r, 0, values, next[0], patchDim);
                    next[0] += patchDim;
                });
        return values;
    }

    private void check(byte[] rgb, int offset, int gridH, int gridW) {
        if (gridH < 1 || gridW < 1 || gridH % mergeSize != 0 || gridW % mergeSize != 0) {
            throw new IllegalArgumentException(
                    "grid "
                            + gridH
                            + "x"
                            + gridW
                            + " is not a positive multiple of merge_size "
                            + mergeSize);
        }
        int length = rgbLength(gridH, gridW);
        if (offset < 0 || offset > rgb.length - length) {
            throw new IllegalArgumentException(
                    "an image of "
                            + gridH
                            + "x"
                            + gridW
                            + " patches needs "
                            + length
                            + " RGB bytes from offset "
                            + offset
                            + ", the array has "
                            + rgb.length);
        }
    }
}
