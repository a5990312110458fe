package dev.stoker.connectors.shm;

import dev.stoker.connectors.protocol.PixelDtype;
import dev.stoker.connectors.protocol.ShmLayout;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import dev.stoker.operators.preset.ModelPreset;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Comparator;
import java.util.Locale;
import java.util.Random;
import java.util.stream.Stream;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;

/**
 * Cost of turning one batch into its Arrow file in {@code /dev/shm}, with the sink's pooled Arrow
 * memory ({@link ArrowMemoryPool}, mode {@code pooled}) or Arrow's default allocator (mode {@code
 * unpooled}). Run by {@code bench/sink-encode.sh}; see bench/README.md.
 *
 * <p>Each of {@code <batches>} batches of {@code <samples>} samples, each one image of {@code
 * <patches>} patches (a multiple of 64; 1024 = a 448x448 image, 602 KB of resized RGB that become
 * 4.8 MB of float32 pixel_values with Qwen2-VL's 1176 values per patch; the encode normalises and
 * patchifies them, or only patchifies them with {@code UINT8}), is encoded once and closed ({@link
 * ArrowBatchEncoder#encode}), then encoded and written as a file ({@link BatchFileWriter#write}),
 * and the file deleted. Output: {@code RESULT mode=<m> dtype=<d> encode_ms=<median wall ms per
 * encode> encode_write_ms=<median wall ms per encode + write> cpu_ms=<median CPU ms of the thread
 * for both> file_bytes=<size of a batch file>}.
 *
 * <p>Arguments: {@code <mode> <dtype> <batches> <samples> <patches>}, {@code <dtype>} a {@link
 * PixelDtype} ({@code FLOAT32}, {@code BFLOAT16}, {@code UINT8}).
 */
public final class SinkEncodeBench {
    private SinkEncodeBench() {}

    public static void main(String[] args) throws Exception {
        boolean pooled = args[0].equals("pooled");
        PixelDtype dtype = PixelDtype.valueOf(args[1]);
        int batches = Integer.parseInt(args[2]);
        int samples = Integer.parseInt(args[3]);
        int patches = Integer.parseInt(args[4]);
        Random random = new Random(1);
        TokenizedSample[] batch = new TokenizedSample[samples];
        for (int i = 0; i < samples; i++) {
            byte[] px = new byte[patches * 14 * 14 * 3];
            random.nextBytes(px);
            batch[i] =
                    new TokenizedSample(
                            new RecordRef(
                                    RecordRef.SINGLE_SOURCE, "bench.jsonl", i + 1, i, "r" + i),
                            new long[400],
                            new long[400],
                            px,
                            new long[] {1, 32, patches / 32});
        }
        Path jobDir = Files.createTempDirectory(Path.of("/dev/shm"), "stoker-sink-bench-");
        ShmLayout layout = new ShmLayout(jobDir.toString(), "g1");
        ArrowBatchEncoder encoder =
                new ArrowBatchEncoder(ModelPreset.QWEN2_VL.visionConfig(), 0, dtype);
        BatchFileWriter files = new BatchFileWriter(layout, encoder);
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        double[] encodeMs = new double[batches];
        double[] encodeWriteMs = new double[batches];
        double[] cpuMs = new double[batches];
        long fileBytes = 0;
        try (ArrowMemoryPool pool = new ArrowMemoryPool();
                BufferAllocator allocator =
                        pooled
                                ? new RootAllocator(
                                        RootAllocator.configBuilder()
                                                .allocationManagerFactory(pool)
                                                .build())
                                : new RootAllocator()) {
            for (int step = 0; step < batches; step++) {
                TrainingBatch b = new TrainingBatch(step, 0, samples, batch, new int[0]);
                long cpu0 = threads.getCurrentThreadCpuTime();
                long t0 = System.nanoTime();
                try (VectorSchemaRoot root = encoder.encode(b, allocator)) {
                    encodeMs[step] = (System.nanoTime() - t0) / 1e6;
                }
                long t1 = System.nanoTime();
                files.write(b, allocator);
                encodeWriteMs[step] = (System.nanoTime() - t1) / 1e6;
                cpuMs[step] = (threads.getCurrentThreadCpuTime() - cpu0) / 1e6;
                fileBytes = Files.size(layout.batchFile(step, 0));
                Files.delete(layout.batchFile(step, 0));
            }
        }
        System.out.printf(
                Locale.ROOT,
                "RESULT mode=%s dtype=%s encode_ms=%.2f encode_write_ms=%.2f cpu_ms=%.2f"
                        + " file_bytes=%d%n",
                args[0],
                dtype,
                median(encodeMs),
                median(encodeWriteMs),
                median(cpuMs),
                fileBytes);
        try (Stream<Path> walk = Files.walk(jobDir)) {
            walk.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        }
    }

    private static double median(double[] values) {
        double[] sorted = values.clone();
        Arrays.sort(sorted);
        return sorted[sorted.length / 2];
    }
}
