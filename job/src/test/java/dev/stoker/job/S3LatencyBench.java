package dev.stoker.job;

import dev.stoker.connectors.fetch.S3ClientSettings;
import dev.stoker.connectors.fetch.S3FetchMetrics;
import dev.stoker.connectors.fetch.S3ImageStore;
import dev.stoker.testkit.FaultInjectingBlobStore;
import dev.stoker.testkit.LocalS3Server;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.stream.Stream;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

/**
 * Latency-hiding benchmark (run by {@code bench/s3-latency-hiding.sh}): the whole job, at default
 * settings, on an embedded Flink reading JSONL and images from a local S3 server, alternating runs
 * without and with injected GET latency (50 +- 20 ms to first byte on image objects), same data,
 * same JVM. Prints images/s of each run and the ratio (with latency / without), which should be at
 * least 0.9 when the async fetch hides S3 latency behind preprocessing.
 *
 * <p>All Stoker options are at their defaults except {@code stoker.image.max-pixels = 1003520} (the
 * common fine-tuning setting; it keeps preprocessing from dwarfing the fetch) and a world size of
 * 2.
 *
 * <p>Arguments: {@code DATASET_DIR REPLICAS ROUNDS}, or {@code --fetch-only [GETS]} for {@link
 * #fetchOnly}. The dataset's JSONL lines are repeated REPLICAS times (images uploaded once), so
 * each run fetches REPLICAS x its image references. images/s = image GETs served / wall time of the
 * job run (job start-up included).
 */
public final class S3LatencyBench {
    private S3LatencyBench() {}

    public static void main(String[] args) throws Exception {
        if (args.length > 0 && args[0].equals("--fetch-only")) {
            fetchOnly(args.length > 1 ? Integer.parseInt(args[1]) : 3000);
            return;
        }
        if (args.length > 0 && args[0].equals("--stragglers")) {
            stragglers(args.length > 1 ? Integer.parseInt(args[1]) : 2000);
            return;
        }
        if (args.length > 0 && args[0].equals("--stuck")) {
            stuck(args.length > 1 ? Integer.parseInt(args[1]) : 24);
            return;
        }
        if (args.length > 0 && args[0].equals("--throttled")) {
            throttled(
                    args.length > 1 ? Integer.parseInt(args[1]) : 1000,
                    args.length > 2 ? Double.parseDouble(args[2]) : 100);
            return;
        }
        Path dataset =
                Path.of(
                        args.length > 0
                                ? args[0]
                                : SharedData.dataDir().resolve("llava-style").toString());
        int replicas = args.length > 1 ? Integer.parseInt(args[1]) : 8;
        int rounds = args.length > 2 ? Integer.parseInt(args[2]) : 2;
        Path staged = Files.createTempDirectory("stoker-bench-");
        try (LocalS3Server s3 = new LocalS3Server().start()) {
            stage(dataset, staged, replicas);
            s3.uploadDirectory(staged, "bench", "data");
            Configuration s3conf = S3FileSystems.config(s3);
            S3FileSystems.use(s3);
            FaultInjectingBlobStore.Faults latency =
                    new FaultInjectingBlobStore.Faults(50, 20, 0, "data/images/.*");
            List<double[]> results = new ArrayList<>();
            for (int round = 0; round < rounds; round++) {
                double plain = run(s3, s3conf, FaultInjectingBlobStore.Faults.NONE);
                double delayed = run(s3, s3conf, latency);
                results.add(new double[] {plain, delayed});
                System.out.printf(
                        Locale.ROOT,
                        "round %d: no latency %.1f images/s, 50+-20 ms latency %.1f images/s, ratio %.3f%n",
                        round + 1,
                        plain,
                        delayed,
                        delayed / plain);
            }
            double sumPlain = results.stream().mapToDouble(r -> r[0]).sum();
            double sumDelayed = results.stream().mapToDouble(r -> r[1]).sum();
            System.out.printf(
                    Locale.ROOT,
                    "RESULT ratio=%.3f (mean images/s %.1f with latency / %.1f without; %d rounds, %d replicas)%n",
                    sumDelayed / sumPlain,
                    sumDelayed / rounds,
                    sumPlain / rounds,
                    rounds,
                    replicas);
        } finally {
            delete(staged);
        }
    }

    /**
     * The fetch alone, without the job: {@code gets} GETs of 100 KB objects through {@link
     * S3ImageStore} with at most {@code stoker.fetch.capacity} (default 32) in flight, without and
     * with 50 +- 20 ms latency. Shows the latency-bound ceiling (capacity / latency) that the job's
     * preprocessing must stay below for the latency to be hidden.
     */
    private static void fetchOnly(int gets) throws Exception {
        int capacity = StokerOptions.FETCH_CAPACITY.defaultValue();
        try (LocalS3Server s3 = new LocalS3Server().start()) {
            uploadPayloads(s3, 100 * 1024);
            S3ClientSettings settings =
                    S3FileSystems.clientSettings(s3).toBuilder().maxConnections(capacity).build();
            S3FetchMetrics metrics = new S3FetchMetrics(new UnregisteredMetricsGroup());
            try (S3ImageStore store = store(settings, metrics, 0, java.time.Duration.ZERO)) {
                round(store, gets / 4, capacity); // warm-up
                for (int round = 1; round <= 2; round++) {
                    double plain = round(store, gets, capacity).successesPerSecond();
                    s3.faults()
                            .setFaults(
                                    new FaultInjectingBlobStore.Faults(
                                            50, 20, 0, "data/images/.*"));
                    double delayed = round(store, gets, capacity).successesPerSecond();
                    s3.faults().setFaults(FaultInjectingBlobStore.Faults.NONE);
                    System.out.printf(
                            Locale.ROOT,
                            "fetch-only round %d (capacity %d): no latency %.0f GETs/s, 50+-20 ms latency %.0f GETs/s, ratio %.3f%n",
                            round,
                            capacity,
                            plain,
                            delayed,
                            delayed / plain);
                }
            }
        }
    }

    /**
     * A prefix throttled by the server: above {@code serverRate} GETs/s it answers 503 SlowDown
     * (plus 20 ms latency). Alternating rounds of {@code gets} GETs through a store without a
     * client-side limit and one limited to 90% of the server's rate
     * (stoker.s3.max-gets-per-second-per-prefix), default retries: successful GETs/s, retries and
     * GETs that failed after all attempts.
     */
    private static void throttled(int gets, double serverRate) throws Exception {
        int capacity = StokerOptions.FETCH_CAPACITY.defaultValue();
        try (LocalS3Server s3 = new LocalS3Server().start()) {
            uploadPayloads(s3, 20 * 1024);
            s3.faults().setFaults(new FaultInjectingBlobStore.Faults(20, 0, 0, "data/images/.*"));
            s3.faults().setRateLimit(serverRate);
            S3ClientSettings settings =
                    S3FileSystems.clientSettings(s3).toBuilder().maxConnections(capacity).build();
            for (int round = 1; round <= 2; round++) {
                for (double clientRate : new double[] {0, 0.9 * serverRate}) {
                    S3FetchMetrics metrics = new S3FetchMetrics(new UnregisteredMetricsGroup());
                    try (S3ImageStore store =
                            store(settings, metrics, clientRate, java.time.Duration.ZERO)) {
                        Round r = round(store, gets, capacity);
                        System.out.printf(
                                Locale.ROOT,
                                "throttled round %d, server limit %.0f GET/s, client limit %s: %.1f successful GETs/s, %d retries, %d failed GETs of %d%n",
                                round,
                                serverRate,
                                clientRate > 0
                                        ? String.format(Locale.ROOT, "%.0f GET/s", clientRate)
                                        : "none",
                                r.successesPerSecond(),
                                metrics.retries(),
                                r.failures(),
                                gets);
                    }
                }
            }
        }
    }

    /**
     * Stragglers: every GET gets 20 ms to first byte and 5% of them 500 ms more. Alternating rounds
     * of {@code gets} GETs at capacity 32 without hedging and with stoker.s3.hedge-after 100 ms:
     * GETs/s, p50/p99 latency, and the extra GETs hedging sent.
     */
    private static void stragglers(int gets) throws Exception {
        int capacity = StokerOptions.FETCH_CAPACITY.defaultValue();
        try (LocalS3Server s3 = new LocalS3Server().start()) {
            uploadPayloads(s3, 20 * 1024);
            S3ClientSettings settings = // room for the hedges
                    S3FileSystems.clientSettings(s3).toBuilder()
                            .maxConnections(2 * capacity)
                            .build();
            for (int round = 1; round <= 2; round++) {
                for (long hedgeMs : new long[] {0, 100}) {
                    s3.faults()
                            .setFaults(
                                    new FaultInjectingBlobStore.Faults(
                                            20, 0, 0, "data/images/.*", 0.05, 500));
                    S3FetchMetrics metrics = new S3FetchMetrics(new UnregisteredMetricsGroup());
                    long getsBefore = s3.faults().gets();
                    try (S3ImageStore store =
                            store(settings, metrics, 0, java.time.Duration.ofMillis(hedgeMs))) {
                        Round r = round(store, gets, capacity);
                        long[] latencies = r.latenciesMs();
                        System.out.printf(
                                Locale.ROOT,
                                "stragglers round %d, hedge after %s: %.1f GETs/s, latency p50 %d ms, p99 %d ms, max %d ms, %d GETs sent for %d reads%n",
                                round,
                                hedgeMs == 0 ? "never" : hedgeMs + " ms",
                                r.successesPerSecond(),
                                latencies[gets / 2],
                                latencies[(int) (gets * 0.99)],
                                latencies[gets - 1],
                                s3.faults().gets() - getsBefore,
                                gets);
                    }
                }
            }
            s3.faults().setFaults(FaultInjectingBlobStore.Faults.NONE);
        }
    }

    /**
     * Stuck GETs in the whole job: on top of 50 +- 20 ms latency, 2% of image GETs (about 20 in a
     * run of the llava-style dataset repeated {@code replicas} = 24 times) send nothing until long
     * after the attempt timeout (stoker.s3.attempt-timeout, default 10 s), so only a retry or a
     * hedge gets their image. One run without faults, then one per stoker.s3.hedge-after value
     * (off, 250 ms, 500 ms, 1 s, 2 s), all other options at their defaults: images/s, wall time,
     * and GETs sent beyond one per image (hedges and retries, from the server's GET count against
     * the fault-free run's).
     */
    private static void stuck(int replicas) throws Exception {
        Path dataset = SharedData.dataDir().resolve("llava-style");
        Path staged = Files.createTempDirectory("stoker-bench-");
        try (LocalS3Server s3 = new LocalS3Server().start()) {
            stage(dataset, staged, replicas);
            s3.uploadDirectory(staged, "bench", "data");
            Configuration s3conf = S3FileSystems.config(s3);
            S3FileSystems.use(s3);
            Run clean =
                    run(s3, s3conf, FaultInjectingBlobStore.Faults.NONE, java.time.Duration.ZERO);
            System.out.printf(
                    Locale.ROOT,
                    "stuck GETs: no faults, hedging off: %.1f images/s, %.1f s, %d GETs%n",
                    clean.imagesPerSecond(),
                    clean.seconds(),
                    clean.gets());
            FaultInjectingBlobStore.Faults stuckGets =
                    new FaultInjectingBlobStore.Faults(50, 20, 0, "data/images/.*", 0.02, 120_000);
            for (long hedgeMs : new long[] {0, 250, 500, 1000, 2000}) {
                Run r = run(s3, s3conf, stuckGets, java.time.Duration.ofMillis(hedgeMs));
                double imagesPerSecond = (clean.gets() - 1) / r.seconds();
                System.out.printf(
                        Locale.ROOT,
                        "stuck GETs: 2%% stuck + 50+-20 ms, hedge after %s: %.1f images/s (%.2fx the fault-free run), %.1f s, %d extra GETs (%.1f%%)%n",
                        hedgeMs == 0 ? "never" : hedgeMs + " ms",
                        imagesPerSecond,
                        imagesPerSecond / clean.imagesPerSecond(),
                        r.seconds(),
                        r.gets() - clean.gets(),
                        100.0 * (r.gets() - clean.gets()) / (clean.gets() - 1));
            }
            s3.faults().setFaults(FaultInjectingBlobStore.Faults.NONE);
        } finally {
            delete(staged);
        }
    }

    /** What one job run measured: images/s (GETs served / wall time), wall time, GETs served. */
    private record Run(double imagesPerSecond, double seconds, long gets) {}

    /** What one round of GETs measured: successful GETs/s, failed GETs, sorted latencies. */
    private record Round(double successesPerSecond, long failures, long[] latenciesMs) {}

    /** {@code gets} reads of the 64 payload keys with at most {@code capacity} in flight. */
    private static Round round(S3ImageStore store, int gets, int capacity) throws Exception {
        java.util.concurrent.Semaphore slots = new java.util.concurrent.Semaphore(capacity);
        java.util.concurrent.CountDownLatch done = new java.util.concurrent.CountDownLatch(gets);
        java.util.concurrent.atomic.AtomicLong failed =
                new java.util.concurrent.atomic.AtomicLong();
        long[] latencies = new long[gets];
        long start = System.nanoTime();
        for (int i = 0; i < gets; i++) {
            slots.acquire();
            int n = i;
            long t0 = System.nanoTime();
            store.read("s3://bench/data", "images/" + (i % 64) + ".bin")
                    .whenComplete(
                            (b, e) -> {
                                latencies[n] = (System.nanoTime() - t0) / 1_000_000;
                                if (e != null) {
                                    failed.incrementAndGet();
                                }
                                slots.release();
                                done.countDown();
                            });
        }
        done.await();
        double seconds = (System.nanoTime() - start) / 1e9;
        java.util.Arrays.sort(latencies);
        return new Round((gets - failed.get()) / seconds, failed.get(), latencies);
    }

    /**
     * Uploads 64 random objects of {@code bytes} each as {@code s3://bench/data/images/<i>.bin}.
     */
    private static void uploadPayloads(LocalS3Server s3, int bytes) throws Exception {
        Path dir = Files.createTempDirectory("stoker-bench-");
        try {
            Files.createDirectories(dir.resolve("images"));
            byte[] payload = new byte[bytes];
            new java.util.Random(1).nextBytes(payload);
            for (int i = 0; i < 64; i++) {
                Files.write(dir.resolve("images/" + i + ".bin"), payload);
            }
            s3.uploadDirectory(dir, "bench", "data");
        } finally {
            delete(dir);
        }
    }

    private static S3ImageStore store(
            S3ClientSettings settings,
            S3FetchMetrics metrics,
            double getsPerSecondPerPrefix,
            java.time.Duration hedgeAfter) {
        return new S3ImageStore(
                1 << 20,
                1 << 20,
                settings.toBuilder()
                        .getsPerSecondPerPrefix(getsPerSecondPerPrefix)
                        .hedgeAfter(hedgeAfter)
                        .build(),
                metrics);
    }

    /** images/s of one job run under {@code faults}. */
    private static double run(
            LocalS3Server s3, Configuration s3conf, FaultInjectingBlobStore.Faults faults)
            throws Exception {
        return run(s3, s3conf, faults, java.time.Duration.ZERO).imagesPerSecond();
    }

    /** One job run under {@code faults} with stoker.s3.hedge-after = {@code hedgeAfter}. */
    private static Run run(
            LocalS3Server s3,
            Configuration s3conf,
            FaultInjectingBlobStore.Faults faults,
            java.time.Duration hedgeAfter)
            throws Exception {
        Path out = Files.createTempDirectory(Path.of("/dev/shm"), "stoker-bench-");
        try {
            Configuration conf = new Configuration(s3conf);
            conf.set(StokerOptions.DATASET_PATH, "s3://bench/data");
            conf.set(
                    StokerOptions.TOKENIZER_PATH,
                    SharedData.dataDir().resolve("tokenizers/qwen3").toString());
            conf.set(StokerOptions.OUTPUT_ROOT, out.toString());
            conf.set(StokerOptions.JOB_NAME, "bench");
            conf.set(StokerOptions.DP_WORLD_SIZE, 2);
            conf.set(
                    StokerOptions.MAX_PIXELS,
                    1003520L); // the common 1280-token fine-tuning setting
            conf.set(
                    CheckpointingOptions.CHECKPOINTS_DIRECTORY,
                    out.resolve("checkpoints").toUri().toString());
            conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
            conf.set(StokerOptions.S3_HEDGE_AFTER, hedgeAfter);
            conf.set(StokerOptions.PREFETCH_DEPTH, 0); // no trainer acknowledges: no prefetch gate
            StreamExecutionEnvironment env =
                    StreamExecutionEnvironment.createLocalEnvironment(conf);
            env.enableCheckpointing(10_000);
            StokerJob.build(env, conf);
            s3.faults().setFaults(faults);
            long getsBefore = s3.faults().gets();
            long start = System.nanoTime();
            env.execute("bench");
            double seconds = (System.nanoTime() - start) / 1e9;
            long gets = s3.faults().gets() - getsBefore;
            return new Run((gets - 1) / seconds, seconds, gets); // minus the JSONL GET
        } finally {
            s3.faults().setFaults(FaultInjectingBlobStore.Faults.NONE);
            delete(out);
        }
    }

    /** Copies the dataset with every JSONL file's lines repeated {@code replicas} times. */
    private static void stage(Path dataset, Path target, int replicas) throws Exception {
        try (Stream<Path> files = Files.walk(dataset)) {
            for (Path f : files.filter(Files::isRegularFile).toList()) {
                Path dest = target.resolve(dataset.relativize(f).toString());
                Files.createDirectories(dest.getParent());
                if (f.toString().endsWith(".jsonl")) {
                    List<String> lines = Files.readAllLines(f);
                    List<String> repeated = new ArrayList<>();
                    for (int i = 0; i < replicas; i++) {
                        repeated.addAll(lines);
                    }
                    Files.write(dest, repeated);
                } else if (f.startsWith(dataset.resolve("images"))) {
                    Files.copy(f, dest);
                }
            }
        }
    }

    private static void delete(Path dir) throws Exception {
        try (Stream<Path> walk = Files.walk(dir)) {
            walk.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        }
    }
}
