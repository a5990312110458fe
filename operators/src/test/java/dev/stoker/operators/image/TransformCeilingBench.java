package dev.stoker.operators.image;

import com.sun.management.OperatingSystemMXBean;
import dev.stoker.operators.model.PreprocessedImage;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.preset.ModelPreset;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CyclicBarrier;
import java.util.stream.Stream;

/**
 * Compute ceiling of the image stage: a tight loop over a folder of JPEGs in memory, no I/O, no
 * Flink. Run by {@code bench/transform-ceiling.sh}, which also runs the Pillow peer and prints the
 * ratios; see bench/README.md.
 *
 * <p>Modes: {@code tj-decode} (libjpeg-turbo decode to RGB only: the ceiling), {@code
 * tj-decode-dct} (the same at the DCT scale the fast mode picks), {@code imageio}, {@code tj},
 * {@code tj-dct} (the whole transform, {@link QwenImageProcessor#process} then {@link Patchifier}:
 * decode, resize, normalise, patchify, with ImageIO, libjpeg-turbo, and libjpeg-turbo with DCT
 * downscaling), {@code resize-only} (the {@link BicubicResampler} on pre-decoded images), {@code
 * patchify-only} ({@link Patchifier} on pre-resized images). With N threads each thread has its own
 * processor and runs whole passes; the figure is aggregate throughput.
 *
 * <p>Time is the process's CPU time (all threads, GC and JIT included), so that other tenants of a
 * shared machine do not count; wall time is reported beside it. Output: one line per mode, {@code
 * RESULT set=<name> mode=<m> threads=<n> ms_per_img=<median CPU ms per image> min_ms=<min>
 * wall_ms=<median wall ms per image, all threads together> img_s=<per core, from CPU time>
 * src_mp_s=<..> out_mp_s=<..> spread=<(max-min)/median>}.
 *
 * <p>Mode {@code dct-diff} times nothing: it prints, per image and for the set, how far the resized
 * RGB of the DCT fast mode is from the parity path's (mean and max absolute difference in uint8
 * levels, PSNR in dB) and the DCT scale chosen.
 *
 * <p>Arguments: {@code <set name> <folder> <max_pixels> <warm-up s> <repeat s> <repeats> <threads>
 * <mode>...}.
 */
public final class TransformCeilingBench {
    private TransformCeilingBench() {}

    /** One unit of work over one image; returns output pixels (to keep the JIT honest). */
    @FunctionalInterface
    private interface Work {
        long run(int image) throws RejectedRecordException;
    }

    public static void main(String[] args) throws Exception {
        String set = args[0];
        List<byte[]> images = new ArrayList<>();
        try (Stream<Path> files = Files.list(Path.of(args[1]))) {
            for (Path p : files.sorted().toList()) {
                images.add(Files.readAllBytes(p));
            }
        }
        QwenVisionConfig config = ModelPreset.QWEN2_VL.visionConfig();
        config.maxPixels = Long.parseLong(args[2]);
        double warmup = Double.parseDouble(args[3]);
        double repeatSeconds = Double.parseDouble(args[4]);
        int repeats = Integer.parseInt(args[5]);
        int threads = Integer.parseInt(args[6]);
        long srcPixels = 0;
        long outPixels = 0;
        ImageDecoder probe = new ImageDecoder(false);
        QwenImageProcessor sizes = new QwenImageProcessor(config, probe);
        for (byte[] img : images) {
            RgbImage d = probe.decode(img, Long.MAX_VALUE);
            srcPixels += (long) d.width() * d.height();
            int[] hw = sizes.targetSize(d.height(), d.width(), null);
            outPixels += (long) hw[0] * hw[1];
        }
        System.out.printf(
                Locale.ROOT,
                "set %s: %d images, %.2f source MP, %.2f target MP (max_pixels %d); libjpeg-turbo"
                        + " %s%n",
                set,
                images.size(),
                srcPixels / 1e6,
                outPixels / 1e6,
                config.maxPixels,
                TurboJpeg.available() ? "installed" : "NOT installed");
        for (int m = 7; m < args.length; m++) {
            String mode = args[m];
            if (mode.equals("dct-diff")) {
                dctDiff(set, config, images);
                continue;
            }
            Work[] work = new Work[threads];
            for (int t = 0; t < threads; t++) {
                work[t] = work(mode, config, images);
            }
            System.gc();
            double[][] msPerImage =
                    measure(work, images.size(), warmup, repeatSeconds, repeats, threads);
            double[] sorted = msPerImage[0].clone();
            Arrays.sort(sorted);
            double[] wall = msPerImage[1].clone();
            Arrays.sort(wall);
            double median = sorted[sorted.length / 2];
            double imgPerS = 1000.0 / median;
            System.out.printf(
                    Locale.ROOT,
                    "RESULT set=%s mode=%s threads=%d ms_per_img=%.3f min_ms=%.3f wall_ms=%.3f"
                            + " img_s=%.2f src_mp_s=%.1f out_mp_s=%.1f spread=%.2f%n",
                    set,
                    mode,
                    threads,
                    median,
                    sorted[0],
                    wall[wall.length / 2],
                    imgPerS,
                    imgPerS * srcPixels / images.size() / 1e6,
                    imgPerS * outPixels / images.size() / 1e6,
                    (sorted[sorted.length - 1] - sorted[0]) / median);
        }
    }

    /** Resized RGB of the DCT fast mode vs the parity path, per image and over the set. */
    private static void dctDiff(String set, QwenVisionConfig config, List<byte[]> images)
            throws RejectedRecordException {
        ImageDecoder full = new ImageDecoder(true);
        ImageDecoder scaled = new ImageDecoder(true);
        QwenImageProcessor sizes = new QwenImageProcessor(config, full);
        BicubicResampler resampler = new BicubicResampler();
        long sum = 0;
        long samples = 0;
        int max = 0;
        double squares = 0;
        for (int i = 0; i < images.size(); i++) {
            RgbImage a = full.decode(images.get(i), Long.MAX_VALUE);
            int srcW = a.width();
            int[] hw = sizes.targetSize(a.height(), a.width(), null);
            byte[] reference = resampler.resize(a, hw[1], hw[0]).pixels().clone();
            RgbImage b =
                    scaled.decode(
                            images.get(i), Long.MAX_VALUE, (h, w) -> sizes.targetSize(h, w, null));
            int scaledW = b.width();
            byte[] fast = resampler.resize(b, hw[1], hw[0]).pixels();
            long imageSum = 0;
            int imageMax = 0;
            double imageSquares = 0;
            int n = hw[0] * hw[1] * 3;
            for (int k = 0; k < n; k++) {
                int d = Math.abs((reference[k] & 0xFF) - (fast[k] & 0xFF));
                imageSum += d;
                imageMax = Math.max(imageMax, d);
                imageSquares += (double) d * d;
            }
            System.out.printf(
                    Locale.ROOT,
                    "DCT set=%s image=%d scale=1/%d target=%dx%d mean_abs=%.3f max_abs=%d"
                            + " psnr_db=%.1f%n",
                    set,
                    i,
                    Math.round((double) srcW / scaledW),
                    hw[1],
                    hw[0],
                    (double) imageSum / n,
                    imageMax,
                    psnr(imageSquares / n));
            sum += imageSum;
            samples += n;
            max = Math.max(max, imageMax);
            squares += imageSquares;
        }
        System.out.printf(
                Locale.ROOT,
                "DCT set=%s all mean_abs=%.3f max_abs=%d psnr_db=%.1f%n",
                set,
                (double) sum / samples,
                max,
                psnr(squares / samples));
    }

    private static double psnr(double mse) {
        return mse == 0 ? Double.POSITIVE_INFINITY : 10 * Math.log10(255.0 * 255.0 / mse);
    }

    private static Work work(String mode, QwenVisionConfig base, List<byte[]> images)
            throws RejectedRecordException {
        QwenVisionConfig dct = ModelPreset.QWEN2_VL.visionConfig();
        dct.maxPixels = base.maxPixels;
        dct.dctDownscale = true;
        switch (mode) {
            case "tj-decode":
                {
                    TurboJpegDecoder tj = new TurboJpegDecoder();
                    return i -> {
                        tj.readHeader(images.get(i));
                        RgbImage d = tj.decode(1);
                        return (long) d.width() * d.height();
                    };
                }
            case "tj-decode-dct":
                {
                    TurboJpegDecoder tj = new TurboJpegDecoder();
                    QwenImageProcessor sizes =
                            new QwenImageProcessor(base, new ImageDecoder(false));
                    return i -> {
                        tj.readHeader(images.get(i));
                        int[] hw = sizes.targetSize(tj.height(), tj.width(), null);
                        RgbImage d =
                                tj.decode(
                                        ImageDecoder.dctDenominator(
                                                tj.width(), tj.height(), hw[1], hw[0]));
                        return (long) d.width() * d.height();
                    };
                }
            case "imageio":
                return process(new QwenImageProcessor(base, new ImageDecoder(false)), base, images);
            case "tj":
                return process(new QwenImageProcessor(base, new ImageDecoder(true)), base, images);
            case "tj-dct":
                return process(new QwenImageProcessor(dct, new ImageDecoder(true)), dct, images);
            case "patchify-only":
                {
                    ImageDecoder decoder = new ImageDecoder(false);
                    QwenImageProcessor processor = new QwenImageProcessor(base, decoder);
                    List<RgbImage> resized = new ArrayList<>();
                    for (byte[] img : images) {
                        RgbImage d = decoder.decode(img, Long.MAX_VALUE);
                        int[] hw = processor.targetSize(d.height(), d.width(), null);
                        RgbImage r = new BicubicResampler().resize(d, hw[1], hw[0]);
                        resized.add(
                                new RgbImage(
                                        r.width(),
                                        r.height(),
                                        Arrays.copyOf(r.pixels(), r.width() * r.height() * 3)));
                    }
                    Patchifier patchifier = new Patchifier(base);
                    int ps = base.patchSize;
                    return i -> {
                        RgbImage r = resized.get(i);
                        return patchifier.patchify(r.pixels(), 0, r.height() / ps, r.width() / ps)
                                .length;
                    };
                }
            case "resize-only":
                {
                    List<RgbImage> decoded = new ArrayList<>();
                    ImageDecoder decoder = new ImageDecoder(false);
                    QwenImageProcessor sizes = new QwenImageProcessor(base, decoder);
                    List<int[]> targets = new ArrayList<>();
                    for (byte[] img : images) {
                        RgbImage d = decoder.decode(img, Long.MAX_VALUE);
                        decoded.add(d);
                        targets.add(sizes.targetSize(d.height(), d.width(), null));
                    }
                    BicubicResampler resampler = new BicubicResampler();
                    return i -> {
                        int[] hw = targets.get(i);
                        RgbImage r = resampler.resize(decoded.get(i), hw[1], hw[0]);
                        return r.pixels()[0] + (long) r.width() * r.height();
                    };
                }
            default:
                throw new IllegalArgumentException("unknown mode " + mode);
        }
    }

    /** The whole transform: {@link QwenImageProcessor#process} then {@link Patchifier}. */
    private static Work process(
            QwenImageProcessor processor, QwenVisionConfig config, List<byte[]> images) {
        Patchifier patchifier = new Patchifier(config);
        return i -> {
            PreprocessedImage p = processor.process(images.get(i), null);
            return patchifier.patchify(p.resizedRgb, 0, p.gridH, p.gridW).length;
        };
    }

    /**
     * Per repeat, {@code [0]} the process CPU milliseconds per image and {@code [1]} the wall
     * milliseconds per image (all threads together).
     */
    private static double[][] measure(
            Work[] work, int n, double warmup, double repeatSeconds, int repeats, int threads)
            throws Exception {
        OperatingSystemMXBean os =
                (OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        double[][] result = new double[2][repeats];
        long[] sink = new long[threads];
        CyclicBarrier barrier = new CyclicBarrier(threads);
        // phase -1 is the warm-up
        for (int phase = -1; phase < repeats; phase++) {
            double seconds = phase < 0 ? warmup : repeatSeconds;
            long[] done = new long[threads];
            Thread[] pool = new Thread[threads];
            Throwable[] failure = new Throwable[1];
            long start = System.nanoTime();
            long cpuStart = os.getProcessCpuTime();
            for (int t = 0; t < threads; t++) {
                int id = t;
                pool[t] =
                        new Thread(
                                () -> {
                                    try {
                                        barrier.await();
                                        long deadline = System.nanoTime() + (long) (seconds * 1e9);
                                        while (System.nanoTime() < deadline) {
                                            for (int i = 0; i < n; i++) {
                                                sink[id] += work[id].run(i);
                                            }
                                            done[id] += n;
                                        }
                                    } catch (Throwable e) {
                                        failure[0] = e;
                                    }
                                });
                pool[t].start();
            }
            for (Thread t : pool) {
                t.join();
            }
            if (failure[0] != null) {
                throw new IllegalStateException("benchmark work failed", failure[0]);
            }
            long elapsed = System.nanoTime() - start;
            long cpu = os.getProcessCpuTime() - cpuStart;
            if (phase >= 0) {
                long images = Arrays.stream(done).sum();
                result[0][phase] = cpu / 1e6 / images;
                result[1][phase] = elapsed / 1e6 / images;
            }
        }
        if (Arrays.stream(sink).sum() == 42) {
            System.out.println();
        }
        return result;
    }
}
