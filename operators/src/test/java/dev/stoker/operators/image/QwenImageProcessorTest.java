package dev.stoker.operators.image;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.SharedData;
import dev.stoker.operators.model.ImageRef;
import dev.stoker.operators.model.PreprocessedImage;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import org.assertj.core.data.Offset;
import org.junit.jupiter.api.Test;

class QwenImageProcessorTest {
    private static final double[] MEAN = {0.48145466, 0.4578275, 0.40821073};
    private static final double[] STD = {0.26862954, 0.26130258, 0.27577711};

    private final QwenVisionConfig config = new QwenVisionConfig();
    private final QwenImageProcessor processor = new QwenImageProcessor(config);

    @Test
    void configDerivedSizes() {
        assertThat(config.factor()).isEqualTo(28);
        assertThat(config.patchDim()).isEqualTo(1176);
    }

    @Test
    void realImageHasHuggingFaceShapes() throws Exception {
        // chelsea_cat.png is 451x300; smart_resize_reference.jsonl gives 448 wide x 308 high.
        PreprocessedImage out =
                processor.process(
                        SharedData.bytes("llava-style/images/photos/chelsea_cat.png"),
                        new ImageRef("cat.png", 0, 0));
        assertThat(out.gridT).isEqualTo(1);
        assertThat(out.gridH).isEqualTo(308 / 14);
        assertThat(out.gridW).isEqualTo(448 / 14);
        assertThat(out.numPatches()).isEqualTo(22 * 32);
        assertThat(out.pixelValues).hasSize(22 * 32 * 1176);
    }

    @Test
    void perImageMaxPixelsOverrideIsUsed() throws Exception {
        // landmark.jpg is 2506x1698; with max_pixels 1003520 the reference table gives 1204x812.
        PreprocessedImage out =
                processor.process(
                        SharedData.bytes("qwen-messages/images/photos/landmark.jpg"),
                        new ImageRef("l.jpg", 0, 1003520));
        assertThat(out.gridH).isEqualTo(812 / 14);
        assertThat(out.gridW).isEqualTo(1204 / 14);
        assertThat(out.pixelValues).hasSize(58 * 86 * 1176);
    }

    @Test
    void extremeAspectIsRejected() {
        assertThatThrownBy(
                        () ->
                                processor.process(
                                        SharedData.bytes(
                                                "bad-inputs/extreme-aspect/images/w10_h2100.png"),
                                        new ImageRef("x", 0, 0)))
                .isInstanceOf(RejectedRecordException.class)
                .hasMessageContaining("aspect ratio 210.0 > 200")
                .extracting(e -> ((RejectedRecordException) e).reason())
                .isEqualTo(RejectReason.EXTREME_ASPECT_RATIO);
    }

    @Test
    void whiteAndBlackPixelsNormaliseWithClipMeanAndStd() {
        byte[] px = new byte[28 * 28 * 3];
        for (int i = 0; i < 28 * 28 * 3 / 2; i++) {
            px[i] = (byte) 255; // top half white, bottom half black
        }
        PreprocessedImage out = processor.patchify(new RgbImage(28, 28, px));
        // Patch row 0 is the top-left 14x14 patch (white); row 2 the bottom-left one (black).
        for (int c = 0; c < 3; c++) {
            for (int i = 0; i < 2 * 196; i++) {
                assertThat((double) out.pixelValues[c * 392 + i])
                        .isCloseTo((1 - MEAN[c]) / STD[c], within());
                assertThat((double) out.pixelValues[2 * 1176 + c * 392 + i])
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
        PreprocessedImage out = processor.patchify(new RgbImage(w, h, px));
        int ps = 14;
        int m = 2;
        int tps = 2;
        int gh = h / ps;
        int gw = w / ps;
        assertThat(out.gridH).isEqualTo(gh);
        assertThat(out.gridW).isEqualTo(gw);
        // Output axes after transpose(0,3,6,4,7,2,1,5,8) of the 9-d view
        // (gt, tps, C, gh/m, m, ps, gw/m, m, ps): (gt, gh/m, gw/m, m, m, C, tps, ps, ps).
        int[] outShape = {1, gh / m, gw / m, m, m, 3, tps, ps, ps};
        int[] perm = {0, 3, 6, 4, 7, 2, 1, 5, 8};
        int[] inShape = {1, tps, 3, gh / m, m, ps, gw / m, m, ps};
        assertThat(out.pixelValues).hasSize(gh * gw * 1176);
        int[] outIdx = new int[9];
        int[] inIdx = new int[9];
        for (int o = 0; o < out.pixelValues.length; o++) {
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
            assertThat((double) out.pixelValues[o])
                    .as("element %d", o)
                    .isCloseTo(expected, within());
        }
    }

    private static Offset<Double> within() {
        return Offset.offset(1e-5);
    }
}
