package dev.stoker.operators.tokenize;

import dev.stoker.operators.model.ChatMessage;
import dev.stoker.operators.model.ContentPart;
import dev.stoker.operators.model.SftRecord;
import java.io.Serializable;
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
 * {@code grid_t*grid_h*grid_w / merge_size^2} of that image (Qwen2VLProcessor's expansion). No
 * generation prompt is added.
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

    /**
     * Tokens of an assistant turn's header ({@code <|im_start|>assistant\n}) that are not trained.
     */
    public static final int ASSISTANT_HEADER_TOKENS = 3;

    /** The system prompt inserted before a conversation without one, or {@code null} for none. */
    private final String defaultSystemPrompt;

    /**
     * The Qwen2-VL / Qwen2.5-VL template (default system prompt {@value #DEFAULT_SYSTEM_PROMPT}).
     */
    public QwenChatTemplate() {
        this(DEFAULT_SYSTEM_PROMPT);
    }

    /**
     * @param defaultSystemPrompt the system prompt inserted when the first message is not a system
     *     message; {@code null} inserts none (Qwen3-VL)
     */
    public QwenChatTemplate(String defaultSystemPrompt) {
        this.defaultSystemPrompt = defaultSystemPrompt;
    }

    /** The inserted default system prompt, or {@code null} when none is inserted. */
    public String defaultSystemPrompt() {
        return defaultSystemPrompt;
    }

    /**
     * Renders the record.
     *
     * @param imagePads number of {@code <|image_pad|>} tokens per image, indexed like {@link
     *     SftRecord#images}
     * @throws IllegalArgumentException when an image part refers to an image without a pad count
     */
    public List<TemplateTurn> render(SftRecord record, int[] imagePads) {
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
            turns.add(renderTurn(message, imagePads));
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

    private static TemplateTurn renderTurn(ChatMessage message, int[] imagePads) {
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
