package dev.stoker.job;

import dev.stoker.operators.image.QwenVisionConfig;
import dev.stoker.operators.preset.ModelPreset;
import dev.stoker.operators.tokenize.QwenChatTemplate;
import dev.stoker.operators.video.QwenVideoConfig;
import dev.stoker.operators.video.VideoLimits;
import dev.stoker.operators.video.VideoSettings;
import java.util.List;
import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.Configuration;

/**
 * The model preset ({@link StokerOptions#MODEL_PRESET}) with the {@code stoker.image.*}, {@code
 * stoker.video.*}, {@code stoker.template.*} and {@code stoker.max-seq-len} overrides applied: the
 * vision config of the image stage, the video settings, the chat template and the maximum sequence
 * length of the tokenize stage.
 */
final class ModelOptions {
    private ModelOptions() {}

    /**
     * The preset named by {@link StokerOptions#MODEL_PRESET}.
     *
     * @throws IllegalArgumentException naming the valid presets when the value is unknown
     */
    static ModelPreset preset(Configuration conf) {
        return ModelPreset.fromKey(conf.get(StokerOptions.MODEL_PRESET));
    }

    /**
     * The preset's vision config with every set {@code stoker.image.*} option applied.
     *
     * @throws IllegalArgumentException when a value is out of range (sizes below 1, min pixels
     *     above max pixels, mean/std without exactly three values or a std that is not positive)
     */
    static QwenVisionConfig visionConfig(Configuration conf) {
        QwenVisionConfig vision = preset(conf).visionConfig();
        vision.patchSize = positive(conf, StokerOptions.PATCH_SIZE, vision.patchSize);
        vision.temporalPatchSize =
                positive(conf, StokerOptions.TEMPORAL_PATCH_SIZE, vision.temporalPatchSize);
        vision.mergeSize = positive(conf, StokerOptions.MERGE_SIZE, vision.mergeSize);
        vision.minPixels = conf.getOptional(StokerOptions.MIN_PIXELS).orElse(vision.minPixels);
        vision.maxPixels = conf.getOptional(StokerOptions.MAX_PIXELS).orElse(vision.maxPixels);
        if (vision.minPixels < 1 || vision.minPixels > vision.maxPixels) {
            throw new IllegalArgumentException(
                    "need 1 <= stoker.image.min-pixels <= stoker.image.max-pixels, got "
                            + vision.minPixels
                            + " and "
                            + vision.maxPixels);
        }
        vision.imageMean = channels(conf, StokerOptions.IMAGE_MEAN, vision.imageMean);
        vision.imageStd = channels(conf, StokerOptions.IMAGE_STD, vision.imageStd);
        for (double std : vision.imageStd) {
            if (!(std > 0)) {
                throw new IllegalArgumentException(
                        "stoker.image.image-std values must be positive, got " + std);
            }
        }
        vision.maxSourcePixels = conf.get(StokerOptions.MAX_SOURCE_PIXELS);
        vision.dctDownscale = conf.get(StokerOptions.DCT_DOWNSCALE);
        return vision;
    }

    /**
     * The preset's video settings ({@link ModelPreset#videoConfig()}, {@link
     * ModelPreset#videoFps()}, {@link ModelPreset#frameRule()}) with the patch geometry and
     * normalisation of {@link #visionConfig} and every set {@code stoker.video.*} option applied,
     * and the decoding limits.
     *
     * @throws IllegalArgumentException naming the option when a value is out of range (fps not
     *     positive, frame counts below 1 or min above max, min pixels below 1 or above max pixels,
     *     limits not positive)
     */
    static VideoSettings videoSettings(Configuration conf) {
        ModelPreset preset = preset(conf);
        QwenVideoConfig video = preset.videoConfig();
        // one vision tower for images and videos: the stoker.image.* geometry and normalisation,
        // which the sink patchifies both with, apply to the video frames too
        QwenVisionConfig vision = visionConfig(conf);
        video.patchSize = vision.patchSize;
        video.temporalPatchSize = vision.temporalPatchSize;
        video.mergeSize = vision.mergeSize;
        video.imageMean = vision.imageMean.clone();
        video.imageStd = vision.imageStd.clone();
        video.minFrames = positive(conf, StokerOptions.VIDEO_MIN_FRAMES, video.minFrames);
        video.maxFrames = positive(conf, StokerOptions.VIDEO_MAX_FRAMES, video.maxFrames);
        if (video.minFrames > video.maxFrames) {
            throw new IllegalArgumentException(
                    "need "
                            + StokerOptions.VIDEO_MIN_FRAMES.key()
                            + " <= "
                            + StokerOptions.VIDEO_MAX_FRAMES.key()
                            + ", got "
                            + video.minFrames
                            + " and "
                            + video.maxFrames);
        }
        video.minPixels = conf.getOptional(StokerOptions.VIDEO_MIN_PIXELS).orElse(video.minPixels);
        video.maxPixels = conf.getOptional(StokerOptions.VIDEO_MAX_PIXELS).orElse(video.maxPixels);
        if (video.minPixels < 1 || video.minPixels > video.maxPixels) {
            throw new IllegalArgumentException(
                    "need 1 <= "
                            + StokerOptions.VIDEO_MIN_PIXELS.key()
                            + " <= "
                            + StokerOptions.VIDEO_MAX_PIXELS.key()
                            + ", got "
                            + video.minPixels
                            + " and "
                            + video.maxPixels);
        }
        double fps = conf.getOptional(StokerOptions.VIDEO_FPS).orElse(preset.videoFps());
        if (!(fps > 0) || Double.isInfinite(fps)) {
            throw new IllegalArgumentException(
                    StokerOptions.VIDEO_FPS.key() + " must be positive, got " + fps);
        }
        long sourcePixels = conf.get(StokerOptions.VIDEO_MAX_SOURCE_PIXELS);
        if (sourcePixels < 1) {
            throw new IllegalArgumentException(
                    StokerOptions.VIDEO_MAX_SOURCE_PIXELS.key()
                            + " must be at least 1, got "
                            + sourcePixels);
        }
        int sourceFrames = conf.get(StokerOptions.VIDEO_MAX_SOURCE_FRAMES);
        if (sourceFrames < 1) {
            throw new IllegalArgumentException(
                    StokerOptions.VIDEO_MAX_SOURCE_FRAMES.key()
                            + " must be at least 1, got "
                            + sourceFrames);
        }
        long sampledBytes = conf.get(StokerOptions.VIDEO_MAX_SAMPLED_SIZE).getBytes();
        if (sampledBytes < 1) {
            throw new IllegalArgumentException(
                    StokerOptions.VIDEO_MAX_SAMPLED_SIZE.key() + " must be at least 1 byte");
        }
        return new VideoSettings(
                video,
                conf.getOptional(StokerOptions.VIDEO_FRAME_RULE).orElse(preset.frameRule()),
                fps,
                new VideoLimits(sourcePixels, sourceFrames, sampledBytes));
    }

    /** The preset's chat template, with {@link StokerOptions#DEFAULT_SYSTEM_PROMPT} applied. */
    static QwenChatTemplate chatTemplate(Configuration conf) {
        ModelPreset preset = preset(conf);
        return conf.getOptional(StokerOptions.DEFAULT_SYSTEM_PROMPT)
                .map(
                        prompt ->
                                preset.chatTemplate()
                                        .withDefaultSystemPrompt(prompt.isEmpty() ? null : prompt))
                .orElseGet(preset::chatTemplate);
    }

    /**
     * {@link StokerOptions#MAX_SEQ_LEN}, or the preset's {@code max_position_embeddings}.
     *
     * @throws IllegalArgumentException when the value is below 1
     */
    static int maxSeqLen(Configuration conf) {
        return positive(conf, StokerOptions.MAX_SEQ_LEN, preset(conf).maxPositionEmbeddings());
    }

    private static int positive(Configuration conf, ConfigOption<Integer> option, int preset) {
        int value = conf.getOptional(option).orElse(preset);
        if (value < 1) {
            throw new IllegalArgumentException(option.key() + " must be at least 1, got " + value);
        }
        return value;
    }

    private static double[] channels(
            Configuration conf, ConfigOption<List<Double>> option, double[] preset) {
        List<Double> values = conf.getOptional(option).orElse(null);
        if (values == null) {
            return preset;
        }
        if (values.size() != 3) {
            throw new IllegalArgumentException(
                    option.key() + " needs 3 values (R;G;B), got " + values);
        }
        return values.stream().mapToDouble(Double::doubleValue).toArray();
    }
}
