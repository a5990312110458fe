package dev.stoker.job;

import com.fasterxml.jackson.databind.JsonNode;
import dev.stoker.testkit.FaultInjectingBlobStore;
import dev.stoker.testkit.LocalS3Server;
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.LocalTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.StringJoiner;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.apache.flink.api.common.JobID;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.JobManagerOptions;
import org.apache.flink.configuration.MetricOptions;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.minicluster.MiniClusterConfiguration;
import org.apache.flink.streaming.util.TestStreamEnvironment;

/**
 * Flink's own autoscaler against Stoker (issue 40, item 3; run by {@code bench/autoscaler.sh}): a
 * MiniCluster under the adaptive scheduler runs the job, a simulated trainer (two DP ranks) starts
 * slow, takes a third of the step time in the middle phase and is slow again in the last, and
 * Flink's standalone autoscaler ({@code bench/autoscaler}: the {@code flink-autoscaler} 1.10.0
 * library in its own JVM, talking to this cluster only over REST) rescales the CPU stages (the
 * source's vertex, through tokenize) in place. The sink and the dead-letter vertices are excluded
 * ({@code job.autoscaler.vertex.exclude.ids}): the sink keeps one subtask per rank.
 *
 * <p>The CPU stages' capacity per subtask is made a fixed, known number on a 2-core machine by an
 * S3 latency instead of CPU work: images come from the local S3 server with {@code --latency-ms} to
 * first byte, and each fetch subtask has {@code --capacity} records in flight, so a subtask makes
 * about capacity / latency records per second whatever the machine's load, and more subtasks make
 * more. (With CPU-bound stages a 2-core machine gives nothing for a third or fourth subtask.) With
 * one record in flight (the default) the subtask's thread waits for each GET in the async
 * operator's full queue, which Flink counts as busy, so its busy time is its load, as a CPU-bound
 * stage's is; with more, the GETs overlap and busy time understates the load (about 0.27 at 44% of
 * the capacity of 3 subtasks with 2 in flight: {@code
 * bench/results/autoscaler-fetch-capacity-2.md}).
 *
 * <p>Measured: the trainer's wait-time ratio (its data-wait over its step time, in a sliding window
 * of {@code --window-s} seconds over both ranks), the source vertex's parallelism, busy time and
 * FLIP-33 {@code pendingRecords} every second, the autoscaler's decisions (its log), the time from
 * each demand change to the ratio being back under 2% for good, and exactly-once: every (step,
 * rank) the trainer consumed arrived once, in order, byte for byte the batch of a reference run
 * without rescaling.
 *
 * <p>Arguments {@code --key value}: {@code slow-ms} (2000), {@code phases} (seconds of the slow,
 * fast and slow phases, {@code 120,150,150}), {@code speed-up} (3: the fast phase's step time is
 * slow-ms / speed-up), {@code latency-ms} (200), {@code capacity} (1), {@code depth} (the prefetch
 * depth, 8), {@code parallelism} (the CPU stages' and the sink's at submission, 2), {@code slots}
 * (6), {@code replicas} (the llava-style dataset's JSONL repeated, 60), {@code window-s} (10),
 * {@code autoscaler-cp} (a file holding the autoscaler's class path, required), {@code out} (the
 * directory of the autoscaler's log), {@code results} (where {@link #report} writes), {@code
 * command} (the command line the report quotes), and {@code job.autoscaler.*} / {@code
 * autoscaler.standalone.*} options passed on to the autoscaler over the defaults of {@link
 * #autoscalerOptions}.
 */
public final class AutoscalerBench {
    private static final int WORLD_SIZE = 2;
    private static final int MICRO_BATCH_SIZE = 2;
    private static final String SOURCE_VERTEX = "Source: jsonl-source";
    private static final String PENDING = "Source__jsonl-source.pendingRecords";
    private static final double TARGET_RATIO = 0.02;
    private static final Pattern LOG_TIME = Pattern.compile("^(\\d\\d:\\d\\d:\\d\\d,\\d{3}) ");

    private final Map<String, String> args;
    private final Path out;
    private final long slowMs;
    private final long fastMs;
    private final int[] phases;

    private AutoscalerBench(Map<String, String> args) {
        this.args = args;
        this.out = Path.of(arg("out", "target/autoscaler-bench")).toAbsolutePath();
        this.slowMs = Long.parseLong(arg("slow-ms", "2000"));
        this.fastMs = slowMs / Long.parseLong(arg("speed-up", "3"));
        String[] p = arg("phases", "120,150,150").split(",");
        this.phases = new int[p.length];
        for (int i = 0; i < p.length; i++) {
            phases[i] = Integer.parseInt(p[i].trim());
        }
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new LinkedHashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        new AutoscalerBench(args).run();
        System.exit(0); // the S3 server's and MiniCluster's non-daemon threads
    }

    private String arg(String key, String otherwise) {
        return args.getOrDefault(key, otherwise);
    }

    private int intArg(String key, int otherwise) {
        return Integer.parseInt(arg(key, Integer.toString(otherwise)));
    }

    /** Phase 0, 1, 2...: slow, fast, slow, ... */
    private long stepMillisAt(double seconds) {
        double end = 0;
        for (int i = 0; i < phases.length; i++) {
            end += phases[i];
            if (seconds < end) {
                return i % 2 == 0 ? slowMs : fastMs;
            }
        }
        return slowMs;
    }

    private double phaseStart(int phase) {
        double start = 0;
        for (int i = 0; i < phase; i++) {
            start += phases[i];
        }
        return start;
    }

    /** The autoscaler's settings; any {@code job.autoscaler.*} argument overrides them. */
    private Map<String, String> autoscalerOptions(String host, int port, List<String> excluded) {
        Map<String, String> o = new LinkedHashMap<>();
        o.put("autoscaler.standalone.fetcher.flink-cluster.host", host);
        o.put("autoscaler.standalone.fetcher.flink-cluster.port", Integer.toString(port));
        o.put("autoscaler.standalone.control-loop.interval", "5s");
        o.put("job.autoscaler.enabled", "true");
        o.put("job.autoscaler.scaling.enabled", "true");
        // the job's start (the source chain's set-up, the prefetch filling) and a rescale's restart
        // are not what the trainers need: leave them out of the metrics
        o.put("job.autoscaler.stabilization.interval", "20s");
        o.put("job.autoscaler.metrics.window", "20s");
        // the band [0.35, 0.85]: its upper edge below the busy time of saturated stages (the
        // defaults 0.7 +- 0.3 put it at 1.0, which a saturated stage only approaches), wide
        // enough that one more or one fewer subtask at 1 to 3 lands inside it
        o.put("job.autoscaler.target.utilization", "0.6");
        o.put("job.autoscaler.target.utilization.boundary", "0.25");
        // the source's backlog is bounded by the prefetch gate (a few seconds of output), so
        // "catching up" (lag above this many seconds of input) only happens when the input rate
        // is near 0, at a start or restart, whose rate must not be taken for the source's
        // capacity
        o.put("job.autoscaler.observed-true-processing-rate.lag-threshold", "10min");
        // busy time from the accumulated busy time over the metrics window, not from the
        // busyTimeMsPerSecond gauge, which Flink averages over the last 60 s
        o.put("job.autoscaler.metrics.busy-time.aggregator", "AVG");
        o.put("job.autoscaler.scale-down.interval", "20s");
        o.put("job.autoscaler.restart.time", "15s");
        o.put("job.autoscaler.vertex.max-parallelism", Integer.toString(intArg("slots", 6) - 2));
        o.put("job.autoscaler.vertex.exclude.ids", String.join(";", excluded));
        args.forEach(
                (k, v) -> {
                    if (k.startsWith("job.autoscaler.") || k.startsWith("autoscaler.standalone.")) {
                        o.put(k, v);
                    }
                });
        return o;
    }

    private void run() throws Exception {
        Files.createDirectories(out);
        Path staged = Files.createTempDirectory("stoker-autoscaler-bench-");
        Path dataset = SharedData.dataDir().resolve("llava-style");
        stageJsonl(dataset, staged, intArg("replicas", 60));
        try (LocalS3Server s3 = new LocalS3Server().start()) {
            s3.uploadDirectory(dataset.resolve("images"), "bench", "data/images");
            Configuration clusterConf = new Configuration();
            clusterConf.set(JobManagerOptions.SCHEDULER, JobManagerOptions.SchedulerType.Adaptive);
            clusterConf.set(
                    JobManagerOptions.SCHEDULER_EXECUTING_COOLDOWN_AFTER_RESCALING,
                    Duration.ofSeconds(10));
            clusterConf.set(
                    JobManagerOptions.SCHEDULER_EXECUTING_RESOURCE_STABILIZATION_TIMEOUT,
                    Duration.ofMillis(500));
            // as flink-conf/config.yaml: the REST metrics (the autoscaler's) every 5 s, not 10 s
            clusterConf.set(MetricOptions.METRIC_FETCHER_UPDATE_INTERVAL, Duration.ofSeconds(5));
            clusterConf.set(RestOptions.BIND_ADDRESS, "127.0.0.1");
            clusterConf.set(RestOptions.ADDRESS, "127.0.0.1");
            clusterConf.set(RestOptions.PORT, 0);
            try (MiniCluster mc =
                    new MiniCluster(
                            new MiniClusterConfiguration.Builder()
                                    .setConfiguration(clusterConf)
                                    .setNumTaskManagers(1)
                                    .setNumSlotsPerTaskManager(intArg("slots", 6))
                                    .build())) {
                mc.start();
                Measured measured = measuredRun(mc, s3, staged);
                List<TrainerSim.Consumed> reference =
                        referenceRun(mc, s3, staged, measured.lastStep());
                report(measured, exactlyOnce(measured.consumed, reference));
            }
        } finally {
            try (Stream<Path> walk = Files.walk(staged)) {
                walk.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
            }
        }
    }

    private Configuration jobConfig(LocalS3Server s3, Path staged, Path outputRoot) {
        Configuration conf =
                JobConfigs.config(staged.toString(), outputRoot, WORLD_SIZE, MICRO_BATCH_SIZE);
        conf.addAll(S3FileSystems.config(s3));
        conf.set(StokerOptions.IMAGE_ROOT, "s3://bench/data");
        conf.set(StokerOptions.JOB_NAME, "bench");
        conf.set(StokerOptions.SHUFFLE_SEED, 7L);
        conf.set(StokerOptions.MAX_PIXELS, 200704L);
        conf.set(StokerOptions.PREFETCH_DEPTH, intArg("depth", 8));
        conf.set(StokerOptions.FETCH_CAPACITY, intArg("capacity", 1));
        return conf;
    }

    private JobClient submit(MiniCluster mc, Configuration conf, String name) throws Exception {
        TestStreamEnvironment env =
                new TestStreamEnvironment(mc, conf, intArg("parallelism", 2), List.of(), List.of());
        env.enableCheckpointing(1000);
        StokerJob.build(env, conf);
        return env.executeAsync(name);
    }

    /** One sample of the timeline, every second. */
    record Sample(
            double t,
            long stepMs,
            int parallelism,
            double busyMax,
            double pending,
            long steps,
            double ratio) {}

    /** An autoscaler log line of interest, at {@code t} seconds of the timeline. */
    record Event(double t, String line) {}

    /**
     * What the autoscaler evaluated for the source vertex in one cycle (its "Evaluated metrics"
     * line): parallelism, load (busy time / 1000), true processing rate, target data rate,
     * pendingRecords (LAG), catch-up rate and the two thresholds, in records per second.
     */
    record Evaluation(double t, Map<String, String> metrics) {
        static final List<String> NAMES =
                List.of(
                        "PARALLELISM",
                        "LOAD",
                        "TRUE_PROCESSING_RATE",
                        "TARGET_DATA_RATE",
                        "LAG",
                        "CATCH_UP_DATA_RATE",
                        "SCALE_UP_RATE_THRESHOLD",
                        "SCALE_DOWN_RATE_THRESHOLD");
    }

    record Measured(
            List<TrainerSim.Consumed> consumed,
            List<Sample> samples,
            List<Event> events,
            List<Event> rescales,
            List<Evaluation> evaluations,
            String failures,
            Map<String, String> autoscalerOptions,
            long lastStep) {}

    private Measured measuredRun(MiniCluster mc, LocalS3Server s3, Path staged) throws Exception {
        Path outputRoot = JobRun.createOutputRoot();
        Path log = out.resolve(arg("name", "autoscaler") + ".log");
        Process autoscaler = null;
        try {
            s3.faults()
                    .setFaults(
                            new FaultInjectingBlobStore.Faults(
                                    Long.parseLong(arg("latency-ms", "200")),
                                    0,
                                    0,
                                    "data/images/.*"));
            Configuration conf = jobConfig(s3, staged, outputRoot);
            JobClient job = submit(mc, conf, "autoscaler-bench");
            JobID id = job.getJobID();
            long start = System.nanoTime();
            List<Sample> samples = new ArrayList<>();
            Map<String, String> options;
            List<TrainerSim.Consumed> consumed;
            String source = null;
            long totalSeconds = 0;
            for (int p : phases) {
                totalSeconds += p;
            }
            try (TrainerSim trainer =
                    new TrainerSim(
                            outputRoot.resolve("bench"),
                            WORLD_SIZE,
                            0,
                            Long.MAX_VALUE,
                            () -> stepMillisAt((System.nanoTime() - start) / 1e9))) {
                MiniClusterRest.awaitAllTasksRunning(mc, id, Duration.ofMinutes(2));
                List<String> excluded = new ArrayList<>();
                for (JsonNode v : MiniClusterRest.get(mc, "/jobs/" + id).path("vertices")) {
                    if (v.path("name").asText().startsWith(SOURCE_VERTEX)) {
                        source = v.path("id").asText();
                    } else {
                        excluded.add(v.path("id").asText());
                    }
                }
                int port = mc.getRestAddress().get().getPort();
                options = autoscalerOptions("127.0.0.1", port, excluded);
                autoscaler = startAutoscaler(options, log);
                long startMillis = System.currentTimeMillis();
                System.out.printf(
                        Locale.ROOT,
                        "job %s, REST port %d, autoscaler pid %d, log %s%n",
                        id,
                        port,
                        autoscaler.pid(),
                        log);
                long end = start + totalSeconds * 1_000_000_000L;
                while (System.nanoTime() < end) {
                    Thread.sleep(1000 - (System.currentTimeMillis() - startMillis) % 1000);
                    double t = (System.nanoTime() - start) / 1e9;
                    Sample s = sample(mc, id, source, trainer, t);
                    samples.add(s);
                    if (samples.size() % 10 == 0) {
                        System.out.printf(
                                Locale.ROOT,
                                "t=%5.0fs step %4d ms  parallelism %d  busy %4.0f ms/s  pending"
                                        + " %4.0f  steps %5d  wait ratio %.3f%n",
                                s.t,
                                s.stepMs,
                                s.parallelism,
                                s.busyMax,
                                s.pending,
                                s.steps,
                                s.ratio);
                    }
                    if (job.getJobStatus().get().isGloballyTerminalState()) {
                        System.out.println("the job ended: " + job.getJobStatus().get());
                        break;
                    }
                    if (stalled(samples)) {
                        // on a shared machine something else may delete files under /dev/shm
                        throw new IllegalStateException(
                                "the trainer made no progress for 60 s at "
                                        + s.steps
                                        + " steps; the job directory now holds "
                                        + listing(outputRoot.resolve("bench")));
                    }
                }
                consumed = trainer.consumed();
            }
            String failures =
                    MiniClusterRest.get(mc, "/jobs/" + id + "/exceptions")
                            .path("exceptionHistory")
                            .path("entries")
                            .toString();
            if (!job.getJobStatus().get().isGloballyTerminalState()) {
                cancel(job);
            }
            autoscaler.destroy();
            autoscaler.waitFor();
            List<Event> events = new ArrayList<>();
            List<Event> rescales = new ArrayList<>();
            List<Evaluation> evaluations = new ArrayList<>();
            readLog(log, start, source, events, rescales, evaluations);
            long lastStep = 0;
            for (TrainerSim.Consumed c : consumed) {
                lastStep = Math.max(lastStep, c.step());
            }
            return new Measured(
                    consumed, samples, events, rescales, evaluations, failures, options, lastStep);
        } finally {
            if (autoscaler != null && autoscaler.isAlive()) {
                autoscaler.destroyForcibly();
            }
            s3.faults().setFaults(FaultInjectingBlobStore.Faults.NONE);
            JobRun.deleteOutputRoot(outputRoot);
        }
    }

    /** Whether the trainer consumed nothing during the last 60 samples (60 s). */
    private static boolean stalled(List<Sample> samples) {
        int n = samples.size();
        return n > 60 && samples.get(n - 1).steps == samples.get(n - 61).steps;
    }

    private static String listing(Path dir) throws Exception {
        try (Stream<Path> files = Files.walk(dir)) {
            return files.map(p -> dir.relativize(p).toString()).sorted().toList().toString();
        }
    }

    /**
     * Cancels the job and waits until it is CANCELED, so no sink writes into the output root after
     * it is deleted.
     */
    private static void cancel(JobClient job) throws Exception {
        job.cancel().get();
        long deadline = System.currentTimeMillis() + 60_000;
        while (!job.getJobStatus().get().isGloballyTerminalState()
                && System.currentTimeMillis() < deadline) {
            Thread.sleep(100);
        }
    }

    private Process startAutoscaler(Map<String, String> options, Path log) throws Exception {
        String cp = Files.readString(Path.of(arg("autoscaler-cp", "")).toAbsolutePath()).trim();
        List<String> command = new ArrayList<>();
        command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        command.add("-Xmx256m");
        command.add("-cp");
        command.add(cp);
        command.add("dev.stoker.bench.autoscaler.StandaloneAutoscaler");
        options.forEach(
                (k, v) -> {
                    command.add("--" + k);
                    command.add(v);
                });
        return new ProcessBuilder(command)
                .redirectErrorStream(true)
                .redirectOutput(log.toFile())
                .start();
    }

    private Sample sample(MiniCluster mc, JobID id, String source, TrainerSim trainer, double t)
            throws Exception {
        int parallelism = 0;
        for (JsonNode v : MiniClusterRest.get(mc, "/jobs/" + id).path("vertices")) {
            if (v.path("id").asText().equals(source)) {
                parallelism = v.path("parallelism").asInt();
            }
        }
        double busy = Double.NaN;
        double pending = Double.NaN;
        JsonNode metrics =
                MiniClusterRest.get(
                        mc,
                        "/jobs/"
                                + id
                                + "/vertices/"
                                + source
                                + "/subtasks/metrics?get=busyTimeMsPerSecond,"
                                + PENDING
                                + "&agg=max,sum");
        for (JsonNode m : metrics) {
            if (m.path("id").asText().equals("busyTimeMsPerSecond")) {
                busy = m.path("max").asDouble(Double.NaN);
            } else if (m.path("id").asText().equals(PENDING)) {
                pending = m.path("sum").asDouble(Double.NaN);
            }
        }
        long now = System.nanoTime();
        long windowNanos = (long) (Double.parseDouble(arg("window-s", "10")) * 1e9);
        long waited = 0;
        long total = 0;
        for (TrainerSim.Timing timing : trainer.timings()) {
            if (timing.endNanos() > now - windowNanos) {
                waited += timing.waitedNanos();
                total += timing.waitedNanos() + timing.trainedNanos();
            }
        }
        return new Sample(
                t,
                stepMillisAt(t),
                parallelism,
                busy,
                pending,
                trainer.stepsDone(),
                total == 0 ? Double.NaN : (double) waited / total);
    }

    /**
     * The scaling reports, in-place rescales and errors of the autoscaler's log, and what it
     * evaluated for the source vertex each cycle.
     */
    private static void readLog(
            Path log,
            long startNanos,
            String source,
            List<Event> events,
            List<Event> rescales,
            List<Evaluation> evaluations)
            throws Exception {
        Pattern vertex = Pattern.compile(source + "=\\{([^}]*)\\}");
        Pattern metric =
                Pattern.compile(
                        "([A-Z_]+)=EvaluatedScalingMetric\\(current=([^,]+), average=([^)]+)\\)");
        // the log's wall-clock times against the timeline's start
        LocalTime startTime = LocalTime.now().minusNanos(System.nanoTime() - startNanos);
        DateTimeFormatter format = DateTimeFormatter.ofPattern("HH:mm:ss,SSS");
        for (String line : Files.readAllLines(log)) {
            Matcher m = LOG_TIME.matcher(line);
            if (!m.find()) {
                continue;
            }
            double t =
                    Duration.between(startTime, LocalTime.parse(m.group(1), format)).toMillis()
                            / 1000.0;
            if (line.contains("Evaluated metrics: ")) {
                Matcher v = vertex.matcher(line);
                if (v.find()) {
                    Map<String, String> values = new LinkedHashMap<>();
                    Matcher e = metric.matcher(v.group(1));
                    while (e.find()) {
                        // the one of current and average that the autoscaler set
                        values.put(e.group(1), e.group(2).equals("NaN") ? e.group(3) : e.group(2));
                    }
                    evaluations.add(new Evaluation(t, values));
                }
            } else if (line.contains("In-place scaling triggered")) {
                rescales.add(new Event(t, line));
                events.add(new Event(t, line));
            } else if (line.contains("reason : ScalingReport")
                    || line.contains("ERROR")
                    || line.contains("Currently processing backlog")) {
                events.add(new Event(t, line));
            }
        }
    }

    private List<TrainerSim.Consumed> referenceRun(
            MiniCluster mc, LocalS3Server s3, Path staged, long lastStep) throws Exception {
        Path outputRoot = JobRun.createOutputRoot();
        try (TrainerSim trainer =
                new TrainerSim(outputRoot.resolve("bench"), WORLD_SIZE, 0, lastStep, 0)) {
            JobClient job = submit(mc, jobConfig(s3, staged, outputRoot), "reference");
            List<TrainerSim.Consumed> reference = trainer.await(600_000);
            cancel(job);
            return reference;
        } finally {
            JobRun.deleteOutputRoot(outputRoot);
        }
    }

    /**
     * Checks that each rank consumed steps 0, 1, ... once each, in order, each batch byte for byte
     * the reference run's.
     *
     * @return a one-line verdict
     */
    private static String exactlyOnce(
            List<TrainerSim.Consumed> consumed, List<TrainerSim.Consumed> reference) {
        Map<String, String> expected = new HashMap<>();
        for (TrainerSim.Consumed c : reference) {
            expected.put(c.step() + "/" + c.rank(), c.sha256());
        }
        Set<String> seen = new HashSet<>();
        long[] next = new long[WORLD_SIZE];
        List<String> problems = new ArrayList<>();
        for (TrainerSim.Consumed c : consumed) {
            String key = c.step() + "/" + c.rank();
            if (!seen.add(key)) {
                problems.add("duplicate " + key);
            }
            if (!c.sha256().equals(expected.get(key))) {
                problems.add("different batch " + key);
            }
        }
        for (int rank = 0; rank < WORLD_SIZE; rank++) {
            while (seen.contains(next[rank] + "/" + rank)) {
                next[rank]++;
            }
        }
        if (seen.size() != next[0] + next[1]) {
            problems.add(
                    "gaps: "
                            + seen.size()
                            + " batches, contiguous up to "
                            + next[0]
                            + ", "
                            + next[1]);
        }
        String counts =
                String.format(
                        Locale.ROOT,
                        "%d batches (rank 0: steps 0..%d, rank 1: steps 0..%d)",
                        consumed.size(),
                        next[0] - 1,
                        next[1] - 1);
        return problems.isEmpty()
                ? "PASS: " + counts + " each once, byte for byte the reference run's"
                : "FAIL: " + counts + ": " + problems.subList(0, Math.min(10, problems.size()));
    }

    /**
     * The wait ratio in the phase from {@code from} to {@code to}: its peak, when the peak was, the
     * first time after the peak that it was under 2% (seconds after {@code from}; 0 if it never
     * reached 2%), and what share of the rest of the phase's samples were under 2%, and their
     * largest ratio.
     */
    private static String ratioAfterChange(List<Sample> samples, double from, double to) {
        Sample peak = null;
        for (Sample s : samples) {
            if (s.t >= from && s.t < to && !Double.isNaN(s.ratio)) {
                if (peak == null || s.ratio > peak.ratio) {
                    peak = s;
                }
            }
        }
        if (peak == null) {
            return "no samples";
        }
        if (peak.ratio < TARGET_RATIO) {
            return String.format(
                    Locale.ROOT, "never at 2%% (peak %.3f at +%.0f s)", peak.ratio, peak.t - from);
        }
        Sample back = null;
        int after = 0;
        int under = 0;
        double worst = 0;
        for (Sample s : samples) {
            if (s.t <= peak.t || s.t >= to || Double.isNaN(s.ratio)) {
                continue;
            }
            if (back == null && s.ratio < TARGET_RATIO) {
                back = s;
            } else if (back != null) {
                after++;
                under += s.ratio < TARGET_RATIO ? 1 : 0;
                worst = Math.max(worst, s.ratio);
            }
        }
        if (back == null) {
            return String.format(
                    Locale.ROOT,
                    "peak %.3f at +%.0f s, not under 2%% again in the phase",
                    peak.ratio,
                    peak.t - from);
        }
        return String.format(
                Locale.ROOT,
                "peak %.3f at +%.0f s; **under 2%% at +%.0f s**, then under 2%% in %d of %d"
                        + " samples (max %.3f)",
                peak.ratio,
                peak.t - from,
                back.t - from,
                under,
                after,
                worst);
    }

    private static final Pattern REPORT =
            Pattern.compile(
                    "Parallelism (\\d+) -> (\\d+) \\| Processing capacity ([^ ]+) -> ([^ ]+) \\|"
                            + " Target data rate ([^}]+)}");

    /**
     * Writes {@code <name>.md} (the numbers, the settings, what the autoscaler evaluated each cycle
     * and the timeline), {@code <name>-timeline.csv} and {@code <name>-evaluations.csv} to the
     * results directory ({@code --results}, else {@code --out}; {@code --name}, else {@code
     * autoscaler}).
     */
    private void report(Measured m, String exactlyOnce) throws Exception {
        Path results = Path.of(arg("results", out.toString())).toAbsolutePath();
        String file = arg("name", "autoscaler");
        Files.createDirectories(results);
        StringBuilder csv =
                new StringBuilder(
                        "t_s,step_ms,parallelism,busy_max_ms_per_s,pending_records,steps,wait_ratio\n");
        for (Sample s : m.samples) {
            csv.append(
                    String.format(
                            Locale.ROOT,
                            "%.1f,%d,%d,%.0f,%.0f,%d,%.4f%n",
                            s.t,
                            s.stepMs,
                            s.parallelism,
                            s.busyMax,
                            s.pending,
                            s.steps,
                            s.ratio));
        }
        Files.writeString(results.resolve(file + "-timeline.csv"), csv);
        StringBuilder evaluations = new StringBuilder("t_s");
        for (String name : Evaluation.NAMES) {
            evaluations.append(',').append(name);
        }
        evaluations.append('\n');
        for (Evaluation e : m.evaluations) {
            StringJoiner row = new StringJoiner(",");
            for (String name : Evaluation.NAMES) {
                row.add(e.metrics.getOrDefault(name, ""));
            }
            evaluations.append(String.format(Locale.ROOT, "%.1f,%s%n", e.t, row));
        }
        Files.writeString(results.resolve(file + "-evaluations.csv"), evaluations);

        StringBuilder md = new StringBuilder("# Flink's autoscaler against Stoker\n\n");
        md.append("Generated by `bench/autoscaler.sh` (`AutoscalerBench`); what it means: ");
        md.append("[bench/README.md](../README.md#flinks-autoscaler-autoscalersh).\n\n");
        md.append("```\n").append(arg("command", "bench/autoscaler.sh")).append("\n```\n\n");
        md.append(
                String.format(
                        Locale.ROOT,
                        "Trainer: %d DP ranks x %d samples per step, step time %s ms (phases of %s s),"
                                + " wait ratio over the last %s s of steps of both ranks. Job:"
                                + " prefetch depth %s, CPU stages at %s subtasks at submission,"
                                + " %s slots, images from the local S3 server with %s ms to first"
                                + " byte, stoker.fetch.capacity %s.%n%n",
                        WORLD_SIZE,
                        MICRO_BATCH_SIZE,
                        phaseSteps(),
                        arg("phases", "120,150,150"),
                        arg("window-s", "10"),
                        arg("depth", "8"),
                        arg("parallelism", "2"),
                        arg("slots", "6"),
                        arg("latency-ms", "200"),
                        arg("capacity", "1")));
        md.append("| | |\n|---|---|\n");
        md.append("| exactly-once | ").append(exactlyOnce).append(" |\n");
        md.append("| job failures (exception history) | ")
                .append(m.failures.equals("[]") ? "none" : m.failures)
                .append(" |\n");
        md.append("| rescales applied by the autoscaler | ")
                .append(m.rescales.size())
                .append(" |\n");
        for (int phase = 1; phase < phases.length; phase++) {
            double from = phaseStart(phase);
            double to = from + phases[phase];
            String decision = "none";
            for (Event e : m.events) {
                Matcher r = REPORT.matcher(e.line);
                if (e.t >= from && e.t < to && r.find()) {
                    decision =
                            String.format(
                                    Locale.ROOT,
                                    "%s -> %s at +%.0f s",
                                    r.group(1),
                                    r.group(2),
                                    e.t - from);
                    break;
                }
            }
            md.append(
                    String.format(
                            Locale.ROOT,
                            "| demand change at t = %.0f s (step %d -> %d ms) | first rescale %s;"
                                    + " wait ratio: %s |%n",
                            from,
                            stepMillisAt(from - 1),
                            stepMillisAt(from),
                            decision,
                            ratioAfterChange(m.samples, from, to)));
        }
        md.append(
                "\nThe autoscaler's decisions (its log; t in seconds since the trainer started):\n\n");
        md.append("| t | CPU stages | processing capacity | target data rate (records/s) |\n");
        md.append("|---|---|---|---|\n");
        for (Event e : m.events) {
            Matcher r = REPORT.matcher(e.line);
            if (r.find()) {
                md.append(
                        String.format(
                                Locale.ROOT,
                                "| %.1f | %s -> %s | %s -> %s | %s |%n",
                                e.t,
                                r.group(1),
                                r.group(2),
                                r.group(3),
                                r.group(4),
                                r.group(5).trim()));
            }
        }
        md.append("\nAutoscaler options:\n\n```\n");
        m.autoscalerOptions.forEach(
                (k, v) -> {
                    if (!k.startsWith("autoscaler.standalone.fetcher")) {
                        md.append(k).append(": ").append(v).append('\n');
                    }
                });
        md.append("```\n\nWhat it evaluated for the source vertex each cycle (records/s; LOAD =");
        md.append(" busy time / 1000; LAG = the source's pendingRecords):\n\n```\n");
        md.append(String.format(Locale.ROOT, "%6s", "t"));
        for (String name : Evaluation.NAMES) {
            md.append(String.format(Locale.ROOT, " %s", name));
        }
        md.append('\n');
        for (Evaluation e : m.evaluations) {
            md.append(String.format(Locale.ROOT, "%6.1f", e.t));
            for (String name : Evaluation.NAMES) {
                md.append(
                        String.format(
                                Locale.ROOT,
                                " %" + name.length() + "s",
                                e.metrics.getOrDefault(name, "-")));
            }
            md.append('\n');
        }
        md.append("```\n\nTimeline, every 5 s (busy: the source vertex's busyTimeMsPerSecond,");
        md.append(" max over subtasks; pending: its pendingRecords, summed):\n\n```\n");
        md.append("     t step_ms parallelism busy pending  steps wait_ratio\n");
        for (Sample s : m.samples) {
            if (Math.round(s.t) % 5 == 0) {
                md.append(
                        String.format(
                                Locale.ROOT,
                                "%6.0f %7d %11d %4.0f %7.0f %6d %10.3f%n",
                                s.t,
                                s.stepMs,
                                s.parallelism,
                                s.busyMax,
                                s.pending,
                                s.steps,
                                s.ratio));
            }
        }
        md.append("```\n");
        Files.writeString(results.resolve(file + ".md"), md);
        System.out.print(md);
        System.out.println("RESULT " + results.resolve(file + ".md"));
    }

    /** The step times of the phases, e.g. "1800, 600, 1800". */
    private String phaseSteps() {
        StringJoiner steps = new StringJoiner(", ");
        for (int i = 0; i < phases.length; i++) {
            steps.add(Long.toString(stepMillisAt(phaseStart(i))));
        }
        return steps.toString();
    }

    /** The dataset's JSONL files with their lines repeated {@code replicas} times. */
    private static void stageJsonl(Path dataset, Path target, int replicas) throws Exception {
        try (Stream<Path> files = Files.list(dataset)) {
            for (Path f : files.filter(p -> p.toString().endsWith(".jsonl")).toList()) {
                List<String> lines = Files.readAllLines(f);
                List<String> repeated = new ArrayList<>();
                for (int i = 0; i < replicas; i++) {
                    repeated.addAll(lines);
                }
                Files.write(target.resolve(f.getFileName().toString()), repeated);
            }
        }
        if (!new File(target.toFile(), "train.jsonl").exists()) {
            throw new IllegalStateException("no JSONL in " + dataset);
        }
    }
}
