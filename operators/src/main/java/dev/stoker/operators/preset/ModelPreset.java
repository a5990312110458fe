package dev.stoker.operators.preset;

import dev.stoker.operators.image.QwenVisionConfig;
import dev.stoker.operators.pack.MropePositions.VideoTime;
import dev.stoker.operators.tokenize.QwenChatTemplate;
import dev.stoker.operators.video.QwenVideoConfig;
import dev.stoker.operators.video.QwenVideoConfig.PixelBudget;
import dev.stoker.operators.video.VideoPreprocessor.FrameRule;
import java.util.Arrays;
import java.util.Locale;
import java.util.stream.Collectors;

/**
 * The preprocessing of one Qwen-VL model family as its Hugging Face processor config defines it:
 * the image processor values of the model's {@code preprocessor_config.json}, the chat-template
 * details of its {@code chat_template.json} and the {@code max_position_embeddings} of its {@code
 * config.json}.
 *
 * <table>
 *   <caption>Values and their source (Hugging Face hub, files as published with the models)</caption>
 *   <tr><th>preset</th><th>patch / temporal / merge</th><th>min / max pixels</th>
 *       <th>image_mean / image_std</th><th>default system prompt</th>
 *       <th>max_position_embeddings</th><th>source</th></tr>
 *   <tr><td>{@code qwen2-vl}</td><td>14 / 2 / 2</td><td>3136 / 12845056</td><td>CLIP</td>
 *       <td>"You are a helpful assistant."</td><td>32768</td><td>Qwen/Qwen2-VL-7B-Instruct</td></tr>
 *   <tr><td>{@code qwen2.5-vl}</td><td>14 / 2 / 2</td><td>3136 / 12845056</td><td>CLIP</td>
 *       <td>"You are a helpful assistant."</td><td>128000</td><td>Qwen/Qwen2.5-VL-7B-Instruct</td></tr>
 *   <tr><td>{@code qwen3-vl}</td><td>16 / 2 / 2</td><td>65536 / 16777216 ({@code size.shortest_edge
 *       / longest_edge})</td><td>0.5 / 0.5</td><td>none</td><td>262144 ({@code text_config})</td>
 *       <td>Qwen/Qwen3-VL-8B-Instruct</td></tr>
 * </table>
 *
 * <p>CLIP mean/std are {@code (0.48145466, 0.4578275, 0.40821073)} / {@code (0.26862954,
 * 0.26130258, 0.27577711)}, per RGB channel on the 0..1 scale. All three use {@code
 * Qwen2VLImageProcessor(Fast)} (bicubic resize, rescale 1/255, normalise, convert to RGB) and the
 * {@code <|vision_start|><|image_pad|>...<|vision_end|>} image block. The resize factor is {@code
 * patch_size * merge_size}: 28, 28 and 32. Checked against transformers 5.23.0 by {@code
 * scripts/golden/make_golden.py}; see {@code docs/parity.md}.
 *
 * <p>Video ({@link #videoConfig()}): the model's Hugging Face video processor class, with patch
 * size and mean/std as for images, temporal patch 2, merge 2, and:
 *
 * <table>
 *   <caption>Video processor values and their source (transformers 5.23.0 classes; pixel bounds
 *   from the checkpoint)</caption>
 *   <tr><th>preset</th><th>class</th><th>min / max pixels</th><th>budget</th>
 *       <th>min / max frames, fps</th><th>max_video_tokens</th><th>second_per_grid_ts</th></tr>
 *   <tr><td>{@code qwen2-vl}</td><td>{@code Qwen2VLVideoProcessor}</td><td>3136 / 12845056 (the
 *       checkpoint has no {@code video_preprocessor_config.json}; transformers falls back to its
 *       {@code preprocessor_config.json}: {@code min_pixels} / {@code max_pixels})</td>
 *       <td>per frame</td><td>4 / 768, none</td><td>128000</td><td>no</td></tr>
 *   <tr><td>{@code qwen2.5-vl}</td><td>{@code Qwen2VLVideoProcessor}</td><td>3136 / 12845056 (as
 *       above)</td><td>per frame</td><td>4 / 768, none</td><td>128000</td><td>yes ({@code
 *       Qwen2_5_VLProcessor})</td></tr>
 *   <tr><td>{@code qwen3-vl}</td><td>{@code Qwen3VLVideoProcessor}</td><td>4096 / 25165824
 *       ({@code video_preprocessor_config.json} of Qwen/Qwen3-VL-8B-Instruct: {@code
 *       size.shortest_edge / longest_edge})</td><td>whole video</td><td>4 / 768, 2</td>
 *       <td>768</td><td>no</td></tr>
 * </table>
 *
 * <p>{@code cap_pixels_per_frame} is off for all three (unset means {@code False} in transformers
 * 5.23.0).
 */
public enum ModelPreset {
    QWEN2_VL(
            "qwen2-vl",
            14,
            3136,
            12_845_056,
            Norm.CLIP,
            QwenChatTemplate.DEFAULT_SYSTEM_PROMPT,
            32_768,
            new Video(3136, 12_845_056, PixelBudget.PER_FRAME, 128_000, 0, false)),
    QWEN2_5_VL(
            "qwen2.5-vl",
            14,
            3136,
            12_845_056,
            Norm.CLIP,
            QwenChatTemplate.DEFAULT_SYSTEM_PROMPT,
            128_000,
            new Video(3136, 12_845_056, PixelBudget.PER_FRAME, 128_000, 0, true)),
    QWEN3_VL(
            "qwen3-vl",
            16,
            65_536,
            16_777_216,
            Norm.HALF,
            null,
            262_144,
            new Video(4096, 25_165_824, PixelBudget.WHOLE_VIDEO, 768, 2, false));

    /**
     * Frames per second sampled when neither the job nor the video sets a rate and the model's
     * video processor class has no default of its own (Qwen2-VL, Qwen2.5-VL): qwen-vl-utils' {@code
     * FPS} ({@code vision_process.py}), the same as Qwen3-VL's processor default.
     */
    public static final double QWEN_VL_UTILS_FPS = 2.0;

    /** The preset of the {@code stoker.model.preset} default. */
    public static final ModelPreset DEFAULT = QWEN2_VL;

    private final String key;
    private final int patchSize;
    private final long minPixels;
    private final long maxPixels;
    private final Norm norm;
    private final String defaultSystemPrompt;
    private final int maxPositionEmbeddings;
    private final Video video;

    ModelPreset(
            String key,
            int patchSize,
            long minPixels,
            long maxPixels,
            Norm norm,
            String defaultSystemPrompt,
            int maxPositionEmbeddings,
            Video video) {
        this.key = key;
        this.patchSize = patchSize;
        this.minPixels = minPixels;
        this.maxPixels = maxPixels;
        this.norm = norm;
        this.defaultSystemPrompt = defaultSystemPrompt;
        this.maxPositionEmbeddings = maxPositionEmbeddings;
        this.video = video;
    }

    /** The option value naming this preset, e.g. {@code qwen2.5-vl}. */
    public String key() {
        return key;
    }

    /**
     * The preset named {@code key} (case-insensitive).
     *
     * @throws IllegalArgumentException naming the valid keys when {@code key} is none of them
     */
    public static ModelPreset fromKey(String key) {
        for (ModelPreset preset : values()) {
            if (preset.key.equalsIgnoreCase(key.trim())) {
                return preset;
            }
        }
        throw new IllegalArgumentException(
                "unknown model preset '" + key + "'; expected one of " + keys());
    }

    /** The valid keys, comma separated, e.g. for option descriptions. */
    public static String keys() {
        return Arrays.stream(values()).map(ModelPreset::key).collect(Collectors.joining(", "));
    }

    /**
     * A new vision config with this preset's values (temporal patch size 2, merge size 2 for all
     * three); the caller may override any field.
     */
    public QwenVisionConfig visionConfig() {
        QwenVisionConfig config = new QwenVisionConfig();
        config.patchSize = patchSize;
        config.temporalPatchSize = 2;
        config.mergeSize = 2;
        config.minPixels = minPixels;
        config.maxPixels = maxPixels;
        config.imageMean = norm.mean.clone();
        config.imageStd = norm.std.clone();
        return config;
    }

    /**
     * A new video config with this preset's video processor values (see the class comment); the
     * caller may override any field.
     */
    public QwenVideoConfig videoConfig() {
        QwenVideoConfig config = new QwenVideoConfig();
        config.patchSize = patchSize;
        config.temporalPatchSize = 2;
        config.mergeSize = 2;
        config.minPixels = video.minPixels;
        config.maxPixels = video.maxPixels;
        config.imageMean = norm.mean.clone();
        config.imageStd = norm.std.clone();
        config.budget = video.budget;
        config.capPixelsPerFrame = false;
        config.maxVideoTokens = video.maxVideoTokens;
        config.minFrames = 4;
        config.maxFrames = 768;
        config.fps = video.fps;
        config.secondPerGridTs = video.secondPerGridTs;
        return config;
    }

    /**
     * Frames per second the model's videos are sampled at by default: its video processor's {@code
     * fps} ({@link QwenVideoConfig#fps}), or {@link #QWEN_VL_UTILS_FPS} where the class has none.
     */
    public double videoFps() {
        return video.fps > 0 ? video.fps : QWEN_VL_UTILS_FPS;
    }

    /** The frame-index rule of the model's video processor. */
    public FrameRule frameRule() {
        return this == QWEN3_VL ? FrameRule.QWEN3_VL : FrameRule.QWEN2_VL;
    }

    /**
     * The system prompt the model's chat template inserts when a conversation does not start with a
     * system message, or {@code null} when it inserts none (Qwen3-VL).
     */
    public String defaultSystemPrompt() {
        return defaultSystemPrompt;
    }

    /**
     * The model's {@code max_position_embeddings} (its language model's {@code config.json}): the
     * longest sequence, in tokens, its positions are configured for; the default maximum sequence
     * length of a sample.
     */
    public int maxPositionEmbeddings() {
        return maxPositionEmbeddings;
    }

    /**
     * How the model's {@code get_rope_index} places a video's temporal patches (transformers
     * 5.23.0): Qwen2-VL by patch index, Qwen2.5-VL by absolute time ({@link #tokensPerSecond}),
     * Qwen3-VL one run per timestamped temporal patch.
     */
    public VideoTime videoTime() {
        switch (this) {
            case QWEN2_5_VL:
                return VideoTime.ABSOLUTE_TIME;
            case QWEN3_VL:
                return VideoTime.TIMESTAMPED;
            default:
                return VideoTime.PATCH_INDEX;
        }
    }

    /**
     * {@code vision_config.tokens_per_second} of the model's {@code config.json}: 2 for Qwen2.5-VL
     * (Qwen/Qwen2.5-VL-7B-Instruct); the other two have none and read no such value (0 here).
     */
    public int tokensPerSecond() {
        return this == QWEN2_5_VL ? 2 : 0;
    }

    /**
     * This preset's chat template: its default system prompt, and video timestamps for Qwen3-VL
     * (whose processor writes one per temporal patch; the other two write none).
     */
    public QwenChatTemplate chatTemplate() {
        return new QwenChatTemplate(defaultSystemPrompt, this == QWEN3_VL);
    }

    @Override
    public String toString() {
        return key.toLowerCase(Locale.ROOT);
    }

    /** The video processor values that differ between the presets. */
    private record Video(
            long minPixels,
            long maxPixels,
            PixelBudget budget,
            int maxVideoTokens,
            double fps,
            boolean secondPerGridTs) {}

    /** image_mean / image_std pairs of the presets. */
    private enum Norm {
        CLIP(
                new double[] {0.48145466, 0.4578275, 0.40821073},
                new double[] {0.26862954, 0.26130258, 0.27577711}),
        HALF(new double[] {0.5, 0.5, 0.5}, new double[] {0.5, 0.5, 0.5});

        final double[] mean;
        final double[] std;

        Norm(double[] mean, double[] std) {
            this.mean = mean;
            this.std = std;
        }
    }
}
