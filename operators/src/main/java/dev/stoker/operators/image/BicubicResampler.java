package dev.stoker.operators.image;

import java.util.Arrays;

/**
 * Bicubic resize of 8-bit RGB images, bit-compatible with Pillow's {@code Image.resize(size,
 * Image.BICUBIC)} (no box, no reducing gap), i.e. {@code ImagingResample} in Pillow's {@code
 * src/libImaging/Resample.c}: separable passes, horizontal first and then vertical, each skipped
 * when that side keeps its size; the cubic convolution kernel with {@code a = -0.5} and support 2,
 * widened by the downscale factor (antialiasing); per-output coefficients normalised to sum 1 and
 * converted to fixed point with {@value #PRECISION_BITS} fractional bits ({@code 32 - 8 - 2}); each
 * pass rounds and clips to uint8, so the intermediate image is uint8 as in Pillow. The horizontal
 * pass only computes the source rows the vertical pass reads.
 *
 * <p>Not thread-safe: an instance reuses its buffers between calls, including the output's pixel
 * array, which is valid until the next call; use one instance per task thread.
 */
public final class BicubicResampler {
    /** Fixed-point fraction bits of the coefficients, as Pillow's {@code PRECISION_BITS}. */
    static final int PRECISION_BITS = 32 - 8 - 2;

    private static final double SUPPORT = 2.0;
    private static final double A = -0.5;

    private byte[] temp = new byte[0];
    private byte[] out = new byte[0];
    private int[] acc = new int[0];

    /**
     * Resizes {@code src} to {@code outWidth x outHeight}.
     *
     * @param src source image
     * @param outWidth output width in pixels, at least 1
     * @param outHeight output height in pixels, at least 1
     * @return the resized image, its pixel array reused by the next call; {@code src} itself when
     *     the size is unchanged
     */
    public RgbImage resize(RgbImage src, int outWidth, int outHeight) {
        if (outWidth < 1 || outHeight < 1) {
            throw new IllegalArgumentException(
                    "output size must be positive: " + outWidth + "x" + outHeight);
        }
        int inW = src.width();
        int inH = src.height();
        boolean horizontal = outWidth != inW;
        boolean vertical = outHeight != inH;
        if (!horizontal && !vertical) {
            return src;
        }
        if (!vertical) {
            byte[] dst = output(outWidth * inH * 3);
            resampleHorizontal(src.pixels(), inW, 0, inH, dst, Coefficients.of(inW, outWidth));
            return new RgbImage(outWidth, inH, dst);
        }
        Coefficients ky = Coefficients.of(inH, outHeight);
        byte[] rows = src.pixels();
        int rowOffset = 0;
        if (horizontal) {
            int first = ky.bounds[0];
            int last = ky.bounds[(outHeight - 1) * 2] + ky.bounds[(outHeight - 1) * 2 + 1];
            int needed = outWidth * (last - first) * 3;
            if (temp.length < needed) {
                temp = new byte[needed];
            }
            resampleHorizontal(
                    rows, inW, first, last - first, temp, Coefficients.of(inW, outWidth));
            rows = temp;
            rowOffset = first;
        }
        byte[] dst = output(outWidth * outHeight * 3);
        resampleVertical(rows, outWidth, rowOffset, dst, outHeight, ky);
        return new RgbImage(outWidth, outHeight, dst);
    }

    private byte[] output(int size) {
        if (out.length < size) {
            out = new byte[size];
        }
        return out;
    }

    /**
     * Resamples rows {@code firstRow .. firstRow+rowCount-1} of {@code in} into rows 0.. of {@code
     * out}.
     */
    private static void resampleHorizontal(
            byte[] in, int inW, int firstRow, int rowCount, byte[] out, Coefficients k) {
        int outW = k.outSize;
        int ksize = k.ksize;
        int[] kk = k.fixed;
        int[] bounds = k.bounds;
        int half = 1 << (PRECISION_BITS - 1);
        for (int y = 0; y < rowCount; y++) {
            int inRow = (firstRow + y) * inW * 3;
            int outRow = y * outW * 3;
            for (int xx = 0; xx < outW; xx++) {
                int xmin = bounds[xx * 2];
                int xcount = bounds[xx * 2 + 1];
                int kOff = xx * ksize;
                int s0 = half;
                int s1 = half;
                int s2 = half;
                int p = inRow + xmin * 3;
                for (int x = 0; x < xcount; x++, p += 3) {
                    int w = kk[kOff + x];
                    s0 += (in[p] & 0xFF) * w;
                    s1 += (in[p + 1] & 0xFF) * w;
                    s2 += (in[p + 2] & 0xFF) * w;
                }
                int o = outRow + xx * 3;
                out[o] = clip8(s0);
                out[o + 1] = clip8(s1);
                out[o + 2] = clip8(s2);
            }
        }
    }

    /** Resamples columns; row {@code r} of {@code in} holds source row {@code r + rowOffset}. */
    private void resampleVertical(
            byte[] in, int width, int rowOffset, byte[] out, int outH, Coefficients k) {
        int ksize = k.ksize;
        int[] kk = k.fixed;
        int[] bounds = k.bounds;
        int half = 1 << (PRECISION_BITS - 1);
        int stride = width * 3;
        if (this.acc.length < stride) {
            this.acc = new int[stride];
        }
        int[] acc = this.acc;
        for (int yy = 0; yy < outH; yy++) {
            int ymin = bounds[yy * 2] - rowOffset;
            int ycount = bounds[yy * 2 + 1];
            int kOff = yy * ksize;
            Arrays.fill(acc, 0, stride, half);
            for (int y = 0; y < ycount; y++) {
                int w = kk[kOff + y];
                int row = (ymin + y) * stride;
                for (int i = 0; i < stride; i++) {
                    acc[i] += (in[row + i] & 0xFF) * w;
                }
            }
            int o = yy * stride;
            for (int i = 0; i < stride; i++) {
                out[o + i] = clip8(acc[i]);
            }
        }
    }

    private static byte clip8(int v) {
        int s = v >> PRECISION_BITS;
        return (byte) (s < 0 ? 0 : Math.min(s, 255));
    }

    /** Pillow's bicubic kernel with a = -0.5. */
    static double filter(double x) {
        double ax = Math.abs(x);
        if (ax < 1.0) {
            return ((A + 2.0) * ax - (A + 3.0)) * ax * ax + 1;
        }
        if (ax < 2.0) {
            return (((ax - 5) * ax + 8) * ax - 4) * A;
        }
        return 0.0;
    }

    /**
     * Per-axis coefficient table: Pillow's {@code precompute_coeffs} plus {@code
     * normalize_coeffs_8bpc}.
     */
    static final class Coefficients {
        final int outSize;
        final int ksize;

        /** Pairs (first source index, number of taps) per output index. */
        final int[] bounds;

        /** {@code ksize} fixed-point taps per output index. */
        final int[] fixed;

        private Coefficients(int outSize, int ksize, int[] bounds, int[] fixed) {
            this.outSize = outSize;
            this.ksize = ksize;
            this.bounds = bounds;
            this.fixed = fixed;
        }

        static Coefficients of(int inSize, int outSize) {
            double scale = (double) inSize / outSize;
            double filterscale = Math.max(scale, 1.0);
            double support = SUPPORT * filterscale;
            int ksize = (int) Math.ceil(support) * 2 + 1;
            int[] bounds = new int[outSize * 2];
            int[] fixed = new int[outSize * ksize];
            double[] k = new double[ksize];
            double ss = 1.0 / filterscale;
            for (int xx = 0; xx < outSize; xx++) {
                double center = (xx + 0.5) * scale;
                int xmin = Math.max((int) (center - support + 0.5), 0);
                int xmax = Math.min((int) (center + support + 0.5), inSize) - xmin;
                double ww = 0.0;
                for (int x = 0; x < xmax; x++) {
                    double w = filter((x + xmin - center + 0.5) * ss);
                    k[x] = w;
                    ww += w;
                }
                for (int x = 0; x < xmax; x++) {
                    double w = ww != 0.0 ? k[x] / ww : k[x];
                    fixed[xx * ksize + x] =
                            (int)
                                    (w < 0
                                            ? -0.5 + w * (1 << PRECISION_BITS)
                                            : 0.5 + w * (1 << PRECISION_BITS));
                }
                bounds[xx * 2] = xmin;
                bounds[xx * 2 + 1] = xmax;
            }
            return new Coefficients(outSize, ksize, bounds, fixed);
        }
    }
}
