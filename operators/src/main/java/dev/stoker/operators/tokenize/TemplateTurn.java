package dev.stoker.operators.tokenize;

import java.util.List;

/**
 * One rendered turn of the Qwen2-VL chat template, from its {@code <|im_start|>} to the newline
 * after its {@code <|im_end|>}: text segments (chat markup included) and image blocks, in order.
 *
 * @param role {@code system}, {@code user} or {@code assistant}
 * @param segments text and image-block segments; concatenated they form the turn
 * @param trained whether the turn's tokens are labels; in a trained (assistant) turn the first
 *     {@link QwenChatTemplate#ASSISTANT_HEADER_TOKENS} tokens are still masked with -100
 */
public record TemplateTurn(String role, List<Segment> segments, boolean trained) {

    /**
     * A piece of a turn: either text to be encoded by the tokenizer ({@code imagePads == 0}) or an
     * image block {@code <|vision_start|>} + {@code imagePads} x {@code <|image_pad|>} + {@code
     * <|vision_end|>} ({@code text == null}).
     */
    public record Segment(String text, int imagePads) {
        public static Segment text(String text) {
            return new Segment(text, 0);
        }

        public static Segment image(int imagePads) {
            return new Segment(null, imagePads);
        }

        public boolean isImage() {
            return text == null;
        }
    }
}
