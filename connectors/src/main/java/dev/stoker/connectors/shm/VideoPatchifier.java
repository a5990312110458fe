package dev.stoker.connectors.shm;

import dev.stoker.operators.image.QwenVisionConfig;

/**
 * A video's resized uint8 frames ({@code TokenizedSample#videoRgb}) as {@code pixel_values_videos}
 * rows, the same values as {@code QwenVideoProcessor.patchify} (operators, video), which matches
 * transformers 5.23.0 {@code Qwen2VLVideoProcessor._preprocess} / {@code
 * Qwen3VLVideoProcessor._preprocess} bit for bit: {@code rescale_and_normalize} fused as {@code
 * TorchvisionBackend} does it ({@code m = (float) mean * (float) (1 / rescale_factor)}, {@code s =
 * (float) std * (float) (1 / rescale_factor)}, then {@code ((float) u - m) / s} in float32: not the
 * image path's {@code Patchifier} arithmetic, which can differ in the last bit), the frames padded
 * to a multiple of {@code temporal_patch_size} by repeating the last, and the processor's {@code
 * patchify} permute: rows over {@code (grid_t, grid_h/m, grid_w/m, m, m)}, each row {@code (C,
 * temporal_patch_size, patch, patch)}. With {@link #patchifyBytes} the same positions hold the
 * uint8 samples, not normalised.
 *
 * <p>Not thread-safe (reuses its row buffers).
 */
final class VideoPatchifier {
    /** Receives float32 rows in order; the array is reused for the next row. */
    @FunctionalInterface
    interface Rows {
        void accept(float[] row);
    }

    /** Receives uint8 rows in order; the array is reused for the next row. */
    @FunctionalInterface
    interface ByteRows {
        void accept(byte[] row);
    }

    private final int ps;
    private final int tps;
    private final int m;
    private final float[] lut = new float[3 * 256];
    private final float[] row;
    private final byte[] byteRow;
    private final int[] index;

    VideoPatchifier(QwenVisionConfig config) {
        this.ps = config.patchSize;
        this.tps = config.temporalPatchSize;
        this.m = config.mergeSize;
        int dim = config.patchDim();
        this.row = new float[dim];
        this.byteRow = new byte[dim];
        this.index = new int[dim];
        float scale = (float) (1.0 / QwenVisionConfig.RESCALE_FACTOR);
        for (int c = 0; c < 3; c++) {
            float mean = (float) config.imageMean[c] * scale;
            float std = (float) config.imageStd[c] * scale;
            for (int u = 0; u < 256; u++) {
                lut[c * 256 + u] = ((float) u - mean) / std;
            }
        }
    }

    /** Bytes of {@code frames} resized frames of a {@code gridH x gridW} grid. */
    long rgbLength(int frames, int gridH, int gridW) {
        return (long) frames * gridH * ps * gridW * ps * 3;
    }

    /**
     * The float32 rows of one video whose frames start at {@code offset} of {@code rgb}.
     *
     * @param frames frames of the video (not padded), {@code ceil(frames / tps) == gridT}
     */
    void patchify(byte[] rgb, int offset, int frames, int gridT, int gridH, int gridW, Rows out) {
        walk(
                offset,
                frames,
                gridT,
                gridH,
                gridW,
                () -> {
                    int perChannel = row.length / 3;
                    for (int i = 0; i < row.length; i++) {
                        row[i] = lut[(i / perChannel) * 256 + (rgb[index[i]] & 0xFF)];
                    }
                    out.accept(row);
                });
    }

    /** The uint8 rows of one video, in the positions of {@link #patchify}. */
    void patchifyBytes(
            byte[] rgb, int offset, int frames, int gridT, int gridH, int gridW, ByteRows out) {
        walk(
                offset,
                frames,
                gridT,
                gridH,
                gridW,
                () -> {
                    for (int i = 0; i < byteRow.length; i++) {
                        byteRow[i] = rgb[index[i]];
                    }
                    out.accept(byteRow);
                });
    }

    /**
     * For each row, fills {@link #index} with the byte offset in {@code rgb} of every value (value
     * {@code i} is of channel {@code i / (patchDim / 3)}), then runs {@code emit}.
     */
    private void walk(int offset, int frames, int gridT, int gridH, int gridW, Runnable emit) {
        int width = gridW * ps;
        int frameBytes = gridH * ps * width * 3;
        int patchArea = ps * ps;
        for (int gt = 0; gt < gridT; gt++) {
            for (int bh = 0; bh < gridH / m; bh++) {
                for (int bw = 0; bw < gridW / m; bw++) {
                    for (int mh = 0; mh < m; mh++) {
                        for (int mw = 0; mw < m; mw++) {
                            int y0 = (bh * m + mh) * ps;
                            int x0 = (bw * m + mw) * ps;
                            for (int tt = 0; tt < tps; tt++) {
                                // frames past the last repeat it (the processor's padding)
                                int f = Math.min(gt * tps + tt, frames - 1);
                                for (int y = 0; y < ps; y++) {
                                    int src = offset + f * frameBytes + ((y0 + y) * width + x0) * 3;
                                    int dst = tt * patchArea + y * ps;
                                    for (int x = 0; x < ps; x++, src += 3) {
                                        for (int c = 0; c < 3; c++) {
                                            index[dst + c * tps * patchArea + x] = src + c;
                                        }
                                    }
                                }
                            }
                            emit.run();
                        }
                    }
                }
            }
        }
    }
}
