package dev.stoker.operators.image;

import dev.stoker.operators.model.RejectedRecordException;
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
 * {@code tj-dct} (the whole {@link QwenImageProcessor#process}: decode, resize, normalise,
 * patchify, with ImageIO, libjpeg-turbo, and libjpeg-turbo with DCT downscaling), {@code
 * resize-only} (the {@link BicubicResampler} on pre-decoded images). With N threads each thread has
 * its own processor and runs whole passes; the figure is aggregate throughput.
 *
 * <p>Output: one line per mode, {@code RESULT set=<name> mode=<m> threads=<n> ms_per_img=<median>
 * min_ms=<min> img_s=<..> src_mp_s=<..> out_mp_s=<..> spread=<(max-min)/median>}.
 *
 * <p>Arguments: {@code <set name> <folder> <warm-up s> <repeat s> <repeats> <threads> <mode>...}.
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
        double warmup = Double.parseDouble(args[2]);
        double repeatSeconds = Double.parseDouble(args[3]);
        int repeats = Integer.parseInt(args[4]);
        int threads = Integer.parseInt(args[5]);
        QwenVisionConfig config = new QwenVisionConfig();
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
                "set %s: %d images, %.2f source MP, %.2f target MP; libjpeg-turbo %s%n",
                set,
                images.size(),
                srcPixels / 1e6,
                outPixels / 1e6,
                TurboJpeg.available() ? "installed" : "NOT installed");
        for (int m = 6; m < args.length; m++) {
            String mode = args[m];
            Work[] work = new Work[threads];
            for (int t = 0; t < threads; t++) {
                work[t] = work(mode, config, images);
            }
            System.gc();
            double[] msPerImage =
                    measure(work, images.size(), warmup, repeatSeconds, repeats, threads);
            double[] sorted = msPerImage.clone();
            Arrays.sort(sorted);
            double median = sorted[sorted.length / 2];
            double imgPerS = 1000.0 / median;
            System.out.printf(
                    Locale.ROOT,
                    "RESULT set=%s mode=%s threads=%d ms_per_img=%.3f min_ms=%.3f img_s=%.2f"
                            + " src_mp_s=%.1f out_mp_s=%.1f spread=%.2f%n",
                    set,
                    mode,
                    threads,
                    median,
                    sorted[0],
                    imgPerS,
                    imgPerS * srcPixels / images.size() / 1e6,
                    imgPerS * outPixels / images.size() / 1e6,
                    (sorted[sorted.length - 1] - sorted[0]) / median);
        }
    }

    private static Work work(String mode, QwenVisionConfig base, List<byte[]> images)
            throws RejectedRecordException {
        QwenVisionConfig dct = new QwenVisionConfig();
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
                return process(new QwenImageProcessor(base, new ImageDecoder(false)), images);
            case "tj":
                return process(new QwenImageProcessor(base, new ImageDecoder(true)), images);
            case "tj-dct":
                return process(new QwenImageProcessor(dct, new ImageDecoder(true)), images);
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

    private static Work process(QwenImageProcessor processor, List<byte[]> images) {
        return i -> processor.process(images.get(i), null).pixelValues.length;
    }

    /** Per repeat, the wall milliseconds per image (all threads together). */
    private static double[] measure(
            Work[] work, int n, double warmup, double repeatSeconds, int repeats, int threads)
            throws Exception {
        double[] result = new double[repeats];
        long[] sink = new long[threads];
        CyclicBarrier barrier = new CyclicBarrier(threads);
        // phase -1 is the warm-up
        for (int phase = -1; phase < repeats; phase++) {
            double seconds = phase < 0 ? warmup : repeatSeconds;
            long[] done = new long[threads];
            Thread[] pool = new Thread[threads];
            Throwable[] failure = new Throwable[1];
            long start = System.nanoTime();
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
            if (phase >= 0) {
                result[phase] = elapsed / 1e6 / Arrays.stream(done).sum();
            }
        }
        if (Arrays.stream(sink).sum() == 42) {
            System.out.println();
        }
        return result;
    }
}
