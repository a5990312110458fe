package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.testkit.ExpectedFaultFilter;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.flink.configuration.Configuration;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Runs the whole job with its production sinks on a MiniCluster over each real sample dataset and
 * checks the accounting: every record is either in exactly one batch or in the dead-letter output
 * with its file, line and reason.
 */
@ExtendWith(ExpectedFaultFilter.DeadLettersExpected.class) // the escaping record, asserted
class StokerJobITCase {
    private static final int WORLD_SIZE = 2;
    private static final int MICRO_BATCH_SIZE = 3;
    private static final ObjectMapper JSON = new ObjectMapper();

    @RegisterExtension static final JobTestCluster CLUSTER = JobTestCluster.local(2);

    @ParameterizedTest
    @ValueSource(strings = {"llava-style", "qwen-messages", "llamafactory-sharegpt"})
    void everyRecordIsBatchedOrDeadLettered(String dataset) throws Exception {
        Path root = SharedData.dataDir().resolve(dataset);
        Configuration conf = new Configuration();
        conf.set(StokerOptions.MAX_PIXELS, 1003520L); // the common 1280-token fine-tuning setting
        JobRun.Result run =
                JobRun.run(root, CLUSTER.outputRoot(), WORLD_SIZE, MICRO_BATCH_SIZE, conf);
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

    /**
     * Annotations and images apart on the local filesystem: the JSONL (llava-style's records plus
     * one whose image path leaves the image root) in a directory of its own, {@code
     * stoker.image.root} the shared llava-style directory. Every plain photo record is batched
     * (found only through the image root: the JSONL's directory holds no image) and the escaping
     * record is {@code UNSAFE_PATH} at the parse stage, before any read.
     */
    @Test
    void imagesResolveAgainstALocalImageRootApartFromTheJsonl(@TempDir Path dir) throws Exception {
        Path annotations = writeAnnotationsWithEscape(dir);
        Configuration conf = new Configuration();
        conf.set(StokerOptions.MAX_PIXELS, 1003520L);
        conf.set(StokerOptions.IMAGE_ROOT, SharedData.dataDir().resolve("llava-style").toString());
        JobRun.Result run =
                JobRun.run(
                        annotations.getParent(),
                        CLUSTER.outputRoot(),
                        WORLD_SIZE,
                        MICRO_BATCH_SIZE,
                        conf);
        run.assertAccounted();
        assertImageRootOutcome(run, annotations);
    }

    /** An image path that leaves the image root (into the annotations' directory). */
    static final String ESCAPING_IMAGE = "../annotations/escape.png";

    /**
     * Writes {@code dir/annotations/train.jsonl}: llava-style's records, then one record whose
     * image is {@link #ESCAPING_IMAGE}, and an image at that place so that only the escape rule
     * stops it.
     *
     * @return the JSONL file
     */
    static Path writeAnnotationsWithEscape(Path dir) throws IOException {
        Path llava = SharedData.dataDir().resolve("llava-style");
        Path annotations = Files.createDirectories(dir.resolve("annotations"));
        Path jsonl = annotations.resolve("train.jsonl");
        String escape =
                "{\"id\": \"escape-1\", \"image\": \""
                        + ESCAPING_IMAGE
                        + "\", \"conversations\": [{\"from\": \"human\", \"value\":"
                        + " \"<image>\\nWhat is this?\"}, {\"from\": \"gpt\", \"value\":"
                        + " \"A file outside the image root.\"}]}\n";
        Files.writeString(
                jsonl,
                Files.readString(llava.resolve("train.jsonl")).stripTrailing() + "\n" + escape);
        Files.copy(llava.resolve("images/photos/coffee.png"), annotations.resolve("escape.png"));
        return jsonl;
    }

    /**
     * Every plain photo record of {@code jsonl} is batched, nothing fails to be found or fetched,
     * and the escaping record is one {@code UNSAFE_PATH} dead letter of the parse stage.
     */
    static void assertImageRootOutcome(JobRun.Result run, Path jsonl) throws IOException {
        Map<Long, String> records = readRecords(jsonl);
        Set<Long> batched = run.samplesByIndex().keySet();
        long escapeIndex = records.size() - 1;
        assertThat(records.get(escapeIndex)).isEqualTo(ESCAPING_IMAGE);
        records.forEach(
                (index, images) -> {
                    if (isPlainPhotoRecord("llava-style", images)) {
                        assertThat(batched)
                                .as("plain photo record %d (%s) is written", index, images)
                                .contains(index);
                    }
                });
        assertThat(run.deadLetters())
                .extracting(dl -> dl.get("reason").asText())
                .as("every image is under the image root")
                .doesNotContain("IMAGE_NOT_FOUND", "FETCH_FAILED", "FETCH_TIMEOUT");
        List<JsonNode> escapes =
                run.deadLetters().stream()
                        .filter(dl -> dl.get("sample_index").asLong() == escapeIndex)
                        .toList();
        assertThat(escapes).hasSize(1);
        JsonNode escape = escapes.get(0);
        assertThat(escape.get("reason").asText()).isEqualTo("UNSAFE_PATH");
        assertThat(escape.get("stage").asText()).isEqualTo("parse");
        assertThat(escape.get("record_id").asText()).isEqualTo("escape-1");
        assertThat(escape.get("message").asText())
                .contains("'" + ESCAPING_IMAGE + "'", "escapes the image root");
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
