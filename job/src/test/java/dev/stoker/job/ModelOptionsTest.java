package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import org.apache.flink.configuration.Configuration;
import org.junit.jupiter.api.Test;

class ModelOptionsTest {
    /**
     * max_position_embeddings of the models' config.json: Qwen/Qwen2-VL-7B-Instruct 32768,
     * Qwen/Qwen2.5-VL-7B-Instruct 128000, Qwen/Qwen3-VL-8B-Instruct text_config 262144.
     */
    @Test
    void maxSeqLenDefaultsToThePresetsMaxPositionEmbeddings() {
        assertThat(ModelOptions.maxSeqLen(preset("qwen2-vl"))).isEqualTo(32768);
        assertThat(ModelOptions.maxSeqLen(preset("qwen2.5-vl"))).isEqualTo(128000);
        assertThat(ModelOptions.maxSeqLen(preset("qwen3-vl"))).isEqualTo(262144);
        assertThat(ModelOptions.maxSeqLen(new Configuration())).isEqualTo(32768);
    }

    @Test
    void maxSeqLenOverridesThePresetAndMustBePositive() {
        Configuration conf = preset("qwen3-vl");
        conf.set(StokerOptions.MAX_SEQ_LEN, 8192);
        assertThat(ModelOptions.maxSeqLen(conf)).isEqualTo(8192);
        conf.set(StokerOptions.MAX_SEQ_LEN, 0);
        assertThatThrownBy(() -> ModelOptions.maxSeqLen(conf))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("stoker.max-seq-len must be at least 1, got 0");
    }

    @Test
    void policyDefaultsToDrop() {
        assertThat(new Configuration().get(StokerOptions.MAX_SEQ_LEN_POLICY).name())
                .isEqualTo("DROP");
    }

    private static Configuration preset(String key) {
        Configuration conf = new Configuration();
        conf.set(StokerOptions.MODEL_PRESET, key);
        return conf;
    }
}
