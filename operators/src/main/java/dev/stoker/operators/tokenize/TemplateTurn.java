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

    /** A piece of a turn: {@link Special}, {@link Text}, {@link Image} or {@link Video}. */
    public sealed interface Segment permits Special, Text, Image, Video {}

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

    /**
     * A video block, emitted as ids (the timestamps as text): without timestamps (Qwen2-VL,
     * Qwen2.5-VL) {@code <|vision_start|>} + {@code gridT * padsPerTemporalPatch} x {@code
     * <|video_pad|>} + {@code <|vision_end|>}; with one timestamp per temporal patch (Qwen3-VL)
     * {@code <|vision_start|>}, then per temporal patch its timestamp text (e.g. {@code <0.2
     * seconds>}) + {@code <|vision_start|>} + {@code padsPerTemporalPatch} x {@code <|video_pad|>}
     * + {@code <|vision_end|>}, then {@code <|vision_end|>} (the chat template's own pair around
     * what {@code Qwen3VLProcessor.replace_video_token} puts in place of its {@code
     * <|video_pad|>}).
     *
     * @param videoIndex the video's index in {@code SftRecord#videos}
     * @param gridT temporal patches of the video ({@code video_grid_thw[0]}), at least 1
     * @param padsPerTemporalPatch {@code <|video_pad|>} tokens per temporal patch ({@code grid_h *
     *     grid_w / merge_size^2}), at least 1
     * @param timestamps empty, or one text per temporal patch
     * @throws IllegalArgumentException when the timestamps are neither none nor one per temporal
     *     patch
     */
    public record Video(
            int videoIndex, int gridT, int padsPerTemporalPatch, List<String> timestamps)
            implements Segment {
        public Video {
            timestamps = List.copyOf(timestamps);
            if (!timestamps.isEmpty() && timestamps.size() != gridT) {
                throw new IllegalArgumentException(
                        timestamps.size() + " timestamps for " + gridT + " temporal patches");
            }
        }
    }
}
