package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.preset.ModelPreset;
import dev.stoker.operators.video.QwenVideoConfig;
import dev.stoker.operators.video.VideoLimits;
import dev.stoker.operators.video.VideoPreprocessor;
import dev.stoker.operators.video.VideoSettings;
import java.util.List;
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

    /** The presets' video defaults come from ModelPreset, each overridable by its option. */
    @Test
    void videoSettingsDefaultToThePresetAndTakeTheOptions() {
        VideoSettings qwen2 = ModelOptions.videoSettings(preset("qwen2.5-vl"));
        QwenVideoConfig expected = ModelPreset.QWEN2_5_VL.videoConfig();
        assertThat(qwen2.config()).usingRecursiveComparison().isEqualTo(expected);
        assertThat(qwen2.rule()).isEqualTo(VideoPreprocessor.FrameRule.QWEN2_VL);
        assertThat(qwen2.fps()).isEqualTo(ModelPreset.QWEN_VL_UTILS_FPS);
        VideoSettings qwen3 = ModelOptions.videoSettings(preset("qwen3-vl"));
        assertThat(qwen3.rule()).isEqualTo(VideoPreprocessor.FrameRule.QWEN3_VL);
        assertThat(qwen3.fps()).isEqualTo(ModelPreset.QWEN3_VL.videoConfig().fps);
        assertThat(qwen3.limits())
                .isEqualTo(
                        new VideoLimits(
                                StokerOptions.VIDEO_MAX_SOURCE_PIXELS.defaultValue(),
                                StokerOptions.VIDEO_MAX_SOURCE_FRAMES.defaultValue(),
                                StokerOptions.VIDEO_MAX_SAMPLED_SIZE.defaultValue().getBytes()));

        Configuration conf = preset("qwen3-vl");
        conf.set(StokerOptions.VIDEO_FPS, 1.0);
        conf.set(StokerOptions.VIDEO_FRAME_RULE, VideoPreprocessor.FrameRule.QWEN2_VL);
        conf.set(StokerOptions.VIDEO_MIN_FRAMES, 2);
        conf.set(StokerOptions.VIDEO_MAX_FRAMES, 32);
        conf.set(StokerOptions.VIDEO_MIN_PIXELS, 100L);
        conf.set(StokerOptions.VIDEO_MAX_PIXELS, 200_000L);
        VideoSettings set = ModelOptions.videoSettings(conf);
        assertThat(set.fps()).isEqualTo(1.0);
        assertThat(set.rule()).isEqualTo(VideoPreprocessor.FrameRule.QWEN2_VL);
        assertThat(set.config().minFrames).isEqualTo(2);
        assertThat(set.config().maxFrames).isEqualTo(32);
        assertThat(set.config().minPixels).isEqualTo(100);
        assertThat(set.config().maxPixels).isEqualTo(200_000);

        // the image geometry and normalisation the sink patchifies videos with apply to them too
        conf.set(StokerOptions.PATCH_SIZE, 14);
        conf.set(StokerOptions.MERGE_SIZE, 1);
        conf.set(StokerOptions.IMAGE_MEAN, List.of(0.25, 0.5, 0.75));
        QwenVideoConfig video = ModelOptions.videoSettings(conf).config();
        assertThat(video.patchSize).isEqualTo(14);
        assertThat(video.mergeSize).isEqualTo(1);
        assertThat(video.temporalPatchSize).isEqualTo(2);
        assertThat(video.imageMean).containsExactly(0.25, 0.5, 0.75);
    }

    @Test
    void badVideoValuesAreRefusedNamingTheOption() {
        Configuration fps = preset("qwen2-vl");
        fps.set(StokerOptions.VIDEO_FPS, 0.0);
        assertThatThrownBy(() -> ModelOptions.videoSettings(fps))
                .hasMessage("stoker.video.fps must be positive, got 0.0");
        Configuration frames = preset("qwen2-vl");
        frames.set(StokerOptions.VIDEO_MIN_FRAMES, 10);
        frames.set(StokerOptions.VIDEO_MAX_FRAMES, 8);
        assertThatThrownBy(() -> ModelOptions.videoSettings(frames))
                .hasMessage(
                        "need stoker.video.min-frames <= stoker.video.max-frames, got 10 and 8");
        Configuration pixels = preset("qwen2-vl");
        pixels.set(StokerOptions.VIDEO_MAX_PIXELS, 100L);
        assertThatThrownBy(() -> ModelOptions.videoSettings(pixels))
                .hasMessage(
                        "need 1 <= stoker.video.min-pixels <= stoker.video.max-pixels, got 3136"
                                + " and 100");
        Configuration source = preset("qwen2-vl");
        source.set(StokerOptions.VIDEO_MAX_SOURCE_FRAMES, 0);
        assertThatThrownBy(() -> ModelOptions.videoSettings(source))
                .hasMessage("stoker.video.max-source-frames must be at least 1, got 0");
    }

    private static Configuration preset(String key) {
        Configuration conf = new Configuration();
        conf.set(StokerOptions.MODEL_PRESET, key);
        return conf;
    }
}
