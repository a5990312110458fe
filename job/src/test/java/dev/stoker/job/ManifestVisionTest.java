package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.connectors.protocol.Manifest;
import dev.stoker.connectors.protocol.ShmLayout;
import dev.stoker.operators.batch.BatchPlan;
import java.io.IOException;
import java.nio.file.Path;
import java.util.Iterator;
import java.util.Map;
import org.apache.flink.configuration.Configuration;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The manifest carries each preset's vision settings, which the Python side reads instead of a
 * table of its own ({@code Manifest.vision}, {@code stoker.images}): they are the Hugging Face
 * processors' {@code image_config} (patch sizes, {@code image_mean}, {@code image_std}) as the
 * golden generator recorded them from transformers ({@code parity/summary.json}).
 */
class ManifestVisionTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String[] FIELDS = {
        "patch_size", "temporal_patch_size", "merge_size", "image_mean", "image_std"
    };

    @TempDir Path jobDir;

    @Test
    void everyPresetsManifestHasTheHuggingFaceImageConfig() throws IOException {
        JsonNode presets =
                JSON.readTree(
                                Path.of("../operators/src/test/resources/parity/summary.json")
                                        .toFile())
                        .get("presets");
        int checked = 0;
        for (Iterator<Map.Entry<String, JsonNode>> it = presets.fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> preset = it.next();
            Configuration conf = new Configuration();
            conf.set(StokerOptions.MODEL_PRESET, preset.getKey());
            new Manifest(
                            "job",
                            "g1",
                            new BatchPlan(4, 1, 2, 1),
                            0,
                            0L,
                            ModelOptions.visionConfig(conf),
                            "sha256:x",
                            preset.getKey(),
                            null,
                            "/data/mixture.yaml",
                            java.util.List.of())
                    .writeTo(new ShmLayout(jobDir.toString(), "g1"));
            JsonNode written = JSON.readTree(jobDir.resolve("manifest.json").toFile());
            JsonNode hf = preset.getValue().get("image_config");
            for (String field : FIELDS) {
                assertThat(written.get(field))
                        .as("%s of %s", field, preset.getKey())
                        .isEqualTo(hf.get(field));
            }
            checked++;
        }
        assertThat(checked).isEqualTo(3);
    }
}
