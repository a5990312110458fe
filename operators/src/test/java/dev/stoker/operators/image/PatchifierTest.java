package dev.stoker.operators.image;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.preset.ModelPreset;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.assertj.core.data.Offset;
import org.junit.jupiter.api.Test;

class PatchifierTest {
    private static final double[] MEAN = {0.48145466, 0.4578275, 0.40821073};
    private static final double[] STD = {0.26862954, 0.26130258, 0.27577711};

    private final Patchifier patchifier = new Patchifier(ModelPreset.QWEN2_VL.visionConfig());

    @Test
    void whiteAndBlackPixelsNormaliseWithClipMeanAndStd() {
        byte[] px = new byte[28 * 28 * 3];
        for (int i = 0; i < 28 * 28 * 3 / 2; i++) {
            px[i] = (byte) 255; // top half white, bottom half black
        }
        float[] out = patchifier.patchify(px, 0, 2, 2);
        // Patch row 0 is the top-left 14x14 patch (white); row 2 the bottom-left one (black).
        for (int c = 0; c < 3; c++) {
            for (int i = 0; i < 2 * 196; i++) {
                assertThat((double) out[c * 392 + i]).isCloseTo((1 - MEAN[c]) / STD[c], within());
                assertThat((double) out[2 * 1176 + c * 392 + i])
                        .isCloseTo(-MEAN[c] / STD[c], within());
            }
        }
    }

    @Test
    void patchOrderFollowsTheHuggingFaceReshapeAndTranspose() {
        int w = 84;
        int h = 56;
        byte[] px = new byte[w * h * 3];
        for (int y = 0; y < h; y++) {
            for (int x = 0; x < w; x++) {
                px[(y * w + x) * 3] = (byte) x;
                px[(y * w + x) * 3 + 1] = (byte) y;
                px[(y * w + x) * 3 + 2] = (byte) ((x * 7 + y * 3) % 256);
            }
        }
        float[] out = patchifier.patchify(px, 0, h / 14, w / 14);
        byte[] samples = bytes(px, 0, h / 14, w / 14);
        int ps = 14;
        int m = 2;
        int tps = 2;
        int gh = h / ps;
        int gw = w / ps;
        // Output axes after transpose(0,3,6,4,7,2,1,5,8) of the 9-d view
        // (gt, tps, C, gh/m, m, ps, gw/m, m, ps): (gt, gh/m, gw/m, m, m, C, tps, ps, ps).
        int[] outShape = {1, gh / m, gw / m, m, m, 3, tps, ps, ps};
        int[] perm = {0, 3, 6, 4, 7, 2, 1, 5, 8};
        int[] inShape = {1, tps, 3, gh / m, m, ps, gw / m, m, ps};
        assertThat(out).hasSize(gh * gw * 1176);
        int[] outIdx = new int[9];
        int[] inIdx = new int[9];
        for (int o = 0; o < out.length; o++) {
            int rest = o;
            for (int a = 8; a >= 0; a--) {
                outIdx[a] = rest % outShape[a];
                rest /= outShape[a];
            }
            for (int a = 0; a < 9; a++) {
                inIdx[perm[a]] = outIdx[a];
            }
            int flat = 0;
            for (int a = 0; a < 9; a++) {
                flat = flat * inShape[a] + inIdx[a];
            }
            // flat indexes the (tps, C, H, W) stack of two identical frames.
            int x = flat % w;
            int y = flat / w % h;
            int c = flat / (w * h) % 3;
            int v = px[(y * w + x) * 3 + c] & 0xFF;
            double expected = (v / 255.0 - MEAN[c]) / STD[c];
            assertThat((double) out[o]).as("element %d", o).isCloseTo(expected, within());
            assertThat(samples[o] & 0xFF).as("uint8 element %d", o).isEqualTo(v);
        }
    }

    /** {@link Patchifier#patchifyBytes}'s rows of one image, concatenated. */
    private byte[] bytes(byte[] rgb, int offset, int gridH, int gridW) {
        byte[] out = new byte[gridH * gridW * 1176];
        int[] next = {0};
        patchifier.patchifyBytes(
                rgb,
                offset,
                gridH,
                gridW,
                row -> {
                    assertThat(row).hasSize(1176);
                    System.arraycopy(row, 0, out, next[0], row.length);
                    next[0] += row.length;
                });
        assertThat(next[0]).isEqualTo(out.length);
        return out;
    }

    @Test
    void rowsAtAnOffsetEqualTheArrayOfTheImageAlone() {
        int gh = 4;
        int gw = 2;
        byte[] image = new byte[gh * 14 * gw * 14 * 3];
        for (int i = 0; i < image.length; i++) {
            image[i] = (byte) (i * 31 + i / 7);
        }
        byte[] withPrefix = new byte[100 + image.length + 5];
        System.arraycopy(image, 0, withPrefix, 100, image.length);
        List<float[]> rows = new ArrayList<>();
        patchifier.patchify(withPrefix, 100, gh, gw, row -> rows.add(row.clone()));
        float[] whole = patchifier.patchify(image, 0, gh, gw);
        assertThat(rows).hasSize(gh * gw);
        for (int r = 0; r < rows.size(); r++) {
            assertThat(rows.get(r))
                    .containsExactly(Arrays.copyOfRange(whole, r * 1176, (r + 1) * 1176));
        }
        assertThat(patchifier.rgbLength(gh, gw)).isEqualTo(image.length);
        assertThat(bytes(withPrefix, 100, gh, gw)).containsExactly(bytes(image, 0, gh, gw));
    }

    @Test
    void tooFewBytesAndGridsOffTheMergeSizeAreRejected() {
        byte[] twoByTwo = new byte[28 * 28 * 3];
        assertThatThrownBy(() -> patchifier.patchify(twoByTwo, 1, 2, 2))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("needs 2352 RGB bytes from offset 1");
        assertThatThrownBy(() -> patchifier.patchify(new byte[42 * 28 * 3], 0, 3, 2))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("not a positive multiple of merge_size 2");
        assertThatThrownBy(() -> patchifier.patchifyBytes(twoByTwo, 1, 2, 2, row -> {}))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("needs 2352 RGB bytes from offset 1");
    }

    private static Offset<Double> within() {
        return Offset.offset(1e-5);
    }
}
