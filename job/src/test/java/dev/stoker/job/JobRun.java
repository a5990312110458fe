package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.operators.batch.BatchPlan;
import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileVisitResult;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.SimpleFileVisitor;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowFileReader;
import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

/**
 * Test helper: runs the whole job with its production sinks (on the MiniCluster the calling test
 * registers) over one dataset root and reads back what it wrote: the samples of every batch file
 * and the dead letters. The run itself fails the test if the job fails (restart strategy none, so a
 * restart is a failure too) or if the job's accounting check does not hold; {@link
 * Result#assertAccounted()} checks the files on disk against the batch plan.
 */
final class JobRun {
    static final ObjectMapper JSON = new ObjectMapper();
    private static final Pattern LOCATION_LINE = Pattern.compile(":(\\d+)$");

    /**
     * One row of a batch file: {@code source} the mixture source's name, {@code location} {@code
     * <file URI>:<line>}.
     */
    record Sample(
            long sampleIndex,
            String source,
            String location,
            long line,
            int rank,
            long step,
            List<long[]> gridThw,
            int tokens,
            long[] inputIds) {}

    /**
     * One batch file: its rows and the slots back-filled with a copy (listed in {@code
     * stoker.backfilled_slots}).
     */
    record Batch(int rank, long step, int rows, Set<Integer> backfilledSlots) {}

    /**
     * What one run wrote from its first step on ({@code firstStep}: 0, or the step after {@link
     * StokerOptions#RESUME_STEP}); {@code counts} is the job's accounting summary; {@code packed}:
     * the batches are packed (their samples then have no grids, tokens or ids here).
     */
    record Result(
            Path jobDir,
            BatchPlan plan,
            long firstStep,
            String counts,
            List<Sample> samples,
            List<JsonNode> deadLetters,
            List<Batch> batches,
            boolean packed) {
        /** Sample index -> batched sample. */
        Map<Long, Sample> samplesByIndex() {
            Map<Long, Sample> out = new HashMap<>();
            samples.forEach(s -> out.put(s.sampleIndex(), s));
            return out;
        }

        /**
         * Every record is in exactly one batch (in the batch file of its planned step and rank) or
         * in exactly one dead letter: samples emitted + dead letters = records.
         */
        void assertAccounted() {
            List<Long> all = new ArrayList<>();
            for (Sample s : samples) {
                if (!packed) { // packing spreads a step's samples over the ranks by size
                    assertThat(plan.rankOf(s.sampleIndex()))
                            .as("rank of sample %d", s.sampleIndex())
                            .isEqualTo(s.rank());
                }
                assertThat(plan.stepOf(s.sampleIndex()))
                        .as("step of sample %d", s.sampleIndex())
                        .isEqualTo(s.step());
                all.add(s.sampleIndex());
            }
            for (JsonNode dl : deadLetters) {
                all.add(dl.get("sample_index").asLong());
            }
            long records = plan.recordsFrom(firstStep); // every epoch's from the first step
            assertThat(samples.size() + deadLetters.size())
                    .as("samples emitted + dead letters = records (%s)", counts)
                    .isEqualTo(records);
            long from = firstStep * plan.globalBatchSize();
            long slots = plan.numSteps() * plan.globalBatchSize();
            assertThat(all)
                    .doesNotHaveDuplicates()
                    .allMatch(i -> i >= from && i < slots && !plan.isPadding(i));
            if (!counts.equals(RESTARTS_ALLOWED)) {
                assertThat(counts).contains("read=" + records);
            }
        }
    }

    private static final String RESTARTS_ALLOWED = "(restarts allowed: accumulators not checked)";

    private JobRun() {}

    private static boolean restartsAllowed(Configuration conf) {
        return !"none".equals(conf.get(RestartStrategyOptions.RESTART_STRATEGY));
    }

    /**
     * Runs the job over {@code datasetRoot}, writing under {@code outputRoot}.
     *
     * @param extra options applied last (e.g. {@link StokerOptions#MAX_PIXELS}); one that sets
     *     {@link StokerOptions#MIXTURE_PATH} runs that mixture instead of {@code datasetRoot}
     */
    static Result run(
            Path datasetRoot,
            Path outputRoot,
            int worldSize,
            int microBatchSize,
            Configuration extra)
            throws Exception {
        return run(datasetRoot.toString(), outputRoot, worldSize, microBatchSize, extra);
    }

    /**
     * As {@link #run(Path, Path, int, int, Configuration)} for a dataset URI such as {@code
     * s3://bucket/prefix}.
     */
    static Result run(
            String datasetRoot,
            Path outputRoot,
            int worldSize,
            int microBatchSize,
            Configuration extra)
            throws Exception {
        Configuration conf = JobConfigs.config(datasetRoot, outputRoot, worldSize, microBatchSize);
        // listing order, so sample index = record index; no trainer acknowledges batches here
        conf.set(StokerOptions.SHUFFLE, false);
        conf.set(StokerOptions.PREFETCH_DEPTH, 0);
        conf.addAll(extra);
        if (conf.contains(StokerOptions.MIXTURE_PATH)) {
            conf.removeConfig(StokerOptions.DATASET_PATH); // the extra options name a mixture
        }
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(2);
        env.enableCheckpointing(500);
        StokerJob.Planned planned = StokerJob.build(env, conf);
        BatchPlan plan = planned.plan;
        JobExecutionResult result =
                env.execute(
                        "stoker-itcase-" + datasetRoot.substring(datasetRoot.lastIndexOf('/') + 1));
        // Flink keeps the accumulators of the last attempt only, so they add up only without
        // restarts; the files on disk are checked either way (Result#assertAccounted).
        String counts =
                restartsAllowed(conf)
                        ? RESTARTS_ALLOWED
                        : AccountingCheck.verify(result, plan, planned.firstStep)
                                + "; per source: "
                                + AccountingCheck.verifySources(result, plan, planned.order);
        Path jobDir = outputRoot.resolve("itcase");
        Path generationDir = generationDir(jobDir);

        List<Sample> samples = new ArrayList<>();
        List<Batch> batches = new ArrayList<>();
        for (int rank = 0; rank < worldSize; rank++) {
            for (long step = planned.firstStep; step < plan.numSteps(); step++) {
                Path file =
                        generationDir
                                .resolve("rank-" + rank)
                                .resolve(String.format("step-%010d.arrow", step));
                assertThat(file).as("batch (step %d, rank %d)", step, rank).exists();
                batches.add(readSamples(file, rank, step, samples));
            }
        }
        return new Result(
                jobDir,
                plan,
                planned.firstStep,
                counts,
                samples,
                // an earlier run's in the same job directory are of steps before this one's
                readDeadLetters(jobDir.resolve("dead-letters")).stream()
                        .filter(
                                dl ->
                                        dl.get("sample_index").asLong()
                                                >= planned.firstStep * plan.globalBatchSize())
                        .toList(),
                batches,
                conf.get(StokerOptions.PACKING_ENABLED));
    }

    /** The current generation's directory, named by the job directory's manifest. */
    static Path generationDir(Path jobDir) throws IOException {
        JsonNode manifest = JSON.readTree(jobDir.resolve("manifest.json").toFile());
        return jobDir.resolve("gen-" + manifest.get("generation").asText());
    }

    /** Creates a fresh output root in /dev/shm. */
    static Path createOutputRoot() throws IOException {
        return Files.createTempDirectory(Path.of("/dev/shm"), "stoker-job-itcase-");
    }

    /**
     * Deletes an output root made by {@link #createOutputRoot()}. Files that vanish during the walk
     * are skipped: Flink may still be discarding a subsumed checkpoint's directory in the
     * background after the job has finished.
     */
    static void deleteOutputRoot(Path root) throws IOException {
        if (root == null || !Files.exists(root)) {
            return;
        }
        Files.walkFileTree(
                root,
                new SimpleFileVisitor<>() {
                    @Override
                    public FileVisitResult visitFile(Path file, BasicFileAttributes attrs)
                            throws IOException {
                        Files.deleteIfExists(file);
                        return FileVisitResult.CONTINUE;
                    }

                    @Override
                    public FileVisitResult visitFileFailed(Path file, IOException e)
                            throws IOException {
                        if (e instanceof NoSuchFileException) {
                            return FileVisitResult.CONTINUE;
                        }
                        throw e;
                    }

                    @Override
                    public FileVisitResult postVisitDirectory(Path dir, IOException e)
                            throws IOException {
                        if (e != null && !(e instanceof NoSuchFileException)) {
                            throw e;
                        }
                        Files.deleteIfExists(dir);
                        return FileVisitResult.CONTINUE;
                    }
                });
    }

    /**
     * 1-based physical line number -> the {@code "id"} string of each line of {@code jsonl}, read
     * independently of the job (bytes taken as ISO-8859-1, so invalid UTF-8 does not matter).
     */
    static Map<Long, String> idsByLine(Path jsonl) throws IOException {
        Pattern id = Pattern.compile("\"id\"\\s*:\\s*\"([^\"]*)\"");
        Map<Long, String> ids = new HashMap<>();
        String text = new String(Files.readAllBytes(jsonl), StandardCharsets.ISO_8859_1);
        long line = 0;
        int from = 0;
        while (from <= text.length()) {
            int end = text.indexOf('\n', from);
            if (end < 0) {
                end = text.length();
            }
            line++;
            Matcher m = id.matcher(text.substring(from, Math.min(end, from + 200)));
            if (m.find()) {
                ids.put(line, m.group(1));
            }
            from = end + 1;
        }
        return ids;
    }

    private static Batch readSamples(Path file, int rank, long step, List<Sample> out)
            throws IOException {
        int rows = 0;
        Set<Integer> backfilled = new HashSet<>();
        try (RootAllocator allocator = new RootAllocator();
                ArrowFileReader reader = new ArrowFileReader(FileChannel.open(file), allocator)) {
            while (reader.loadNextBatch()) {
                VectorSchemaRoot root = reader.getVectorSchemaRoot();
                rows += root.getRowCount();
                if (root.getSchema().getCustomMetadata().containsKey("stoker.packing_max_tokens")) {
                    readPackedSamples(root, rank, step, out);
                    continue;
                }
                BigIntVector index = (BigIntVector) root.getVector("sample_index");
                for (String slot :
                        root.getSchema()
                                .getCustomMetadata()
                                .getOrDefault("stoker.backfilled_slots", "")
                                .split(",")) {
                    if (!slot.isEmpty()) {
                        backfilled.add(Integer.parseInt(slot));
                    }
                }
                for (int r = 0; r < root.getRowCount(); r++) {
                    if (backfilled.contains(r)) {
                        continue; // a copy standing in for a dead letter or a padding slot
                    }
                    String source = root.getVector("source").getObject(r).toString();
                    String location = root.getVector("location").getObject(r).toString();
                    Matcher m = LOCATION_LINE.matcher(location);
                    assertThat(m.find()).as("location %s ends with :line", location).isTrue();
                    List<long[]> grids = new ArrayList<>();
                    for (Object g : (List<?>) root.getVector("image_grid_thw").getObject(r)) {
                        List<?> thw = (List<?>) g;
                        grids.add(
                                new long[] {
                                    ((Number) thw.get(0)).longValue(),
                                    ((Number) thw.get(1)).longValue(),
                                    ((Number) thw.get(2)).longValue()
                                });
                    }
                    int tokens = 0;
                    for (Object v : (List<?>) root.getVector("attention_mask").getObject(r)) {
                        tokens += ((Number) v).intValue();
                    }
                    long[] ids =
                            ((List<?>) root.getVector("input_ids").getObject(r))
                                    .stream()
                                            .limit(tokens)
                                            .mapToLong(v -> ((Number) v).longValue())
                                            .toArray();
                    out.add(
                            new Sample(
                                    index.get(r),
                                    source,
                                    location,
                                    Long.parseLong(m.group(1)),
                                    rank,
                                    step,
                                    grids,
                                    tokens,
                                    ids));
                }
            }
        }
        return new Batch(rank, step, rows, backfilled);
    }

    /**
     * The samples of a packed batch (several per row, lists in row order): index, source, location
     * and line only; grids, tokens and ids are left empty.
     */
    private static void readPackedSamples(
            VectorSchemaRoot root, int rank, long step, List<Sample> out) {
        for (int r = 0; r < root.getRowCount(); r++) {
            List<?> indices = (List<?>) root.getVector("sample_index").getObject(r);
            List<?> sources = (List<?>) root.getVector("source").getObject(r);
            List<?> locations = (List<?>) root.getVector("location").getObject(r);
            for (int k = 0; k < indices.size(); k++) {
                String location = locations.get(k).toString();
                Matcher m = LOCATION_LINE.matcher(location);
                assertThat(m.find()).as("location %s ends with :line", location).isTrue();
                out.add(
                        new Sample(
                                ((Number) indices.get(k)).longValue(),
                                sources.get(k).toString(),
                                location,
                                Long.parseLong(m.group(1)),
                                rank,
                                step,
                                List.of(),
                                0,
                                new long[0]));
            }
        }
    }

    private static List<JsonNode> readDeadLetters(Path dir) throws IOException {
        List<JsonNode> letters = new ArrayList<>();
        if (!Files.isDirectory(dir)) {
            return letters;
        }
        try (Stream<Path> files = Files.walk(dir)) {
            for (Path p : files.filter(Files::isRegularFile).toList()) {
                assertThat(p.getFileName().toString())
                        .as("committed part file")
                        .startsWith("dead-letters");
                for (String line : Files.readAllLines(p)) {
                    if (!line.isBlank()) {
                        letters.add(JSON.readTree(line));
                    }
                }
            }
        }
        return letters;
    }
}
