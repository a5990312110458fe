package dev.stoker.operators.image;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.Random;
import org.junit.jupiter.api.Test;

class BicubicResamplerTest {
    private final BicubicResampler resampler = new BicubicResampler();

    @Test
    void constantImageStaysConstant() {
        RgbImage src = filled(37, 23, 200, 17, 90);
        for (int[] size : new int[][] {{11, 7}, {80, 50}, {37, 9}, {5, 23}, {1, 1}}) {
            RgbImage out = resampler.resize(src, size[0], size[1]);
            assertThat(out.width()).isEqualTo(size[0]);
            assertThat(out.height()).isEqualTo(size[1]);
            for (int i = 0; i < size[0] * size[1] * 3; i += 3) {
                assertThat(out.pixels()[i] & 0xFF).isEqualTo(200);
                assertThat(out.pixels()[i + 1] & 0xFF).isEqualTo(17);
                assertThat(out.pixels()[i + 2] & 0xFF).isEqualTo(90);
            }
        }
    }

    @Test
    void sameSizeIsIdentity() {
        RgbImage src = random(19, 13, 1);
        assertThat(resampler.resize(src, 19, 13).pixels()).isEqualTo(src.pixels());
    }

    @Test
    void torchWeightsKeepConstantImagesAndSizesAndResizeOnlyTheSideThatChanges() {
        BicubicResampler torch = new BicubicResampler(BicubicResampler.Weights.TORCH);
        RgbImage src = filled(37, 23, 200, 17, 90);
        for (int[] size : new int[][] {{11, 7}, {80, 50}, {1, 1}}) {
            RgbImage out = torch.resize(src, size[0], size[1]);
            for (int i = 0; i < size[0] * size[1] * 3; i += 3) {
                assertThat(out.pixels()[i] & 0xFF).isEqualTo(200);
                assertThat(out.pixels()[i + 1] & 0xFF).isEqualTo(17);
                assertThat(out.pixels()[i + 2] & 0xFF).isEqualTo(90);
            }
        }
        RgbImage random = random(19, 13, 2);
        assertThat(torch.resize(random, 19, 13)).isSameAs(random);
        // rows that are constant stay constant when only the width changes
        RgbImage rows = gray(new int[] {10, 10, 10, 250, 250, 250}, 3, 2);
        assertThat(channel0(torch.resize(rows, 5, 2)))
                .containsExactly(10, 10, 10, 10, 10, 250, 250, 250, 250, 250);
    }

    @Test
    void halvingAStepMatchesHandComputedPillowWeights() {
        // Output x=0: centre 1.0, taps at source 0..3 with weights k((x+0.5-1)/2) =
        // {0.8671875, 0.8671875, 0.2265625, -0.0703125} (sum 1.890625): 255 * 0.15625 / 1.890625 =
        // 21.07.
        // Output x=1 mirrors it: 255 * 1.734375 / 1.890625 = 233.93.
        RgbImage src = gray(new int[] {0, 0, 255, 255}, 4, 1);
        RgbImage out = resampler.resize(src, 2, 1);
        assertThat(channel0(out)).containsExactly(21, 234);
    }

    @Test
    void doublingAStepMatchesHandComputedPillowWeights() {
        // Output x=1: centre 0.75, taps k(-0.25)=0.8671875 on 0 and k(0.75)=0.2265625 on 255:
        // 255 * 0.2265625 / 1.09375 = 52.82. Output x=0: 255 * -0.0703125 / 0.796875 < 0, clipped.
        RgbImage src = gray(new int[] {0, 255}, 2, 1);
        assertThat(channel0(resampler.resize(src, 4, 1))).containsExactly(0, 53, 202, 255);
        RgbImage column = gray(new int[] {0, 255}, 1, 2);
        assertThat(channel0(resampler.resize(column, 1, 4))).containsExactly(0, 53, 202, 255);
    }

    @Test
    void downscaleMatchesIndependentDoubleReference() {
        RgbImage src = random(97, 61, 7);
        assertCloseToReference(src, 30, 17);
        assertCloseToReference(src, 97, 20);
        assertCloseToReference(src, 41, 61);
        assertCloseToReference(checker(64, 48), 28, 28);
    }

    @Test
    void upscaleMatchesIndependentDoubleReference() {
        assertCloseToReference(random(13, 9, 3), 56, 28);
        assertCloseToReference(checker(10, 10), 56, 56);
        assertCloseToReference(random(31, 17, 5), 20, 40);
    }

    /**
     * Pillow's formula evaluated in double precision (no fixed point): antialiased bicubic a=-0.5,
     * horizontal pass then vertical, rounding to uint8 after each pass. Fixed-point coefficients
     * may move a value by at most one level.
     */
    private void assertCloseToReference(RgbImage src, int w, int h) {
        RgbImage out = resampler.resize(src, w, h);
        double[][] kx = weights(src.width(), w);
        double[][] ky = weights(src.height(), h);
        int[] mid = new int[w * src.height() * 3];
        for (int y = 0; y < src.height(); y++) {
            for (int x = 0; x < w; x++) {
                for (int c = 0; c < 3; c++) {
                    double s = 0;
                    for (int i = 0; i < src.width(); i++) {
                        s += kx[x][i] * src.get(i, y, c);
                    }
                    mid[(y * w + x) * 3 + c] = w == src.width() ? src.get(x, y, c) : round8(s);
                }
            }
        }
        int maxDiff = 0;
        long totalDiff = 0;
        for (int y = 0; y < h; y++) {
            for (int x = 0; x < w; x++) {
                for (int c = 0; c < 3; c++) {
                    double s = 0;
                    for (int j = 0; j < src.height(); j++) {
                        s += ky[y][j] * mid[(j * w + x) * 3 + c];
                    }
                    int expected = h == src.height() ? mid[(y * w + x) * 3 + c] : round8(s);
                    int diff = Math.abs(expected - out.get(x, y, c));
                    maxDiff = Math.max(maxDiff, diff);
                    totalDiff += diff;
                }
            }
        }
        assertThat(maxDiff)
                .as("max diff %dx%d -> %dx%d", src.width(), src.height(), w, h)
                .isLessThanOrEqualTo(1);
        // Exact .5 ties (common on the synthetic checker) may round either way in fixed point.
        assertThat((double) totalDiff / (w * h * 3)).as("mean diff").isLessThan(0.05);
    }

    /**
     * Dense weight matrix [out][in] of Pillow's antialiased bicubic filter, normalised per output.
     */
    private static double[][] weights(int in, int out) {
        double scale = (double) in / out;
        double fs = Math.max(1.0, scale);
        double[][] k = new double[out][in];
        for (int o = 0; o < out; o++) {
            double center = (o + 0.5) * scale;
            double sum = 0;
            for (int i = 0; i < in; i++) {
                double dist = Math.abs(i + 0.5 - center) / fs;
                // Pillow takes taps from round(center - support) to round(center + support) only.
                boolean inWindow =
                        i >= (int) (center - 2 * fs + 0.5) && i < (int) (center + 2 * fs + 0.5);
                k[o][i] = inWindow ? cubic(dist) : 0;
                sum += k[o][i];
            }
            for (int i = 0; i < in; i++) {
                k[o][i] /= sum;
            }
        }
        return k;
    }

    private static double cubic(double x) {
        double a = -0.5;
        if (x < 1) {
            return (a + 2) * x * x * x - (a + 3) * x * x + 1;
        }
        if (x < 2) {
            return a * x * x * x - 5 * a * x * x + 8 * a * x - 4 * a;
        }
        return 0;
    }

    private static int round8(double v) {
        return (int) Math.max(0, Math.min(255, Math.floor(v + 0.5)));
    }

    private static int[] channel0(RgbImage img) {
        int[] v = new int[img.width() * img.height()];
        for (int i = 0; i < v.length; i++) {
            v[i] = img.pixels()[i * 3] & 0xFF;
        }
        return v;
    }

    private static RgbImage gray(int[] values, int w, int h) {
        byte[] px = new byte[w * h * 3];
        for (int i = 0; i < values.length; i++) {
            px[i * 3] = px[i * 3 + 1] = px[i * 3 + 2] = (byte) values[i];
        }
        return new RgbImage(w, h, px);
    }

    private static RgbImage filled(int w, int h, int r, int g, int b) {
        byte[] px = new byte[w * h * 3];
        for (int i = 0; i < px.length; i += 3) {
            px[i] = (byte) r;
            px[i + 1] = (byte) g;
            px[i + 2] = (byte) b;
        }
        return new RgbImage(w, h, px);
    }

    private static RgbImage random(int w, int h, long seed) {
        byte[] px = new byte[w * h * 3];
        new Random(seed).nextBytes(px);
        return new RgbImage(w, h, px);
    }

    private static RgbImage checker(int w, int h) {
        byte[] px = new byte[w * h * 3];
        for (int y = 0; y < h; y++) {
            for (int x = 0; x < w; x++) {
                int v = ((x / 3 + y / 2) & 1) == 0 ? 255 : 0;
                px[(y * w + x) * 3] = (byte) v;
                px[(y * w + x) * 3 + 1] = (byte) (255 - v);
                px[(y * w + x) * 3 + 2] = (byte) (x * 4);
            }
        }
        return new RgbImage(w, h, px);
    }
}
