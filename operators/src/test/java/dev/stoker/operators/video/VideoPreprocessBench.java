package dev.stoker.operators.video;

import com.sun.management.OperatingSystemMXBean;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.preset.ModelPreset;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;

/**
 * Throughput of {@link VideoPreprocessor#preprocess} (decode, frame sampling, resize, normalise,
 * patchify) over a folder of clip files, with the Qwen2-VL preset: no Flink, no I/O beyond the
 * files (from the page cache). Run by {@code bench/video-preprocess.sh} beside the Python peer
 * ({@code bench/video_preprocess.py}); see bench/README.md.
 *
 * <p>Mode {@code run}: each of {@code threads} threads has its own {@link VideoPreprocessor}; every
 * thread first preprocesses {@code warmup} clips (JIT warm-up, not timed), then the threads take
 * the {@code passes} x clips videos from one shared counter until none is left. Time is wall time
 * from the start of the timed part to the last video's end, and the process's CPU time over the
 * same span (all threads, GC and JIT included). Prints one line {@code RESULT {json}} with videos,
 * sampled frames, frames up to and including the last sampled one (what the decoder decodes: it
 * reads sequentially from the start), wall and CPU seconds, and the rates.
 *
 * <p>Mode {@code dump}: preprocesses one clip and writes {@code pixel_values_videos} as
 * little-endian float32 to {@code out}, and prints {@code DUMP {json}} with its shape, the grid and
 * the frame indices, for the peer's bit-for-bit comparison.
 *
 * <p>Arguments: {@code run <clip dir> <fps> <min_pixels> <max_pixels> <threads> <warmup> <passes>}
 * or {@code dump <clip file> <fps> <min_pixels> <max_pixels> <out>}.
 */
public final class VideoPreprocessBench {
    /** Generous bounds: the bench's clips are at most 1920x1080 and 300 frames. */
    private static final VideoLimits LIMITS = new VideoLimits(1L << 24, 100_000, 1L << 34);

    private VideoPreprocessBench() {}

    public static void main(String[] args) throws Exception {
        double fps = Double.parseDouble(args[2]);
        long minPixels = Long.parseLong(args[3]);
        long maxPixels = Long.parseLong(args[4]);
        switch (args[0]) {
            case "run" ->
                    run(
                            Path.of(args[1]),
                            fps,
                            minPixels,
                            maxPixels,
                            Integer.parseInt(args[5]),
                            Integer.parseInt(args[6]),
                            Integer.parseInt(args[7]));
            case "dump" -> dump(Path.of(args[1]), fps, minPixels, maxPixels, Path.of(args[5]));
            default -> throw new IllegalArgumentException("mode run or dump: " + args[0]);
        }
    }

    private static VideoPreprocessor preprocessor(double fps, long minPixels, long maxPixels) {
        QwenVideoConfig config = ModelPreset.QWEN2_VL.videoConfig();
        config.minPixels = minPixels;
        config.maxPixels = maxPixels;
        return new VideoPreprocessor(config, VideoPreprocessor.FrameRule.QWEN2_VL, fps, LIMITS);
    }

    private static void run(
            Path dir,
            double fps,
            long minPixels,
            long maxPixels,
            int threads,
            int warmup,
            int passes)
            throws Exception {
        List<Path> clips;
        try (Stream<Path> files = Files.list(dir)) {
            clips = files.filter(p -> p.toString().endsWith(".mp4")).sorted().toList();
        }
        if (clips.isEmpty()) {
            throw new IllegalArgumentException("no .mp4 clip in " + dir);
        }
        int videos = passes * clips.size();
        AtomicInteger next = new AtomicInteger();
        AtomicLong sampled = new AtomicLong();
        AtomicLong through = new AtomicLong();
        AtomicLong checksum = new AtomicLong();
        List<Throwable> errors = Collections.synchronizedList(new ArrayList<>());
        OperatingSystemMXBean os =
                (OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        long[] start = new long[2]; // wall ns, CPU ns: set by the last thread through the barrier
        CyclicBarrier timed =
                new CyclicBarrier(
                        threads,
                        () -> {
                            start[0] = System.nanoTime();
                            start[1] = os.getProcessCpuTime();
                        });
        List<Thread> workers = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            int first = t;
            Thread worker =
                    new Thread(
                            () -> {
                                try {
                                    VideoPreprocessor p = preprocessor(fps, minPixels, maxPixels);
                                    for (int w = 0; w < warmup; w++) {
                                        p.preprocess(clips.get((first + w) % clips.size()));
                                    }
                                    timed.await();
                                    for (int i = next.getAndIncrement();
                                            i < videos;
                                            i = next.getAndIncrement()) {
                                        VideoPreprocessor.Result r =
                                                p.preprocess(clips.get(i % clips.size()));
                                        int[] idx = r.frameIndices();
                                        sampled.addAndGet(idx.length);
                                        through.addAndGet(idx[idx.length - 1] + 1L);
                                        float[] pv = r.video().pixelValuesVideos();
                                        checksum.addAndGet(
                                                pv.length
                                                        + Float.floatToIntBits(pv[pv.length - 1]));
                                    }
                                } catch (Exception | Error e) {
                                    errors.add(e);
                                    timed.reset();
                                }
                            },
                            "bench-" + t);
            workers.add(worker);
            worker.start();
        }
        for (Thread worker : workers) {
            worker.join();
        }
        long wallNs = System.nanoTime() - start[0];
        long cpuNs = os.getProcessCpuTime() - start[1];
        if (!errors.isEmpty()) {
            IllegalStateException e = new IllegalStateException("a bench thread failed");
            errors.forEach(e::addSuppressed);
            throw e;
        }
        double wall = wallNs / 1e9;
        double cpu = cpuNs / 1e9;
        System.out.printf(
                Locale.ROOT,
                "RESULT {\"contender\": \"stoker\", \"workers\": %d, \"clip_dir\": \"%s\","
                        + " \"clips\": %d, \"warmup_videos_per_worker\": %d, \"passes\": %d,"
                        + " \"videos\": %d, \"sampled_frames\": %d, \"frames_through_last_sample\": %d,"
                        + " \"wall_s\": %.3f, \"cpu_s\": %.3f, \"videos_per_s\": %.4f,"
                        + " \"frames_per_s\": %.3f, \"videos_per_cpu_s\": %.4f,"
                        + " \"frames_per_cpu_s\": %.3f, \"checksum\": %d}%n",
                threads,
                dir,
                clips.size(),
                warmup,
                passes,
                videos,
                sampled.get(),
                through.get(),
                wall,
                cpu,
                videos / wall,
                sampled.get() / wall,
                videos / cpu,
                sampled.get() / cpu,
                checksum.get());
    }

    private static void dump(Path clip, double fps, long minPixels, long maxPixels, Path out)
            throws RejectedRecordException, IOException {
        VideoPreprocessor.Result r = preprocessor(fps, minPixels, maxPixels).preprocess(clip);
        float[] pv = r.video().pixelValuesVideos();
        ByteBuffer bytes = ByteBuffer.allocate(pv.length * Float.BYTES);
        bytes.order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().put(pv);
        Files.write(out, bytes.array());
        int[] grid = r.video().gridThw();
        System.out.printf(
                Locale.ROOT,
                "DUMP {\"clip\": \"%s\", \"values\": %d, \"grid_thw\": %s, \"frames_indices\": %s}%n",
                clip,
                pv.length,
                Arrays.toString(grid),
                Arrays.toString(r.frameIndices()));
    }
}
