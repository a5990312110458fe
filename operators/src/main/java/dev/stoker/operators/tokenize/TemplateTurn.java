package dev.stoker.operators.tokenize;

import java.util.List;

/**
 * One rendered turn of the Qwen-VL chat template, from its {@code <|im_start|>} to the newline
 * after its {@code <|im_end|>}, as segments in order: the template's own special tokens (as ids),
 * text (role names, newlines and the message's text) and image blocks.
 *
 * @param role {@code system}, {@code user} or {@code assistant}
 * @param segments the turn's segments; in order they form the turn
 * @param trained whether the turn's tokens are labels; in a trained (assistant) turn the first
 *     {@link QwenChatTemplate#ASSISTANT_HEADER_TOKENS} tokens are still masked with -100
 */
public record TemplateTurn(String role, List<Segment> segments, boolean trained) {

    /** A piece of a turn: {@link Special}, {@link Text} or {@link Image}. */
    public sealed interface Segment permits Special, Text, Image {}

    /**
     * A special token of the template's structure ({@code <|im_start|>}, {@code <|im_end|>}),
     * emitted as its id; the only way a chat control token enters {@code input_ids}.
     *
     * @param id the token id, e.g. {@link ChatTokenizer#IM_START}
     */
    public record Special(long id) implements Segment {}

    /**
     * Text encoded by {@link ChatTokenizer#encodeText}, with special-token strings in it encoded as
     * text. Never empty.
     *
     * @param text the text
     */
    public record Text(String text) implements Segment {
        public Text {
            if (text.isEmpty()) {
                throw new IllegalArgumentException("empty text segment");
            }
        }
    }

    /**
     * An image block {@code <|vision_start|>} + {@code pads} x {@code <|image_pad|>} + {@code
     * <|vision_end|>}, emitted as ids.
     *
     * @param imageIndex the image's index in {@code SftRecord#images}
     * @param pads number of {@code <|image_pad|>} tokens, at least 1
     */
    public record Image(int imageIndex, int pads) implements Segment {}
}
