package dev.stoker.job;

import dev.stoker.connectors.source.PrefetchGate;
import dev.stoker.connectors.source.ShuffledJsonlSource;
import dev.stoker.operators.batch.BatchPlan;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.stream.Stream;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.util.InstantiationUtil;

/**
 * Planning at scale (issue 35): how long {@link MixturePlan#of} takes over a generated mixture of
 * {@code SOURCES} sources of short text records, the first time (every file read and indexed) and
 * again with the indexes reused, against the rate at which the same files are read once from the
 * page cache (the limit a first planning cannot beat); the heap the plan keeps; and the size of the
 * serialized source, the part of the job graph the dataset is in. Run by {@code
 * bench/planning-scale.sh}; not a test.
 *
 * <p>Arguments: {@code WORK_DIR RECORDS[,RECORDS...] [SOURCES] [FILES_PER_SOURCE]} (defaults 40
 * sources, 4 files each). Datasets are generated once under {@code WORK_DIR} and kept.
 */
public final class PlanningScaleBench {
    private PlanningScaleBench() {}

    public static void main(String[] args) throws Exception {
        Path work = Path.of(args[0]);
        int sources = args.length > 2 ? Integer.parseInt(args[2]) : 40;
        int files = args.length > 3 ? Integer.parseInt(args[3]) : 4;
        System.out.println(
                "records | sources x files | JSONL | read once (page cache) | planned, first |"
                        + " planned, indexes reused | heap kept by the plan | serialized source");
        for (String n : args[1].split(",")) {
            long records = Long.parseLong(n);
            Path dir = work.resolve("mixture-" + records + "-" + sources + "x" + files);
            Path spec = generate(dir, records, sources, files);
            long bytes = sizeOf(dir);
            double readS = readAll(dir);
            Path cache = dir.resolve("index-cache");
            deleteTree(cache);
            Configuration conf = new Configuration();
            conf.set(StokerOptions.MIXTURE_PATH, spec.toString());
            conf.set(StokerOptions.INDEX_CACHE, cache.toString());
            double firstS = time(() -> MixturePlan.of(conf, MixtureSpec.of(conf)));
            long heapBefore = usedHeap();
            long start = System.nanoTime();
            MixturePlan plan = MixturePlan.of(conf, MixtureSpec.of(conf));
            double reusedS = (System.nanoTime() - start) / 1e9;
            long heapKept = usedHeap() - heapBefore;
            BatchPlan batches = new BatchPlan(plan.order.recordsPerEpoch(), 8, 4, 1);
            ShuffledJsonlSource source =
                    new ShuffledJsonlSource(
                            plan.listings,
                            plan.order,
                            batches,
                            1 << 20,
                            1 << 28,
                            new PrefetchGate(null, "bench", 0, 0));
            int serialized = InstantiationUtil.serializeObject(source).length;
            System.out.printf(
                    Locale.ROOT,
                    "%,d | %d x %d | %.2f GB | %.1f s (%.0f MB/s) | %.1f s | %.2f s | %.1f MB (%.2f B/record) | %,d bytes%n",
                    plan.order.recordsPerEpoch(),
                    sources,
                    files,
                    bytes / 1e9,
                    readS,
                    bytes / 1e6 / readS,
                    firstS,
                    reusedS,
                    heapKept / 1e6,
                    (double) heapKept / records,
                    serialized);
        }
    }

    /** {@code records} short LLaVA records over {@code sources} x {@code files} JSONL files. */
    private static Path generate(Path dir, long records, int sources, int files)
            throws IOException {
        Path spec = dir.resolve("mixture.yaml");
        if (Files.exists(spec)) {
            return spec;
        }
        StringBuilder yaml = new StringBuilder("sources:\n");
        long perFile = records / ((long) sources * files);
        long left = records - perFile * sources * files;
        long id = 0;
        for (int s = 0; s < sources; s++) {
            Path source = Files.createDirectories(dir.resolve("source-" + s));
            for (int f = 0; f < files; f++) {
                long n = perFile + (left-- > 0 ? 1 : 0);
                try (BufferedWriter out =
                        Files.newBufferedWriter(
                                source.resolve("part-" + f + ".jsonl"), StandardCharsets.UTF_8)) {
                    for (long r = 0; r < n; r++, id++) {
                        out.write("{\"id\": \"r");
                        out.write(Long.toString(id));
                        out.write(
                                "\", \"conversations\": [{\"from\": \"human\", \"value\": \"Question"
                                        + " about a chart?\"}, {\"from\": \"gpt\", \"value\":"
                                        + " \"An answer.\"}]}\n");
                    }
                }
            }
            yaml.append("  - {name: source-")
                    .append(s)
                    .append(", path: source-")
                    .append(s)
                    .append(", weight: ")
                    .append(1 + s % 4)
                    .append("}\n");
        }
        Files.writeString(spec, yaml.toString());
        return spec;
    }

    /** Seconds to read every JSONL file once, 8 files at a time (as the listing does). */
    private static double readAll(Path dir) throws Exception {
        List<Path> jsonl;
        try (Stream<Path> all = Files.walk(dir)) {
            jsonl = all.filter(p -> p.toString().endsWith(".jsonl")).toList();
        }
        ExecutorService pool = Executors.newFixedThreadPool(8);
        long start = System.nanoTime();
        List<Future<Long>> reads = new ArrayList<>();
        for (Path p : jsonl) {
            reads.add(
                    pool.submit(
                            () -> {
                                byte[] buffer = new byte[1 << 16];
                                long total = 0;
                                try (InputStream in = Files.newInputStream(p)) {
                                    for (int k; (k = in.read(buffer)) > 0; ) {
                                        total += k;
                                    }
                                }
                                return total;
                            }));
        }
        for (Future<Long> r : reads) {
            r.get();
        }
        pool.shutdown();
        return (System.nanoTime() - start) / 1e9;
    }

    private static long sizeOf(Path dir) throws IOException {
        try (Stream<Path> all = Files.walk(dir)) {
            return all.filter(p -> p.toString().endsWith(".jsonl"))
                    .mapToLong(p -> p.toFile().length())
                    .sum();
        }
    }

    private static void deleteTree(Path dir) throws IOException {
        if (!Files.exists(dir)) {
            return;
        }
        try (Stream<Path> all = Files.walk(dir)) {
            for (Path p : all.sorted(java.util.Comparator.reverseOrder()).toList()) {
                Files.delete(p);
            }
        }
    }

    private interface Task {
        void run() throws Exception;
    }

    private static double time(Task task) throws Exception {
        long start = System.nanoTime();
        task.run();
        return (System.nanoTime() - start) / 1e9;
    }

    private static long usedHeap() throws InterruptedException {
        Runtime rt = Runtime.getRuntime();
        for (int i = 0; i < 3; i++) {
            System.gc();
            Thread.sleep(100);
        }
        return rt.totalMemory() - rt.freeMemory();
    }
}
