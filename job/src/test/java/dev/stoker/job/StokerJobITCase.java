package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.test.junit5.MiniClusterExtension;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
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
    static final MiniClusterExtension MINI_CLUSTER = MiniClusters.oneTaskManager(2);

    private Path outputRoot;

    @BeforeEach
    void createOutput() throws IOException {
        outputRoot = JobRun.createOutputRoot();
    }

    @AfterEach
    void deleteOutput() throws IOException {
        JobRun.deleteOutputRoot(outputRoot);
    }

    @ParameterizedTest
    @ValueSource(strings = {"llava-style", "qwen-messages", "llamafactory-sharegpt"})
    void everyRecordIsBatchedOrDeadLettered(String dataset) throws Exception {
        Path root = SharedData.dataDir().resolve(dataset);
        Configuration conf = new Configuration();
        conf.set(StokerOptions.MAX_PIXELS, 1003520L); // the common 1280-token fine-tuning setting
        JobRun.Result run = JobRun.run(root, outputRoot, WORLD_SIZE, MICRO_BATCH_SIZE, conf);
        Path jobDir = run.jobDir();

        Map<Long, String> recordImages = readRecords(root.resolve("train.jsonl"));
        long numRecords = recordImages.size();
        long numSteps =
                (numRecords + WORLD_SIZE * MICRO_BATCH_SIZE - 1) / (WORLD_SIZE * MICRO_BATCH_SIZE);
        assertThat(run.plan().numRecords()).isEqualTo(numRecords);
        assertThat(run.plan().numSteps()).isEqualTo(numSteps);
        run.assertAccounted();

        List<Long> batched = run.samples().stream().map(JobRun.Sample::sampleIndex).toList();
        for (JsonNode dl : run.deadLetters()) {
            assertThat(dl.get("file").asText()).endsWith("train.jsonl");
            assertThat(dl.get("line").asLong()).isPositive();
            assertThat(dl.get("reason").asText()).isNotEmpty();
            assertThat(dl.get("message").asText()).isNotEmpty();
        }

        recordImages.forEach(
                (index, images) -> {
                    if (isPlainPhotoRecord(dataset, images)) {
                        assertThat(batched)
                                .as("plain photo record %d (%s) is written", index, images)
                                .contains(index);
                    }
                });
        JsonNode manifest = JSON.readTree(jobDir.resolve("manifest.json").toFile());
        assertThat(manifest.get("num_records").asLong()).isEqualTo(numRecords);
        assertThat(manifest.get("num_steps").asLong()).isEqualTo(numSteps);
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

    /**
     * Sample index -> comma-joined image paths of each non-blank line (read independently of the
     * job).
     */
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
}
