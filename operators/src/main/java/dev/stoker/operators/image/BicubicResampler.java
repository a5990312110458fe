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
 * pass only computes the source rows the vertical pass reads, row by row as the vertical pass
 * reaches them, into a ring of as many rows as the vertical kernel has taps (cache-resident).
 * Integer sums are exact in any order, so the result is bit-identical to Pillow's.
 *
 * <p>Not thread-safe: an instance reuses its buffers between calls, including the output's pixel
 * array, which is valid until the next call; use one instance per task thread.
 */
public final class BicubicResampler {
    /** Fixed-point fraction bits of the coefficients, as Pillow's {@code PRECISION_BITS}. */
    static final int PRECISION_BITS = 32 - 8 - 2;

    private static final double SUPPORT = 2.0;
    private static final double A = -0.5;

    /** Source pixels of the row being resampled horizontally: R | G << 32 per pixel, and B. */
    private long[] redGreen = new long[0];

    private int[] blue = new int[0];

    /** Ring of horizontally resampled rows (uint8 values as int), one int[] per row. */
    private int[][] ring = new int[0][];

    private int[] acc = new int[0];
    private byte[] out = new byte[0];

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
        if (outWidth == inW && outHeight == inH) {
            return src;
        }
        Coefficients kx = outWidth != inW ? Coefficients.of(inW, outWidth) : null;
        Coefficients ky = outHeight != inH ? Coefficients.of(inH, outHeight) : null;
        int stride = outWidth * 3;
        byte[] dst = output(stride * outHeight);
        int ringSize = ky == null ? 1 : ky.ksize;
        if (ring.length < ringSize || ring[0].length < stride) {
            ring = new int[ringSize][stride];
        }
        if (acc.length < stride) {
            acc = new int[stride];
        }
        int next = 0; // the next source row to put into the ring
        for (int yy = 0; yy < outHeight; yy++) {
            if (ky == null) {
                int[] row = ring[0];
                sourceRow(src, yy, kx, row);
                for (int i = 0, o = yy * stride; i < stride; i++) {
                    dst[o + i] = (byte) row[i];
                }
                continue;
            }
            int ymin = ky.bounds[yy * 2];
            int ycount = ky.bounds[yy * 2 + 1];
            next = Math.max(next, ymin);
            while (next < ymin + ycount) {
                // replaces row next - ringSize, which lies before ymin: no longer needed
                sourceRow(src, next, kx, ring[next % ringSize]);
                next++;
            }
            resampleVertical(yy, ymin, ycount, ky, ringSize, stride, dst);
        }
        return new RgbImage(outWidth, outHeight, dst);
    }

    private byte[] output(int size) {
        if (out.length < size) {
            out = new byte[size];
        }
        return out;
    }

    /**
     * Puts source row {@code y} into {@code row} as uint8 values: resampled horizontally with
     * {@code kx}, or as is when {@code kx} is null.
     */
    private void sourceRow(RgbImage src, int y, Coefficients kx, int[] row) {
        int inW = src.width();
        byte[] in = src.pixels();
        if (kx == null) {
            for (int i = 0, p = y * inW * 3; i < inW * 3; i++) {
                row[i] = in[p + i] & 0xFF;
            }
        } else {
            resampleHorizontal(in, y * inW * 3, inW, row, kx);
        }
    }

    /**
     * Resamples one source row (at {@code rowStart} in {@code in}) into {@code row}. R and G are
     * summed in the two 32-bit halves of one long (each half's sum is exact modulo 2^32 and fits an
     * int, so the halves separate exactly), B on its own: two multiplies per tap instead of three.
     */
    private void resampleHorizontal(byte[] in, int rowStart, int inW, int[] row, Coefficients k) {
        if (redGreen.length < inW) {
            redGreen = new long[inW];
            blue = new int[inW];
        }
        long[] rg = redGreen;
        int[] b = blue;
        for (int x = 0, p = rowStart; x < inW; x++, p += 3) {
            rg[x] = (in[p] & 0xFF) | ((long) (in[p + 1] & 0xFF) << 32);
            b[x] = in[p + 2] & 0xFF;
        }
        int outW = k.outSize;
        int ksize = k.ksize;
        int[] kk = k.fixed;
        int[] bounds = k.bounds;
        int half = 1 << (PRECISION_BITS - 1);
        long halfRg = ((long) half << 32) + half;
        for (int xx = 0; xx < outW; xx++) {
            int xmin = bounds[xx * 2];
            int xcount = bounds[xx * 2 + 1];
            int kOff = xx * ksize;
            long s01 = halfRg;
            int s2 = half;
            for (int x = 0; x < xcount; x++) {
                int w = kk[kOff + x];
                s01 += rg[xmin + x] * w;
                s2 += b[xmin + x] * w;
            }
            int s0 = (int) s01;
            int s1 = (int) ((s01 - s0) >> 32);
            int o = xx * 3;
            row[o] = clip8(s0);
            row[o + 1] = clip8(s1);
            row[o + 2] = clip8(s2);
        }
    }

    /**
     * Output row {@code yy} from the ring's rows {@code ymin .. ymin+ycount-1}. Each tap is a loop
     * over one whole row array from index 0, a shape the JIT vectorizes (an offset into one shared
     * array may alias the accumulator, which keeps it scalar).
     */
    private void resampleVertical(
            int yy, int ymin, int ycount, Coefficients k, int ringSize, int stride, byte[] dst) {
        int[] a = acc;
        int kOff = yy * k.ksize;
        Arrays.fill(a, 0, stride, 1 << (PRECISION_BITS - 1));
        for (int y = 0; y < ycount; y++) {
            int w = k.fixed[kOff + y];
            int[] row = ring[(ymin + y) % ringSize];
            for (int i = 0; i < stride; i++) {
                a[i] += row[i] * w;
            }
        }
        for (int i = 0, o = yy * stride; i < stride; i++) {
            dst[o + i] = (byte) clip8(a[i]);
        }
    }

    private static int clip8(int v) {
        int s = v >> PRECISION_BITS;
        return s < 0 ? 0 : Math.min(s, 255);
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
