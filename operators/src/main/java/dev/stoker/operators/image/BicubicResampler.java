package dev.stoker.operators.image;

import java.util.Arrays;

/**
 * Bicubic resize of 8-bit RGB images with one of two reference implementations' weights ({@link
 * Weights}), both antialiased separable integer resamplers of the same shape.
 *
 * <p>{@link Weights#PILLOW} (the default; the image path): bit-compatible with Pillow's {@code
 * Image.resize(size, Image.BICUBIC)} (no box, no reducing gap), i.e. {@code ImagingResample} in
 * Pillow's {@code src/libImaging/Resample.c}: separable passes, horizontal first and then vertical,
 * each skipped when that side keeps its size; the cubic convolution kernel with {@code a = -0.5}
 * and support 2, widened by the downscale factor (antialiasing); per-output coefficients normalised
 * to sum 1 and converted to fixed point with {@value #PRECISION_BITS} fractional bits ({@code 32 -
 * 8 - 2}); each pass rounds and clips to uint8, so the intermediate image is uint8 as in Pillow.
 *
 * <p>{@link Weights#TORCH}: bit-compatible with torchvision's {@code resize(uint8 tensor, size,
 * BICUBIC, antialias=True)} on CPU, which calls {@code torch._C._nn._upsample_bicubic2d_aa} on the
 * uint8 tensor (torchvision 0.29 {@code transforms/v2/functional/_geometry.py}, {@code
 * resize_image} and {@code _do_native_uint8_resize_on_cpu}). In torch 2.x that is {@code
 * upsample_avx_bilinear_bicubic_uint8} ({@code aten/src/ATen/native/cpu/UpSampleKernel.cpp} and
 * {@code UpSampleKernelAVXAntialias.h}, x86 with AVX2 or AVX-512) or, elsewhere, {@code
 * separable_upsample_generic_Nd_kernel_impl} with the same integer weights: the same passes and
 * bounds as Pillow, but {@code HelperInterpCubic::aa_filter} ({@code a = -0.5}, torch's form of the
 * polynomial), weights normalised in double and quantised by {@code
 * _compute_index_ranges_int16_weights} to int16 with a per-pass precision (the largest one, at most
 * 22 bits, at which twice the largest weight of that pass stays below {@code 2^15}), int32 sums
 * started at {@code 1 << (precision - 1)}, shifted and clamped to 0..255.
 *
 * <p>The horizontal pass only computes the source rows the vertical pass reads, {@value
 * #BLOCK_ROWS} rows at a time as the vertical pass reaches them, into a ring of rows
 * (cache-resident). Integer sums are exact in any order, so the result is bit-identical to the
 * reference's.
 *
 * <p>Both passes are shaped for the JIT's auto-vectorization (one multiply-add over a whole int
 * array per tap): the vertical pass over a ring row, the horizontal pass over a block of source
 * rows transposed so that one source column of the block (its {@value #BLOCK_ROWS} rows' R, G and
 * B) is one array.
 *
 * <p>Not thread-safe: an instance reuses its buffers between calls, including the output's pixel
 * array, which is valid until the next call; use one instance per task thread.
 */
public final class BicubicResampler {
    /** Whose weights a resampler uses; the passes and rounding are the same for both. */
    public enum Weights {
        /** Pillow 12's {@code ImagingResample} with {@code BICUBIC}: the image path. */
        PILLOW,
        /**
         * torch's antialiased bicubic resize of uint8 tensors on CPU ({@code
         * _upsample_bicubic2d_aa}), as torchvision's {@code resize(..., antialias=True)} runs it:
         * the Hugging Face video processors.
         */
        TORCH
    }

    /** Fixed-point fraction bits of the Pillow coefficients, as Pillow's {@code PRECISION_BITS}. */
    static final int PRECISION_BITS = 32 - 8 - 2;

    /** Source rows resampled horizontally together. */
    static final int BLOCK_ROWS = 32;

    private static final int LANES = 3 * BLOCK_ROWS;
    private static final double SUPPORT = 2.0;
    private static final double A = -0.5;

    /** torch's {@code compute_index_ranges_int16_weights}: int16 weights, at most 22 bits. */
    private static final int TORCH_MAX_PRECISION = 22;

    private final Weights weights;

    /**
     * The block of source rows being resampled horizontally, transposed: {@code columns[x][c *
     * BLOCK_ROWS + r]} is channel c of pixel x in the block's row r.
     */
    private int[][] columns = new int[0][];

    /** Ring of horizontally resampled rows (uint8 values as int), one int[] per row. */
    private int[][] ring = new int[0][];

    private final int[][] blockRows = new int[BLOCK_ROWS][];
    private final int[] lanes = new int[LANES];
    private int[] acc = new int[0];
    private byte[] out = new byte[0];

    /** A resampler with Pillow's weights ({@link Weights#PILLOW}), the image path's. */
    public BicubicResampler() {
        this(Weights.PILLOW);
    }

    /**
     * @param weights whose weights to use
     */
    public BicubicResampler(Weights weights) {
        this.weights = weights;
    }

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
        Coefficients kx = outWidth != inW ? coefficients(inW, outWidth) : null;
        Coefficients ky = outHeight != inH ? coefficients(inH, outHeight) : null;
        int stride = outWidth * 3;
        byte[] dst = output(stride * outHeight);
        // A block overwrites rows before the current ymin only: ymin <= next < ymin + ksize.
        int ringSize = (ky == null ? 0 : ky.ksize) + BLOCK_ROWS;
        if (ring.length < ringSize || ring[0].length < stride) {
            ring = new int[ringSize][stride];
        }
        if (acc.length < stride) {
            acc = new int[stride];
        }
        // rows past the last one the vertical pass reads are never resampled
        int end =
                ky == null
                        ? inH
                        : ky.bounds[(outHeight - 1) * 2] + ky.bounds[(outHeight - 1) * 2 + 1];
        int next = 0; // the next source row to put into the ring
        for (int yy = 0; yy < outHeight; yy++) {
            int ymin = ky == null ? yy : ky.bounds[yy * 2];
            int ycount = ky == null ? 1 : ky.bounds[yy * 2 + 1];
            next = Math.max(next, ymin);
            while (next < ymin + ycount) {
                int rows = Math.min(BLOCK_ROWS, end - next);
                sourceRows(src, next, rows, kx, ringSize);
                next += rows;
            }
            if (ky == null) {
                int[] row = ring[yy % ringSize];
                for (int i = 0, o = yy * stride; i < stride; i++) {
                    dst[o + i] = (byte) row[i];
                }
            } else {
                resampleVertical(yy, ymin, ycount, ky, ringSize, stride, dst);
            }
        }
        return new RgbImage(outWidth, outHeight, dst);
    }

    private Coefficients coefficients(int inSize, int outSize) {
        return weights == Weights.TORCH
                ? Coefficients.torch(inSize, outSize)
                : Coefficients.of(inSize, outSize);
    }

    private byte[] output(int size) {
        if (out.length < size) {
            out = new byte[size];
        }
        return out;
    }

    /**
     * Puts source rows {@code y0 .. y0+rows-1} into their ring slots as uint8 values: resampled
     * horizontally with {@code kx}, or as they are when {@code kx} is null.
     */
    private void sourceRows(RgbImage src, int y0, int rows, Coefficients kx, int ringSize) {
        int inW = src.width();
        byte[] in = src.pixels();
        for (int r = 0; r < rows; r++) {
            blockRows[r] = ring[(y0 + r) % ringSize];
        }
        if (kx != null) {
            resampleHorizontal(in, y0, rows, inW, kx);
            return;
        }
        for (int r = 0; r < rows; r++) {
            int[] row = blockRows[r];
            for (int i = 0, p = (y0 + r) * inW * 3; i < inW * 3; i++) {
                row[i] = in[p + i] & 0xFF;
            }
        }
    }

    /**
     * Resamples source rows {@code y0 .. y0+rows-1} of {@code in} into {@link #blockRows}: the
     * block is transposed into {@link #columns}, then each output pixel is one multiply-add per tap
     * of the tap's column into {@link #lanes}, all rows and channels of the block at once (two taps
     * per loop, which halves the accumulator's loads and stores). Lanes of rows past {@code rows}
     * hold stale values and are not stored.
     */
    private void resampleHorizontal(byte[] in, int y0, int rows, int inW, Coefficients k) {
        if (columns.length < inW) {
            columns = new int[inW][LANES];
        }
        int[][] cols = columns;
        transpose(in, y0, rows, inW, cols);
        int[] a = lanes;
        int[] kk = k.fixed;
        int[] bounds = k.bounds;
        for (int xx = 0; xx < k.outSize; xx++) {
            int xmin = bounds[xx * 2];
            int xcount = bounds[xx * 2 + 1];
            int kOff = xx * k.ksize;
            Arrays.fill(a, 1 << (k.precision - 1));
            int x = 0;
            for (; x + 1 < xcount; x += 2) {
                int w0 = kk[kOff + x];
                int w1 = kk[kOff + x + 1];
                int[] c0 = cols[xmin + x];
                int[] c1 = cols[xmin + x + 1];
                for (int i = 0; i < LANES; i++) {
                    a[i] += c0[i] * w0 + c1[i] * w1;
                }
            }
            if (x < xcount) {
                int w = kk[kOff + x];
                int[] c = cols[xmin + x];
                for (int i = 0; i < LANES; i++) {
                    a[i] += c[i] * w;
                }
            }
            for (int i = 0; i < LANES; i++) {
                a[i] = clip8(a[i], k.precision);
            }
            for (int r = 0, o = xx * 3; r < rows; r++) {
                int[] row = blockRows[r];
                row[o] = a[r];
                row[o + 1] = a[BLOCK_ROWS + r];
                row[o + 2] = a[2 * BLOCK_ROWS + r];
            }
        }
    }

    /**
     * Transposes source rows {@code y0 .. y0+rows-1} into {@code cols}, column by column: the reads
     * walk {@code rows} rows side by side, the writes one column array.
     */
    private static void transpose(byte[] in, int y0, int rows, int inW, int[][] cols) {
        int stride = inW * 3;
        for (int x = 0, base = y0 * stride; x < inW; x++, base += 3) {
            int[] col = cols[x];
            for (int r = 0, p = base; r < rows; r++, p += stride) {
                col[r] = in[p] & 0xFF;
                col[BLOCK_ROWS + r] = in[p + 1] & 0xFF;
                col[2 * BLOCK_ROWS + r] = in[p + 2] & 0xFF;
            }
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
        Arrays.fill(a, 0, stride, 1 << (k.precision - 1));
        for (int y = 0; y < ycount; y++) {
            int w = k.fixed[kOff + y];
            int[] row = ring[(ymin + y) % ringSize];
            for (int i = 0; i < stride; i++) {
                a[i] += row[i] * w;
            }
        }
        for (int i = 0, o = yy * stride; i < stride; i++) {
            dst[o + i] = (byte) clip8(a[i], k.precision);
        }
    }

    private static int clip8(int v, int precision) {
        return Math.max(0, Math.min(v >> precision, 255));
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
     * torch's cubic filter for antialiasing, {@code HelperInterpCubic::aa_filter<double, true>}
     * ({@code a = -0.5}) with {@code cubic_convolution1/2} of {@code
     * aten/src/ATen/native/UpSample.h}: Pillow's polynomial written differently, so a double may
     * differ in its last bit.
     */
    static double torchFilter(double x) {
        double ax = Math.abs(x);
        if (ax < 1.0) {
            return ((A + 2) * ax - (A + 3)) * ax * ax + 1;
        }
        if (ax < 2.0) {
            return ((A * ax - 5 * A) * ax + 8 * A) * ax - 4 * A;
        }
        return 0.0;
    }

    /**
     * Per-axis coefficient table: Pillow's {@code precompute_coeffs} plus {@code
     * normalize_coeffs_8bpc} ({@link #of}), or torch's {@code _compute_index_ranges_weights} plus
     * {@code _compute_index_ranges_int16_weights} ({@link #torch}).
     */
    static final class Coefficients {
        final int outSize;
        final int ksize;

        /** Fixed-point fraction bits of {@link #fixed}. */
        final int precision;

        /** Pairs (first source index, number of taps) per output index. */
        final int[] bounds;

        /** {@code ksize} fixed-point taps per output index. */
        final int[] fixed;

        private Coefficients(int outSize, int ksize, int precision, int[] bounds, int[] fixed) {
            this.outSize = outSize;
            this.ksize = ksize;
            this.precision = precision;
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
            return new Coefficients(outSize, ksize, PRECISION_BITS, bounds, fixed);
        }

        /**
         * torch's table for uint8 input, {@code antialias=True}, {@code align_corners=False} and no
         * scale factor (the output size given): {@code scale = in / out} ({@code
         * area_pixel_compute_scale}), support {@code 2 * scale} when downscaling else 2, {@code
         * ksize = ceil(support) * 2 + 1}; per output {@code _compute_indices_min_size_weights_aa}
         * (bounds as Pillow's, the tap count clamped to {@code ksize}, weights divided by their sum
         * when it is not 0); then the precision from the largest normalised weight of the whole
         * axis and the weights rounded half away from zero to that many fraction bits.
         */
        static Coefficients torch(int inSize, int outSize) {
            double scale = (double) inSize / outSize;
            double support = scale >= 1.0 ? (4 * 0.5) * scale : 4 * 0.5;
            int ksize = (int) Math.ceil(support) * 2 + 1;
            double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
            int[] bounds = new int[outSize * 2];
            double[] w = new double[outSize * ksize];
            double wtMax = 0.0;
            for (int i = 0; i < outSize; i++) {
                double center = scale * (i + 0.5);
                int xmin = Math.max((int) (center - support + 0.5), 0);
                int xsize = Math.min((int) (center + support + 0.5), inSize) - xmin;
                xsize = Math.max(0, Math.min(xsize, ksize));
                double total = 0.0;
                for (int j = 0; j < xsize; j++) {
                    double v = torchFilter((j + xmin - center + 0.5) * invscale);
                    w[i * ksize + j] = v;
                    total += v;
                }
                if (total != 0.0) {
                    for (int j = 0; j < xsize; j++) {
                        w[i * ksize + j] /= total;
                        wtMax = Math.max(wtMax, w[i * ksize + j]);
                    }
                }
                bounds[i * 2] = xmin;
                bounds[i * 2 + 1] = xsize;
            }
            int precision = 0;
            for (; precision < TORCH_MAX_PRECISION; precision++) {
                if ((int) (0.5 + wtMax * (1 << (precision + 1))) >= (1 << 15)) {
                    break;
                }
            }
            int[] fixed = new int[w.length];
            for (int i = 0; i < w.length; i++) {
                double v = w[i] * (1 << precision);
                fixed[i] = (short) (v < 0 ? (int) (-0.5 + v) : (int) (0.5 + v));
            }
            return new Coefficients(outSize, ksize, precision, bounds, fixed);
        }
    }
}
