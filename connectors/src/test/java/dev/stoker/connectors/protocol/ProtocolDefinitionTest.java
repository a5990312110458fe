package dev.stoker.connectors.protocol;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.image.QwenVisionConfig;
import dev.stoker.operators.preset.ModelPreset;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.OptionalDouble;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The protocol's names in Java (file names, manifest and ack fields, batch metadata keys) are the
 * ones {@code schema/batch-schema.json} defines, and what the job writes and reads follows them.
 * The Python side checks the same file ({@code python/tests/unit/test_schema_sync.py}).
 */
class ProtocolDefinitionTest {
    private static final ObjectMapper JSON = new ObjectMapper();

    @TempDir Path jobDir;

    private static JsonNode definition() throws IOException {
        return JSON.readTree(Path.of("../schema/batch-schema.json").toFile());
    }

    private static List<String> keys(JsonNode node) {
        List<String> out = new ArrayList<>();
        node.fieldNames().forEachRemaining(out::add);
        return out;
    }

    @Test
    void namesAreTheSharedDefinitions() throws IOException {
        JsonNode doc = definition();
        assertThat(Manifest.FIELDS).containsExactlyElementsOf(keys(doc.get("manifest")));
        assertThat(Ack.FIELDS).containsExactlyElementsOf(keys(doc.get("ack")));
        List<String> sequence = new ArrayList<>();
        doc.get("sequence_fields").forEach(f -> sequence.add(f.asText()));
        assertThat(Manifest.SEQUENCE_FIELDS).containsExactlyElementsOf(sequence);
        assertThat(BatchSchema.METADATA_KEYS).containsExactlyElementsOf(keys(doc.get("metadata")));
        assertThat(doc.get("format_version").asInt()).isEqualTo(BatchSchema.FORMAT_VERSION);
    }

    @Test
    void layoutFollowsTheSharedFileNames() throws IOException {
        JsonNode files = definition().get("files");
        ShmLayout layout = new ShmLayout(jobDir.toString(), "g-1_x");
        assertThat(layout.manifest()).isEqualTo(jobDir.resolve(files.get("manifest").asText()));
        String gen = files.get("generation_dir").asText().replace("<generation>", "g-1_x");
        assertThat(layout.generationDir()).isEqualTo(jobDir.resolve(gen));
        String rank = files.get("rank_dir").asText().replace("<rank>", "3");
        assertThat(layout.rankDir(3)).isEqualTo(jobDir.resolve(gen).resolve(rank));
        String batch = files.get("batch_file").asText().replace("<step:010d>", "0000000042");
        assertThat(layout.batchFile(42, 3)).isEqualTo(layout.rankDir(3).resolve(batch));
        assertThat(ShmLayout.isBatchFile(batch)).isTrue();
        assertThat(layout.ackFile(3))
                .isEqualTo(layout.rankDir(3).resolve(files.get("ack").asText()));
    }

    @Test
    void manifestWritesEveryDefinedFieldWithTheVisionSettings() throws IOException {
        QwenVisionConfig vision = ModelPreset.QWEN2_VL.visionConfig();
        vision.patchSize = 16;
        vision.imageMean = new double[] {0.5, 0.25, 0.125};
        vision.imageStd = new double[] {0.75, 0.5, 0.375};
        ShmLayout layout = new ShmLayout(jobDir.toString(), "g1");
        new Manifest(
                        "job",
                        "g1",
                        new BatchPlan(10, 2, 2, 1),
                        0,
                        null,
                        vision,
                        "sha256:x",
                        "p",
                        2048,
                        "/data/mixture.yaml",
                        java.util.List.of())
                .writeTo(layout);

        JsonNode written = JSON.readTree(layout.manifest().toFile());
        assertThat(keys(written)).containsExactlyElementsOf(Manifest.FIELDS);
        assertThat(written.get("patch_dim").asInt()).isEqualTo(3 * 2 * 16 * 16);
        assertThat(written.get("patch_size").asInt()).isEqualTo(16);
        assertThat(written.get("temporal_patch_size").asInt()).isEqualTo(2);
        assertThat(written.get("merge_size").asInt()).isEqualTo(2);
        // the number in the Qwen-VL models' preprocessor_config.json
        assertThat(written.get("rescale_factor").asDouble()).isEqualTo(0.00392156862745098);
        assertThat(doubles(written.get("image_mean"))).containsExactly(0.5, 0.25, 0.125);
        assertThat(doubles(written.get("image_std"))).containsExactly(0.75, 0.5, 0.375);
        assertThat(written.get("shuffle_seed").isNull()).isTrue();
        assertThat(written.get("packing_max_tokens").asInt()).isEqualTo(2048);
        assertThat(Manifest.readCurrent(jobDir)).contains(new Manifest.Current("g1", 2, 0));
    }

    @Test
    void planHistoryKeepsTheEarlierStagesBeforeTheNewStartStep() throws IOException {
        assertThat(Manifest.readPlanHistory(jobDir)).isEmpty();
        ShmLayout layout = new ShmLayout(jobDir.toString(), "g1");
        QwenVisionConfig vision = ModelPreset.QWEN2_VL.visionConfig();
        new Manifest(
                        "job",
                        "g1",
                        new BatchPlan(10, 2, 2, 1),
                        0,
                        7L,
                        vision,
                        "sha256:a",
                        "p",
                        null,
                        "/m/stage1.yaml",
                        Manifest.readPlanHistory(jobDir))
                .writeTo(layout);
        List<java.util.Map<String, Object>> one = Manifest.readPlanHistory(jobDir);
        assertThat(one).hasSize(1);
        assertThat(one.get(0))
                .containsEntry("mixture", "/m/stage1.yaml")
                .containsEntry("dataset_fingerprint", "sha256:a")
                .containsEntry("num_records", 10)
                .containsEntry("shuffle_seed", 7)
                .containsEntry("mixture_start_step", 0);
        assertThat(one.get(0).keySet())
                .containsExactlyElementsOf(
                        java.util.stream.Stream.concat(
                                        java.util.stream.Stream.of("mixture"),
                                        Manifest.SEQUENCE_FIELDS.stream())
                                .toList());

        // the next stage starts at step 3: its epochs count from there
        new Manifest(
                        "job",
                        "g2",
                        new BatchPlan(20, 2, 2, 1, 3),
                        3,
                        7L,
                        vision,
                        "sha256:b",
                        "p",
                        null,
                        "/m/stage2.yaml",
                        one)
                .writeTo(new ShmLayout(jobDir.toString(), "g2"));
        JsonNode written = JSON.readTree(jobDir.resolve("manifest.json").toFile());
        assertThat(written.get("mixture_start_step").asLong()).isEqualTo(3);
        assertThat(written.get("num_steps").asLong()).isEqualTo(3 + 5);
        List<java.util.Map<String, Object>> two = Manifest.readPlanHistory(jobDir);
        assertThat(two)
                .extracting(m -> m.get("dataset_fingerprint"))
                .containsExactly("sha256:a", "sha256:b");
        assertThat(two).extracting(m -> m.get("mixture_start_step")).containsExactly(0, 3);

        // a stage restarted at step 3 again replaces the one that started there; one at step 0
        // starts the history afresh
        new Manifest(
                        "job",
                        "g3",
                        new BatchPlan(30, 2, 2, 1, 3),
                        4,
                        7L,
                        vision,
                        "sha256:c",
                        "p",
                        null,
                        "/m/stage2b.yaml",
                        two)
                .writeTo(new ShmLayout(jobDir.toString(), "g3"));
        assertThat(Manifest.readPlanHistory(jobDir))
                .extracting(m -> m.get("dataset_fingerprint"))
                .containsExactly("sha256:a", "sha256:c");
        new Manifest(
                        "job",
                        "g4",
                        new BatchPlan(30, 2, 2, 1),
                        0,
                        7L,
                        vision,
                        "sha256:d",
                        "p",
                        null,
                        "/m/fresh.yaml",
                        Manifest.readPlanHistory(jobDir))
                .writeTo(new ShmLayout(jobDir.toString(), "g4"));
        assertThat(Manifest.readPlanHistory(jobDir))
                .extracting(m -> m.get("dataset_fingerprint"))
                .containsExactly("sha256:d");

        // a manifest without plan_history (an older release's) is one stage from step 0
        Files.writeString(
                jobDir.resolve("manifest.json"),
                "{\"generation\": \"g0\", \"world_size\": 2, \"dataset_fingerprint\":"
                        + " \"sha256:old\", \"num_records\": 5}");
        assertThat(Manifest.readPlanHistory(jobDir))
                .singleElement()
                .satisfies(
                        m -> {
                            assertThat(m).containsEntry("dataset_fingerprint", "sha256:old");
                            assertThat(m).containsEntry("mixture_start_step", 0L);
                            assertThat(m).containsEntry("mixture", null);
                        });
    }

    private static List<Double> doubles(JsonNode array) {
        List<Double> out = new ArrayList<>();
        array.forEach(v -> out.add(v.asDouble()));
        return out;
    }

    @Test
    void aManifestWithAnInvalidGenerationOrWorldSizeIsNotCurrent() throws IOException {
        Path file = jobDir.resolve("manifest.json");
        Files.writeString(file, "{\"generation\": \"../x\", \"world_size\": 2}");
        assertThat(Manifest.readCurrent(jobDir)).isEmpty();
        Files.writeString(file, "{\"generation\": \"g1\", \"world_size\": 0}");
        assertThat(Manifest.readCurrent(jobDir)).isEmpty();
        Files.writeString(file, "{\"generation\": \"g1\", \"wor");
        assertThat(Manifest.readCurrent(jobDir)).isEmpty();
        assertThat(Ack.lastStepConsumedByAllRanks(jobDir)).isEmpty();
    }

    @Test
    void ackIsReadWithEveryFieldAndMissingOrHalfWrittenFilesReadAsNone() throws IOException {
        Path file = jobDir.resolve("ack.json");
        assertThat(Ack.read(file)).isEmpty();
        Files.writeString(file, "{\"consumed_step\": 4, \"data_wa");
        assertThat(Ack.read(file)).isEmpty();
        Files.writeString(file, "{\"data_wait_s\": 1.0}");
        assertThat(Ack.read(file)).isEmpty();

        Files.writeString(
                file,
                "{\"consumed_step\": 7, \"data_wait_s\": 1.5, \"elapsed_s\": 6.0,"
                        + " \"wait_time_ratio\": 0.2}");
        Ack ack = Ack.read(file).orElseThrow();
        assertThat(ack)
                .isEqualTo(
                        new Ack(
                                7,
                                OptionalDouble.of(1.5),
                                OptionalDouble.of(6.0),
                                OptionalDouble.of(0.2)));
        // the reader's own ratio wins over the quotient of its rounded fields
        assertThat(ack.ratio()).hasValue(0.2);

        Files.writeString(file, "{\"consumed_step\": 8, \"data_wait_s\": 3.0, \"elapsed_s\": 2.0}");
        assertThat(Ack.read(file).orElseThrow().ratio()).hasValue(1.0);
        Files.writeString(file, "{\"consumed_step\": 8}");
        assertThat(Ack.read(file).orElseThrow().ratio()).isEmpty();
    }

    @Test
    void lastStepConsumedByAllRanksCountsARankWithoutAckAsBeforeTheFirstStep() throws IOException {
        ShmLayout layout = new ShmLayout(jobDir.toString(), "g2");
        new Manifest(
                        "job",
                        "g2",
                        new BatchPlan(8, 2, 2, 1),
                        1,
                        3L,
                        ModelPreset.QWEN2_VL.visionConfig(),
                        "sha256:x",
                        "p",
                        null,
                        "/data/mixture.yaml",
                        java.util.List.of())
                .writeTo(layout);
        Files.createDirectories(layout.rankDir(0));
        Files.writeString(layout.ackFile(0), "{\"consumed_step\": 1}");
        assertThat(Ack.lastStepConsumedByAllRanks(jobDir)).hasValue(0);
        Files.createDirectories(layout.rankDir(1));
        Files.writeString(layout.ackFile(1), "{\"consumed_step\": 2}");
        assertThat(Ack.lastStepConsumedByAllRanks(jobDir)).hasValue(1);
        assertThat(Ack.consumedStep(layout, 1, 1)).isEqualTo(2);
    }
}
