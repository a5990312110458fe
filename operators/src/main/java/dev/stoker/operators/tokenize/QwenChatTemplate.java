package dev.stoker.operators.tokenize;

import dev.stoker.operators.model.ChatMessage;
import dev.stoker.operators.model.ContentPart;
import dev.stoker.operators.model.SftRecord;
import java.io.Serializable;
import java.math.BigDecimal;
import java.math.RoundingMode;
import java.util.ArrayList;
import java.util.List;

/**
 * Renders an {@link SftRecord} as the Hugging Face Qwen-VL {@code chat_template}s do for the
 * conversations Stoker accepts (optional leading system turn, then user/assistant turns; images
 * only in user turns):
 *
 * <pre>
 * [if the first message is not system and a default system prompt is set]
 *     &lt;|im_start|&gt;system\n{default system prompt}&lt;|im_end|&gt;\n
 * for each message: &lt;|im_start|&gt;{role}\n{content}&lt;|im_end|&gt;\n
 * </pre>
 *
 * <p>Qwen2-VL and Qwen2.5-VL ({@code chat_template.json} of Qwen/Qwen2-VL-7B-Instruct and
 * Qwen/Qwen2.5-VL-7B-Instruct, the same text) insert the default system prompt {@value
 * #DEFAULT_SYSTEM_PROMPT}; Qwen3-VL (Qwen/Qwen3-VL-8B-Instruct) inserts none and otherwise renders
 * these conversations identically (system and assistant content lists contribute their text parts
 * only, which is all the parser lets through). Checked against the templates rendered by
 * transformers 5.23.0 {@code ProcessorMixin.apply_chat_template} in {@code
 * scripts/golden/make_golden.py}.
 *
 * <p>where content concatenates the message's parts without separators and each image part becomes
 * {@code <|vision_start|>} + N x {@code <|image_pad|>} + {@code <|vision_end|>} in place, N being
 * {@code grid_t*grid_h*grid_w / merge_size^2} of that image (Qwen2VLProcessor's expansion). Each
 * video part becomes its {@link TemplateTurn.Video} block in place: the template's {@code
 * <|vision_start|><|video_pad|><|vision_end|>} with the {@code <|video_pad|>} expanded as the
 * model's processor of transformers 5.23.0 expands it ({@code replace_video_token} of {@code
 * Qwen2VLProcessor} and {@code Qwen2_5_VLProcessor}: {@code grid_t*grid_h*grid_w / merge_size^2}
 * pads; of {@code Qwen3VLProcessor}: per temporal patch {@code <{t:.1f} seconds>} + {@code
 * <|vision_start|>} + {@code grid_h*grid_w / merge_size^2} pads + {@code <|vision_end|>}, nested
 * inside the template's pair). No generation prompt is added.
 *
 * <p>Label masking follows the official Qwen2.5-VL fine-tuning code (QwenLM/Qwen2.5-VL, {@code
 * qwen-vl-finetune/qwenvl/data/data_qwen.py}, {@code preprocess_qwen_2_visual}): each turn is
 * tokenized on its own; system and user turns are entirely -100; in an assistant turn the first
 * {@value #ASSISTANT_HEADER_TOKENS} tokens ({@code <|im_start|>}, {@code assistant}, {@code \n})
 * are -100 and the rest (content, {@code <|im_end|>}, {@code \n}) are labels. Turns start with the
 * special token {@code <|im_start|>}, so tokenizing per turn gives the same ids as tokenizing the
 * whole text.
 *
 * <p>Special tokens come only from the template's structure. The rendering is not a string: each
 * turn is a list of {@link TemplateTurn.Segment}s, where {@code <|im_start|>} and {@code
 * <|im_end|>} are {@link TemplateTurn.Special} ids, image blocks are {@link TemplateTurn.Image}s
 * (ids, one per real image) and everything else, the message text included, is {@link
 * TemplateTurn.Text} that {@link ChatTokenizer#encodeText} encodes with special-token matching off
 * (Hugging Face's {@code split_special_tokens=True}). A message text holding {@code <|im_end|>},
 * {@code <|endoftext|>} or {@code <|image_pad|>} therefore becomes the ids of that text, not a
 * control token. For text without special-token strings the ids are those of the Hugging Face
 * processor, which tokenizes the rendered string: its tokenizer splits the string at the special
 * tokens first and encodes each piece between them on its own, and the text segments are exactly
 * these pieces ({@code docs/parity.md}, "Special tokens").
 */
public final class QwenChatTemplate implements Serializable {
    private static final long serialVersionUID = 1L;

    public static final String DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant.";

    /** Frames per second {@code Qwen3VLProcessor} assumes for a video whose rate is unknown. */
    static final double UNKNOWN_VIDEO_FPS = 24;

    /**
     * Tokens of an assistant turn's header ({@code <|im_start|>assistant\n}) that are not trained.
     */
    public static final int ASSISTANT_HEADER_TOKENS = 3;

    /** The system prompt inserted before a conversation without one, or {@code null} for none. */
    private final String defaultSystemPrompt;

    /** Whether each temporal patch of a video gets its timestamp text (Qwen3-VL). */
    private final boolean videoTimestamps;

    /**
     * The Qwen2-VL / Qwen2.5-VL template (default system prompt {@value #DEFAULT_SYSTEM_PROMPT}).
     */
    public QwenChatTemplate() {
        this(DEFAULT_SYSTEM_PROMPT);
    }

    /**
     * A template without video timestamps (Qwen2-VL, Qwen2.5-VL).
     *
     * @param defaultSystemPrompt the system prompt inserted when the first message is not a system
     *     message; {@code null} inserts none (Qwen3-VL)
     */
    public QwenChatTemplate(String defaultSystemPrompt) {
        this(defaultSystemPrompt, false);
    }

    /**
     * @param defaultSystemPrompt the system prompt inserted when the first message is not a system
     *     message; {@code null} inserts none (Qwen3-VL)
     * @param videoTimestamps whether a video's block holds a timestamp per temporal patch ({@code
     *     Qwen3VLProcessor.replace_video_token}, Qwen3-VL) or only its pads (Qwen2-VL, Qwen2.5-VL)
     */
    public QwenChatTemplate(String defaultSystemPrompt, boolean videoTimestamps) {
        this.defaultSystemPrompt = defaultSystemPrompt;
        this.videoTimestamps = videoTimestamps;
    }

    /** This template with another default system prompt ({@code null} for none). */
    public QwenChatTemplate withDefaultSystemPrompt(String prompt) {
        return new QwenChatTemplate(prompt, videoTimestamps);
    }

    /** The inserted default system prompt, or {@code null} when none is inserted. */
    public String defaultSystemPrompt() {
        return defaultSystemPrompt;
    }

    /** Whether video blocks hold a timestamp per temporal patch (Qwen3-VL). */
    public boolean videoTimestamps() {
        return videoTimestamps;
    }

    /**
     * The video block of a video with this template's layout.
     *
     * @param videoIndex the video's index in {@link SftRecord#videos}
     * @param gridT temporal patches ({@code video_grid_thw[0]})
     * @param gridH patch rows
     * @param gridW patch columns
     * @param mergeSize the vision merge size
     * @param frameIndices the sampled frames' indices in the stream (Qwen3-VL's timestamps)
     * @param videoFps the container's frame rate (frames per second); not positive means unknown,
     *     24 as {@code Qwen3VLProcessor.replace_video_token} assumes then
     * @param temporalPatchSize frames per temporal patch
     * @throws IllegalArgumentException when {@code gridH * gridW} is not a positive multiple of
     *     {@code mergeSize^2}, {@code gridT} is below 1, or (with timestamps) the frame indices do
     *     not give {@code gridT} temporal patches
     */
    public TemplateTurn.Video videoBlock(
            int videoIndex,
            int gridT,
            int gridH,
            int gridW,
            int mergeSize,
            int[] frameIndices,
            double videoFps,
            int temporalPatchSize) {
        if (gridT < 1) {
            throw new IllegalArgumentException("video grid_t must be positive, got " + gridT);
        }
        int pads = imagePadCount(1, gridH, gridW, mergeSize);
        List<String> timestamps = new ArrayList<>();
        if (videoTimestamps) {
            double fps = videoFps > 0 && Double.isFinite(videoFps) ? videoFps : UNKNOWN_VIDEO_FPS;
            for (double t : timestamps(frameIndices, fps, temporalPatchSize)) {
                timestamps.add(timestampText(t));
            }
            if (timestamps.size() != gridT) {
                throw new IllegalArgumentException(
                        frameIndices.length
                                + " frame indices give "
                                + timestamps.size()
                                + " temporal patches, but grid_t is "
                                + gridT);
            }
        }
        return new TemplateTurn.Video(videoIndex, gridT, pads, timestamps);
    }

    /**
     * The seconds of each temporal patch, as transformers 5.23.0 {@code
     * Qwen3VLProcessor._calculate_timestamps(indices, video_fps, merge_size)} computes them: the
     * indices padded to a multiple of {@code temporalPatchSize} by repeating the last, each {@code
     * index / videoFps}, then per temporal patch the mean of its first and last frame's time.
     *
     * @param frameIndices frame indices, at least one
     * @param videoFps frames per second, positive
     * @param temporalPatchSize frames per temporal patch, at least 1
     * @return one value in seconds per temporal patch
     */
    static double[] timestamps(int[] frameIndices, double videoFps, int temporalPatchSize) {
        if (frameIndices.length == 0) {
            throw new IllegalArgumentException("a video has no frame indices");
        }
        int patches = (frameIndices.length + temporalPatchSize - 1) / temporalPatchSize;
        double[] out = new double[patches];
        for (int p = 0; p < patches; p++) {
            int first = frameIndices[p * temporalPatchSize];
            int last =
                    frameIndices[
                            Math.min((p + 1) * temporalPatchSize - 1, frameIndices.length - 1)];
            out[p] = (first / videoFps + last / videoFps) / 2;
        }
        return out;
    }

    /**
     * Python's {@code f"<{seconds:.1f} seconds>"}: the exact binary value rounded half to even to
     * one decimal (so 0.25 gives {@code <0.2 seconds>}).
     */
    static String timestampText(double seconds) {
        return "<"
                + new BigDecimal(seconds).setScale(1, RoundingMode.HALF_EVEN).toPlainString()
                + " seconds>";
    }

    /**
     * Renders the record.
     *
     * @param imagePads number of {@code <|image_pad|>} tokens per image, indexed like {@link
     *     SftRecord#images}
     * @param videos the block of each video ({@link #videoBlock}), indexed like {@link
     *     SftRecord#videos}
     * @throws IllegalArgumentException when an image or video part refers to an image or video
     *     without a pad count or block
     */
    public List<TemplateTurn> render(
            SftRecord record, int[] imagePads, List<TemplateTurn.Video> videos) {
        List<TemplateTurn> turns = new ArrayList<>();
        if (defaultSystemPrompt != null
                && (record.messages.length == 0
                        || !ChatMessage.SYSTEM.equals(record.messages[0].role))) {
            turns.add(
                    new TemplateTurn(
                            ChatMessage.SYSTEM,
                            List.of(
                                    new TemplateTurn.Special(ChatTokenizer.IM_START),
                                    new TemplateTurn.Text(
                                            ChatMessage.SYSTEM + "\n" + defaultSystemPrompt),
                                    new TemplateTurn.Special(ChatTokenizer.IM_END),
                                    new TemplateTurn.Text("\n")),
                            false));
        }
        for (ChatMessage message : record.messages) {
            turns.add(renderTurn(message, imagePads, videos));
        }
        return turns;
    }

    /** Number of {@code <|image_pad|>} tokens for an image grid: {@code t*h*w / mergeSize^2}. */
    public static int imagePadCount(int gridT, int gridH, int gridW, int mergeSize) {
        long patches = (long) gridT * gridH * gridW;
        long mergeArea = (long) mergeSize * mergeSize;
        if (patches <= 0 || patches % mergeArea != 0) {
            throw new IllegalArgumentException(
                    "image grid ("
                            + gridT
                            + ", "
                            + gridH
                            + ", "
                            + gridW
                            + ") is not a positive multiple of merge_size^2 = "
                            + mergeArea);
        }
        return Math.toIntExact(patches / mergeArea);
    }

    private static TemplateTurn renderTurn(
            ChatMessage message, int[] imagePads, List<TemplateTurn.Video> videos) {
        List<TemplateTurn.Segment> segments = new ArrayList<>();
        segments.add(new TemplateTurn.Special(ChatTokenizer.IM_START));
        StringBuilder text = new StringBuilder(message.role).append('\n');
        for (ContentPart part : message.content) {
            if (part.isImage()) {
                if (part.imageIndex < 0 || part.imageIndex >= imagePads.length) {
                    throw new IllegalArgumentException(
                            "image part refers to image "
                                    + part.imageIndex
                                    + " but "
                                    + imagePads.length
                                    + " images are available");
                }
                if (text.length() > 0) {
                    segments.add(new TemplateTurn.Text(text.toString()));
                }
                segments.add(new TemplateTurn.Image(part.imageIndex, imagePads[part.imageIndex]));
                text.setLength(0);
            } else if (part.isVideo()) {
                if (part.videoIndex < 0 || part.videoIndex >= videos.size()) {
                    throw new IllegalArgumentException(
                            "video part refers to video "
                                    + part.videoIndex
                                    + " but "
                                    + videos.size()
                                    + " videos are available");
                }
                if (text.length() > 0) {
                    segments.add(new TemplateTurn.Text(text.toString()));
                }
                segments.add(videos.get(part.videoIndex));
                text.setLength(0);
            } else {
                text.append(part.text);
            }
        }
        if (text.length() > 0) {
            segments.add(new TemplateTurn.Text(text.toString()));
        }
        segments.add(new TemplateTurn.Special(ChatTokenizer.IM_END));
        segments.add(new TemplateTurn.Text("\n"));
        return new TemplateTurn(message.role, segments, ChatMessage.ASSISTANT.equals(message.role));
    }
}
