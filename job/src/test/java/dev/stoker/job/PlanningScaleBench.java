package dev.stoker.job;

import dev.stoker.connectors.fetch.S3ClientSettings;
import dev.stoker.connectors.source.PrefetchGate;
import dev.stoker.connectors.source.ShuffledJsonlSource;
import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.testkit.LocalS3Server;
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.JobStatus;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.core.fs.FileStatus;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.plugin.PluginUtils;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.minicluster.MiniClusterConfiguration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.InstantiationUtil;
import software.amazon.awssdk.services.s3.S3AsyncClient;

/**
 * Planning at scale (issue 35), per record count and per store (local files; the testkit's S3
 * server, S3Proxy, in its own process on 127.0.0.1): over a generated mixture of {@code SOURCES}
 * sources of short text records,
 *
 * <ul>
 *   <li>the time to read every JSONL byte once, 8 files at a time, through Flink's filesystem (the
 *       limit a first planning cannot beat);
 *   <li>{@link MixturePlan#of} the first time (every file read and indexed) and again with the
 *       indexes reused, and the heap the plan keeps (the client's memory);
 *   <li>the serialized {@link JobGraph} of the whole job as {@link StokerJob#build} makes it;
 *   <li>the JobManager's heap: the used heap after a full GC with the job submitted to a
 *       MiniCluster that has no TaskManager (job graph, execution graph, scheduler and the source's
 *       enumerator alive in the JobManager, the tasks waiting for slots), less before it;
 *   <li>the time to the first batch: from {@link StokerJob#build} (planning, the client's part of a
 *       submission) to the first {@code step-*.arrow} file in {@code /dev/shm} of the real job on
 *       an embedded MiniCluster (one TaskManager, 2 slots, parallelism 2, the shared Qwen
 *       tokenizer, W = 2, B = 4, prefetch depth 2), with the index cache empty and reused.
 * </ul>
 *
 * Run by {@code bench/planning-scale.sh}; not a test.
 *
 * <p>Arguments: {@code WORK_DIR RECORDS[,RECORDS...] [SOURCES] [FILES_PER_SOURCE] [STORES]}
 * (defaults 40 sources, 4 files each, stores {@code local,s3}). Datasets are generated once under
 * {@code WORK_DIR} and kept, and so are their uploads (the S3 server's data lives in {@code
 * WORK_DIR/s3-data}); index caches under {@code WORK_DIR/index-cache} and {@code
 * s3://bench/index-cache}.
 */
public final class PlanningScaleBench {
    private static final String BUCKET = "bench";
    private static final String JOB_NAME = "bench-planning";
    private static final int PARALLELISM = 2;
    private static final int READ_THREADS = 8;
    private static final long FIRST_BATCH_TIMEOUT_NS = TimeUnit.MINUTES.toNanos(10);

    private PlanningScaleBench() {}

    public static void main(String[] args) {
        try {
            run(args);
        } catch (Exception e) {
            e.printStackTrace();
            System.exit(1);
        }
        // Flink's and the S3 clients' non-daemon threads
        System.exit(0);
    }

    private static void run(String[] args) throws Exception {
        Path work = Path.of(args[0]).toAbsolutePath();
        int sources = args.length > 2 ? Integer.parseInt(args[2]) : 40;
        int files = args.length > 3 ? Integer.parseInt(args[3]) : 4;
        Set<String> stores = Set.of((args.length > 4 ? args[4] : "local,s3").split(","));
        Process server = null;
        try {
            Configuration s3 = new Configuration();
            if (stores.contains("s3")) {
                server = startS3(work.resolve("s3-data"));
                s3 = s3Options(endpoint(server));
            }
            // Flink's S3 filesystem plugin from FLINK_PLUGINS_DIR, as StokerJob's embedded run
            FileSystem.initialize(s3, PluginUtils.createPluginManagerFromRootFolder(s3));
            MiniCluster cluster = cluster(1);
            MiniCluster jobManagerOnly = cluster(0);
            try {
                // classes loaded and compiled before the first measurement
                Path warmUp = generate(work.resolve("warm-up"), 1000, 2, 1).getParent();
                Configuration mixture =
                        Target.local(warmUp, work.resolve("index-cache/warm-up")).mixture();
                firstBatch(cluster, mixture);
                jobManagerHeap(jobManagerOnly, mixture);
                table(
                        work,
                        "records | store | JSONL | read once | planned, first | planned, indexes"
                                + " reused | client: heap kept by the plan | job graph"
                                + " (serialized) | JobManager: heap with the job submitted | first"
                                + " batch, first (of it: build) | first batch, indexes reused (of"
                                + " it: build)");
                table(work, "---|---|---|---|---|---|---|---|---|---|---");
                for (String n : args[1].split(",")) {
                    long records = Long.parseLong(n);
                    String name = "mixture-" + records + "-" + sources + "x" + files;
                    Path dir = work.resolve(name);
                    generate(dir, records, sources, files);
                    for (String store : List.of("local", "s3")) {
                        if (!stores.contains(store)) {
                            continue;
                        }
                        Target target =
                                store.equals("s3")
                                        ? Target.s3(name, dir, s3)
                                        : Target.local(dir, work.resolve("index-cache/" + name));
                        measure(work, target, records, sources, files, cluster, jobManagerOnly);
                    }
                }
            } finally {
                jobManagerOnly.close();
                cluster.close();
            }
        } finally {
            if (server != null) {
                server.destroy();
                server.waitFor(30, TimeUnit.SECONDS);
            }
        }
    }

    /** Where one measurement reads its mixture and keeps its indexes. */
    private record Target(
            String store, String spec, String dataRoot, String indexCache, Configuration options) {
        /** The mixture options: spec, index cache and the S3 server's. */
        Configuration mixture() {
            Configuration conf = new Configuration(options);
            conf.set(StokerOptions.MIXTURE_PATH, spec);
            conf.set(StokerOptions.INDEX_CACHE, indexCache);
            return conf;
        }

        static Target local(Path dir, Path cache) {
            return new Target(
                    "local",
                    dir.resolve("mixture.yaml").toString(),
                    dir.toString(),
                    cache.toString(),
                    new Configuration());
        }

        static Target s3(String name, Path dir, Configuration options) throws Exception {
            String root = "s3://" + BUCKET + "/" + name;
            upload(dir, name, options);
            return new Target(
                    "s3",
                    root + "/mixture.yaml",
                    root,
                    "s3://" + BUCKET + "/index-cache/" + name,
                    options);
        }
    }

    private static void measure(
            Path work,
            Target target,
            long records,
            int sources,
            int files,
            MiniCluster cluster,
            MiniCluster jobManagerOnly)
            throws Exception {
        long[] bytes = new long[1];
        double readS = time(() -> bytes[0] = readAll(target.dataRoot));
        Configuration conf = target.mixture();
        Planning planning = planning(conf);
        deleteTree(target.indexCache);
        FirstBatch first = firstBatch(cluster, conf);
        FirstBatch reused = firstBatch(cluster, conf);
        long jobManagerHeap = jobManagerHeap(jobManagerOnly, conf);
        table(
                work,
                String.format(
                        Locale.ROOT,
                        "%,d | %s, %d x %d | %.1f MB | %.1f s (%.0f MB/s) | %.1f s | %.2f s | %.1f MB"
                                + " (%.2f B/record) | %,d bytes (source %,d) | %.1f MB (%.2f B/record) |"
                                + " %.1f s (%.1f s) | %.1f s (%.1f s)",
                        planning.records,
                        target.store,
                        sources,
                        files,
                        bytes[0] / 1e6,
                        readS,
                        bytes[0] / 1e6 / readS,
                        planning.firstS,
                        planning.reusedS,
                        planning.heapKept / 1e6,
                        (double) planning.heapKept / records,
                        reused.jobGraphBytes,
                        planning.serializedSource,
                        jobManagerHeap / 1e6,
                        (double) jobManagerHeap / records,
                        first.firstBatchS,
                        first.buildS,
                        reused.firstBatchS,
                        reused.buildS));
    }

    /** Prints a line of the table, and appends it to {@code WORK_DIR/planning-scale.md}. */
    private static void table(Path work, String line) throws IOException {
        System.out.println(line);
        System.out.flush();
        Files.writeString(
                work.resolve("planning-scale.md"),
                line + "\n",
                StandardCharsets.UTF_8,
                StandardOpenOption.CREATE,
                StandardOpenOption.APPEND);
    }

    /** Planning times, the records planned, heap kept by the plan and its serialized source. */
    private record Planning(
            double firstS, double reusedS, long records, long heapKept, int serializedSource) {}

    private static Planning planning(Configuration conf) throws Exception {
        deleteTree(conf.get(StokerOptions.INDEX_CACHE));
        double firstS = time(() -> MixturePlan.of(conf, MixtureSpec.of(conf)));
        long heapBefore = usedHeap();
        long start = System.nanoTime();
        MixturePlan plan = MixturePlan.of(conf, MixtureSpec.of(conf));
        double reusedS = (System.nanoTime() - start) / 1e9;
        long heapKept = usedHeap() - heapBefore;
        if (plan.imagesOnS3()) {
            // a part of StokerJob.build beside the planning: one LIST per S3 image root, all
            // through
            // one client
            System.err.printf(
                    Locale.ROOT,
                    "StartupChecks.checkS3: %.1f s for %d sources' image roots%n",
                    time(() -> StartupChecks.checkS3(conf, plan, JobPlan.s3Settings(conf))),
                    plan.order.numSources());
        }
        return new Planning(
                firstS, reusedS, plan.order.recordsPerEpoch(), heapKept, serializedSource(plan));
    }

    private static int serializedSource(MixturePlan plan) throws IOException {
        BatchPlan batches = new BatchPlan(plan.order.recordsPerEpoch(), 8, 4, 1);
        ShuffledJsonlSource source =
                new ShuffledJsonlSource(
                        plan.listings,
                        plan.order,
                        batches,
                        1 << 20,
                        1 << 28,
                        new PrefetchGate(null, "bench", 0, 0));
        return InstantiationUtil.serializeObject(source).length;
    }

    // ---- the job -------------------------------------------------------------------------------

    /** An embedded MiniCluster with {@code taskManagers} TaskManagers of 2 slots each. */
    private static MiniCluster cluster(int taskManagers) throws Exception {
        Configuration conf = new Configuration();
        // as StokerJob's embedded run sets
        conf.set(TaskManagerOptions.MEMORY_SEGMENT_SIZE, MemorySize.parse("128kb"));
        conf.set(RestOptions.BIND_PORT, "0"); // a free port: no web UI is needed
        MiniCluster cluster =
                new MiniCluster(
                        new MiniClusterConfiguration.Builder()
                                .setConfiguration(conf)
                                .setNumTaskManagers(taskManagers)
                                .setNumSlotsPerTaskManager(PARALLELISM)
                                .build());
        cluster.start();
        return cluster;
    }

    /** The job's configuration over {@code mixture} (its spec and index cache) into {@code out}. */
    private static Configuration jobConfig(Configuration mixture, Path out) {
        Configuration conf = new Configuration(mixture);
        conf.set(
                StokerOptions.TOKENIZER_PATH,
                SharedData.dataDir().resolve("tokenizers/qwen3").toString());
        conf.set(StokerOptions.OUTPUT_ROOT, out.toString());
        conf.set(StokerOptions.JOB_NAME, JOB_NAME);
        conf.set(StokerOptions.DP_WORLD_SIZE, 2);
        conf.set(StokerOptions.MICRO_BATCH_SIZE, 4);
        conf.set(StokerOptions.PREFETCH_DEPTH, 2); // no trainer: the source stops 2 steps ahead
        conf.set(
                CheckpointingOptions.CHECKPOINTS_DIRECTORY,
                out.resolve("checkpoints").toUri().toString());
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
        return conf;
    }

    /** A built job: its graph and the seconds {@link StokerJob#build} took. */
    private record Built(JobGraph graph, double buildS) {}

    private static Built build(Configuration conf) throws Exception {
        long start = System.nanoTime();
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(PARALLELISM);
        env.enableCheckpointing(10_000); // as StokerJob's embedded run
        StokerJob.build(env, conf);
        JobGraph graph = env.getStreamGraph().getJobGraph();
        return new Built(graph, (System.nanoTime() - start) / 1e9);
    }

    private record FirstBatch(double buildS, double firstBatchS, int jobGraphBytes) {}

    /**
     * Builds and submits the job, and times from the start of the build to the first batch file.
     */
    private static FirstBatch firstBatch(MiniCluster cluster, Configuration mixture)
            throws Exception {
        Path out = Files.createTempDirectory(Path.of("/dev/shm"), "stoker-bench-planning-");
        try {
            Built built = build(jobConfig(mixture, out));
            // serialized before the clock runs on (as the client ships it to a cluster)
            int graphBytes = InstantiationUtil.serializeObject(built.graph).length;
            long start = System.nanoTime();
            JobID id = cluster.submitJob(built.graph).get().getJobID();
            Path jobDir = out.resolve(JOB_NAME);
            try {
                while (!hasBatch(jobDir)) {
                    JobStatus status = cluster.getJobStatus(id).get();
                    if (status.isGloballyTerminalState()) {
                        throw new IllegalStateException("job " + status + " before a batch");
                    }
                    if (System.nanoTime() - start > FIRST_BATCH_TIMEOUT_NS) {
                        throw new IllegalStateException("no batch after 10 minutes");
                    }
                    Thread.sleep(5);
                }
                double firstBatchS = built.buildS + (System.nanoTime() - start) / 1e9;
                return new FirstBatch(built.buildS, firstBatchS, graphBytes);
            } finally {
                cancel(cluster, id);
            }
        } finally {
            deleteTree(out.toString());
        }
    }

    /** Whether a rank's directory under {@code jobDir} holds a published batch file. */
    private static boolean hasBatch(Path jobDir) throws IOException {
        if (!Files.isDirectory(jobDir)) {
            return false;
        }
        try (Stream<Path> all = Files.walk(jobDir, 3)) {
            return all.anyMatch(
                    p -> {
                        String f = p.getFileName().toString();
                        return f.startsWith("step-") && f.endsWith(".arrow");
                    });
        }
    }

    /**
     * The used heap after a full GC with the job submitted to {@code jobManagerOnly} (no
     * TaskManager: its tasks wait for slots while the JobManager holds the job graph, the execution
     * graph and the source's enumerator), less before.
     */
    private static long jobManagerHeap(MiniCluster jobManagerOnly, Configuration mixture)
            throws Exception {
        Path out = Files.createTempDirectory(Path.of("/dev/shm"), "stoker-bench-planning-");
        try {
            long before = usedHeap();
            JobID id =
                    jobManagerOnly.submitJob(build(jobConfig(mixture, out)).graph).get().getJobID();
            try {
                long deadline = System.nanoTime() + TimeUnit.MINUTES.toNanos(1);
                while (jobManagerOnly.getJobStatus(id).get() != JobStatus.RUNNING) {
                    if (System.nanoTime() > deadline) {
                        throw new IllegalStateException("job not RUNNING after 1 minute");
                    }
                    Thread.sleep(10);
                }
                Thread.sleep(1000); // the source coordinator creates its enumerator
                return usedHeap() - before;
            } finally {
                cancel(jobManagerOnly, id);
            }
        } finally {
            deleteTree(out.toString());
        }
    }

    private static void cancel(MiniCluster cluster, JobID id) throws Exception {
        try {
            cluster.cancelJob(id).get();
        } catch (Exception e) {
            // already ended
        }
        while (!cluster.getJobStatus(id).get().isGloballyTerminalState()) {
            Thread.sleep(20);
        }
    }

    // ---- the data ------------------------------------------------------------------------------

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

    /**
     * Uploads {@code dir}'s JSONL files and spec to {@code s3://bench/<name>/} through the S3 API,
     * unless done before (the spec goes last and marks a complete upload).
     */
    private static void upload(Path dir, String name, Configuration options) throws Exception {
        S3ClientSettings settings =
                JobPlan.s3Settings(options).toBuilder().maxConnections(READ_THREADS).build();
        long start = System.nanoTime();
        try (S3AsyncClient client = settings.createClient(List.of())) {
            if (client.listBuckets().join().buckets().stream()
                    .noneMatch(b -> b.name().equals(BUCKET))) {
                client.createBucket(b -> b.bucket(BUCKET)).join();
            }
            org.apache.flink.core.fs.Path spec =
                    new org.apache.flink.core.fs.Path(
                            "s3://" + BUCKET + "/" + name + "/mixture.yaml");
            if (spec.getFileSystem().exists(spec)) {
                return; // uploaded before
            }
            List<Path> jsonl = jsonlFiles(dir);
            List<CompletableFuture<?>> puts = new ArrayList<>();
            for (Path f : jsonl) {
                String key = name + "/" + dir.relativize(f).toString().replace('\\', '/');
                puts.add(client.putObject(r -> r.bucket(BUCKET).key(key), f));
                if (puts.size() >= READ_THREADS) {
                    CompletableFuture.allOf(puts.toArray(new CompletableFuture[0])).join();
                    puts.clear();
                }
            }
            CompletableFuture.allOf(puts.toArray(new CompletableFuture[0])).join();
            client.putObject(
                            r -> r.bucket(BUCKET).key(name + "/mixture.yaml"),
                            dir.resolve("mixture.yaml"))
                    .join();
            System.err.printf(
                    Locale.ROOT,
                    "uploaded %d files of %s to s3://%s/%s/ in %.1f s%n",
                    jsonl.size(),
                    dir,
                    BUCKET,
                    name,
                    (System.nanoTime() - start) / 1e9);
        }
    }

    private static List<Path> jsonlFiles(Path dir) throws IOException {
        try (Stream<Path> all = Files.walk(dir)) {
            return all.filter(p -> p.toString().endsWith(".jsonl")).sorted().toList();
        }
    }

    /**
     * Reads every JSONL file under {@code root} once through Flink's filesystem, 8 files at a time
     * (as the listing does).
     *
     * @return the bytes read
     */
    private static long readAll(String root) throws Exception {
        List<org.apache.flink.core.fs.Path> jsonl = new ArrayList<>();
        list(new org.apache.flink.core.fs.Path(root), jsonl);
        ExecutorService pool = Executors.newFixedThreadPool(READ_THREADS);
        try {
            List<Future<Long>> reads = new ArrayList<>();
            for (org.apache.flink.core.fs.Path p : jsonl) {
                reads.add(
                        pool.submit(
                                () -> {
                                    byte[] buffer = new byte[1 << 16];
                                    long total = 0;
                                    try (InputStream in = p.getFileSystem().open(p)) {
                                        for (int k; (k = in.read(buffer)) > 0; ) {
                                            total += k;
                                        }
                                    }
                                    return total;
                                }));
            }
            long total = 0;
            for (Future<Long> r : reads) {
                total += r.get();
            }
            return total;
        } finally {
            pool.shutdown();
        }
    }

    private static void list(
            org.apache.flink.core.fs.Path dir, List<org.apache.flink.core.fs.Path> out)
            throws IOException {
        for (FileStatus f : dir.getFileSystem().listStatus(dir)) {
            if (f.isDir()) {
                list(f.getPath(), out);
            } else if (f.getPath().getName().endsWith(".jsonl")) {
                out.add(f.getPath());
            }
        }
    }

    /** Deletes a directory (local or on any Flink filesystem) if it exists. */
    private static void deleteTree(String dir) throws IOException {
        org.apache.flink.core.fs.Path p = new org.apache.flink.core.fs.Path(dir);
        if (p.getFileSystem().exists(p)) {
            p.getFileSystem().delete(p, true);
        }
    }

    // ---- the S3 server -------------------------------------------------------------------------

    /**
     * The testkit's S3 server (S3Proxy) in a process of its own on a free port of 127.0.0.1, its
     * data in {@code basedir}; it exits when this process does (its standard input closes).
     */
    private static Process startS3(Path basedir) throws IOException {
        Files.createDirectories(basedir);
        return new ProcessBuilder(
                        Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                        "-cp",
                        System.getProperty("java.class.path"),
                        "-Dlog4j.configurationFile="
                                + System.getProperty("log4j.configurationFile", ""),
                        LocalS3Server.class.getName(),
                        "--port",
                        "0",
                        "--basedir",
                        basedir.toString(),
                        "--exit-on-stdin-eof")
                .redirectError(ProcessBuilder.Redirect.INHERIT)
                .start();
    }

    /** The {@code endpoint=} line the server prints once it serves. */
    private static String endpoint(Process server) throws IOException {
        BufferedReader out =
                new BufferedReader(
                        new InputStreamReader(server.getInputStream(), StandardCharsets.UTF_8));
        for (String line; (line = out.readLine()) != null; ) {
            if (line.startsWith("endpoint=")) {
                return line.substring("endpoint=".length());
            }
        }
        throw new IllegalStateException("the S3 server ended before it served");
    }

    private static Configuration s3Options(String endpoint) {
        return Configuration.fromMap(
                Map.of(
                        "s3.endpoint",
                        endpoint,
                        "s3.path.style.access",
                        "true",
                        "s3.access-key",
                        LocalS3Server.ACCESS_KEY,
                        "s3.secret-key",
                        LocalS3Server.SECRET_KEY));
    }

    // ---- measuring -----------------------------------------------------------------------------

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
