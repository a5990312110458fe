package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Stream;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowFileReader;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.runtime.testutils.MiniClusterResourceConfiguration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.test.junit5.MiniClusterExtension;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Runs the whole job with its production sinks on a MiniCluster over each real sample dataset and
 * checks the accounting: every record is either in exactly one batch or in the dead-letter output
 * with its file, line and reason.
 */
class StokerJobITCase {
    private static final int WORLD_SIZE = 2;
    private static final int MICRO_BATCH_SIZE = 3;
    private static final ObjectMapper JSON = new ObjectMapper();

    @RegisterExtension
    static final MiniClusterExtension MINI_CLUSTER =
            new MiniClusterExtension(
                    new MiniClusterResourceConfiguration.Builder()
                            .setNumberTaskManagers(1)
                            .setNumberSlotsPerTaskManager(2)
                            .build());

    private Path outputRoot;

    @BeforeEach
    void createOutput() throws IOException {
        outputRoot = Files.createTempDirectory(Path.of("/dev/shm"), "stoker-job-itcase-");
    }

    @AfterEach
    void deleteOutput() throws IOException {
        try (Stream<Path> walk = Files.walk(outputRoot)) {
            walk.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        }
    }

    private Path runJob(Path root) throws Exception {
        Configuration conf = new Configuration();
        conf.set(StokerOptions.DATASET_PATH, root.toString());
        conf.set(StokerOptions.TOKENIZER_PATH, SharedData.dataDir().resolve("tokenizers/qwen3").toString());
        conf.set(StokerOptions.OUTPUT_ROOT, outputRoot.toString());
        conf.set(StokerOptions.JOB_NAME, "itcase");
        conf.set(StokerOptions.DP_WORLD_SIZE, WORLD_SIZE);
        conf.set(StokerOptions.MICRO_BATCH_SIZE, MICRO_BATCH_SIZE);
        conf.set(StokerOptions.MAX_PIXELS, 1003520L); // the common 1280-token fine-tuning setting
        conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, outputRoot.resolve("checkpoints").toUri().toString());
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none"); // any failure fails the test
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(2);
        env.enableCheckpointing(500);
        StokerJob.build(env, conf);
        env.execute("stoker-itcase-" + root.getFileName());
        return outputRoot.resolve("itcase");
    }

    @ParameterizedTest
    @ValueSource(strings = {"llava-style", "qwen-messages", "llamafactory-sharegpt"})
    void everyRecordIsBatchedOrDeadLettered(String dataset) throws Exception {
        Path root = SharedData.dataDir().resolve(dataset);
        Path jobDir = runJob(root);

        Map<Long, String> recordImages = readRecords(root.resolve("train.jsonl"));
        long numRecords = recordImages.size();
        long numSteps = (numRecords + WORLD_SIZE * MICRO_BATCH_SIZE - 1) / (WORLD_SIZE * MICRO_BATCH_SIZE);

        List<Long> batched = new ArrayList<>();
        for (int rank = 0; rank < WORLD_SIZE; rank++) {
            for (long step = 0; step < numSteps; step++) {
                Path file = jobDir.resolve("rank-" + rank).resolve(String.format("step-%010d.arrow", step));
                assertThat(file).as("batch (step %d, rank %d)", step, rank).exists();
                for (long index : sampleIndices(file)) {
                    assertThat(index / MICRO_BATCH_SIZE % WORLD_SIZE).as("rank of sample %d", index).isEqualTo(rank);
                    assertThat(index / (WORLD_SIZE * MICRO_BATCH_SIZE)).as("step of sample %d", index).isEqualTo(step);
                    batched.add(index);
                }
            }
        }
        List<JsonNode> deadLetters = readDeadLetters(jobDir.resolve("dead-letters"));
        Set<Long> accounted = new HashSet<>(batched);
        for (JsonNode dl : deadLetters) {
            assertThat(dl.get("file").asText()).endsWith("train.jsonl");
            assertThat(dl.get("line").asLong()).isPositive();
            assertThat(dl.get("reason").asText()).isNotEmpty();
            assertThat(dl.get("message").asText()).isNotEmpty();
            accounted.add(dl.get("sample_index").asLong());
        }
        assertThat(batched.size() + deadLetters.size()).as("written + dead-lettered = records read").isEqualTo(numRecords);
        assertThat(accounted).hasSize((int) numRecords);
        assertThat(accounted).allMatch(i -> i >= 0 && i < numRecords);

        recordImages.forEach(
                (index, images) -> {
                    if (isPlainPhotoRecord(dataset, images)) {
                        assertThat(batched).as("plain photo record %d (%s) is written", index, images).contains(index);
                    }
                });
        JsonNode manifest = JSON.readTree(jobDir.resolve("manifest.json").toFile());
        assertThat(manifest.get("num_records").asLong()).isEqualTo(numRecords);
        assertThat(manifest.get("num_steps").asLong()).isEqualTo(numSteps);
    }

    /** The bad-encoding case of ../shared/data/bad-inputs, through the real source and parser. */
    @Test
    void badEncodingLinesAreDeadLetteredWithLineAndReasonAndTheRestIsBatched() throws Exception {
        Path jobDir = runJob(SharedData.dataDir().resolve("bad-inputs/bad-encoding-jsonl"));

        List<String> batchedSources = new ArrayList<>();
        try (Stream<Path> files = Files.walk(jobDir)) {
            for (Path f : files.filter(p -> p.toString().endsWith(".arrow")).toList()) {
                batchedSources.addAll(sources(f));
            }
        }
        assertThat(batchedSources).extracting(s -> s.substring(s.lastIndexOf(':') + 1))
                .containsExactlyInAnyOrder("1", "5", "10", "11");
        Map<Long, String> reasonByLine = new HashMap<>();
        for (JsonNode dl : readDeadLetters(jobDir.resolve("dead-letters"))) {
            reasonByLine.put(dl.get("line").asLong(), dl.get("reason").asText());
        }
        assertThat(reasonByLine)
                .containsExactlyInAnyOrderEntriesOf(
                        Map.of(
                                2L, "INVALID_UTF8",
                                3L, "INVALID_UTF8",
                                6L, "INVALID_RECORD",
                                8L, "MALFORMED_JSON",
                                9L, "MALFORMED_JSON"));
    }

    private static List<String> sources(Path file) throws IOException {
        List<String> out = new ArrayList<>();
        try (RootAllocator allocator = new RootAllocator();
                ArrowFileReader reader = new ArrowFileReader(FileChannel.open(file), allocator)) {
            while (reader.loadNextBatch()) {
                VectorSchemaRoot root = reader.getVectorSchemaRoot();
                for (int r = 0; r < root.getRowCount(); r++) {
                    out.add(root.getVector("source").getObject(r).toString());
                }
            }
        }
        return out;
    }

    static boolean isPlainPhotoRecord(String dataset, String images) {
        if (images.isEmpty()) {
            return false;
        }
        if (dataset.equals("llamafactory-sharegpt")) {
            return true;
        }
        for (String path : images.split(",")) {
            if (!path.startsWith("images/photos/")) {
                return false;
            }
        }
        return true;
    }

    /** Sample index -> comma-joined image paths of each non-blank line (read independently of the job). */
    static Map<Long, String> readRecords(Path jsonl) throws IOException {
        Map<Long, String> records = new HashMap<>();
        long index = 0;
        for (String line : Files.readAllLines(jsonl)) {
            if (line.isBlank()) {
                continue;
            }
            List<String> images = new ArrayList<>();
            collectImagePaths(JSON.readTree(line), images);
            records.put(index++, String.join(",", images));
        }
        return records;
    }

    private static final Set<String> IMAGE_KEYS = Set.of("image", "images", "url");

    private static void collectImagePaths(JsonNode node, List<String> out) {
        if (node.isArray()) {
            node.forEach(n -> collectImagePaths(n, out));
            return;
        }
        node.fields()
                .forEachRemaining(
                        e -> {
                            JsonNode v = e.getValue();
                            if (IMAGE_KEYS.contains(e.getKey()) && v.isTextual()) {
                                out.add(v.asText());
                            } else if (IMAGE_KEYS.contains(e.getKey()) && v.isArray()) {
                                v.forEach(p -> out.add(p.asText()));
                            } else if (v.isContainerNode()) {
                                collectImagePaths(v, out);
                            }
                        });
    }

    static List<Long> sampleIndices(Path file) throws IOException {
        List<Long> indices = new ArrayList<>();
        try (RootAllocator allocator = new RootAllocator();
                ArrowFileReader reader = new ArrowFileReader(FileChannel.open(file), allocator)) {
            while (reader.loadNextBatch()) {
                VectorSchemaRoot root = reader.getVectorSchemaRoot();
                BigIntVector index = (BigIntVector) root.getVector("sample_index");
                for (int r = 0; r < root.getRowCount(); r++) {
                    indices.add(index.get(r));
                }
            }
        }
        return indices;
    }

    static List<JsonNode> readDeadLetters(Path dir) throws IOException {
        List<JsonNode> letters = new ArrayList<>();
        if (!Files.isDirectory(dir)) {
            return letters;
        }
        try (Stream<Path> files = Files.walk(dir)) {
            for (Path p : files.filter(Files::isRegularFile).toList()) {
                assertThat(p.getFileName().toString()).as("committed part file").startsWith("dead-letters");
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
