package dev.stoker.operators.tokenize;

import ai.djl.huggingface.tokenizers.HuggingFaceTokenizer;
import java.io.IOException;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

/**
 * A Qwen tokenizer loaded from a Hugging Face {@code tokenizer.json} through the DJL binding, and
 * the encoding of rendered chat turns into {@code input_ids} and {@code labels}.
 *
 * <p>Encoding matches HF {@code tokenizer(text, add_special_tokens=False)}: no special tokens are
 * added, added tokens such as {@code <|im_start|>} are recognised in the text, and truncation is
 * off (DJL otherwise silently truncates to 512 tokens). Image blocks are appended as ids ({@code
 * 151652}, N x {@code 151655}, {@code 151653}) instead of encoding N pad strings.
 *
 * <p>Not thread-safe to close while in use; one instance per operator subtask.
 */
public final class ChatTokenizer implements AutoCloseable {
    public static final long ENDOFTEXT = 151643;
    public static final long IM_START = 151644;
    public static final long IM_END = 151645;
    public static final long VISION_START = 151652;
    public static final long VISION_END = 151653;
    public static final long IMAGE_PAD = 151655;

    /** Label value of tokens that are not trained (PyTorch's cross-entropy ignore_index). */
    public static final long IGNORE_INDEX = -100;

    private static final Map<String, Long> EXPECTED_IDS =
            Map.of(
                    "<|endoftext|>",
                    ENDOFTEXT,
                    "<|im_start|>",
                    IM_START,
                    "<|im_end|>",
                    IM_END,
                    "<|vision_start|>",
                    VISION_START,
                    "<|vision_end|>",
                    VISION_END,
                    "<|image_pad|>",
                    IMAGE_PAD);

    private final HuggingFaceTokenizer tokenizer;

    private ChatTokenizer(HuggingFaceTokenizer tokenizer) {
        this.tokenizer = tokenizer;
    }

    /**
     * Loads {@code tokenizer.json} from {@code directory} and checks the special-token ids.
     *
     * @throws IOException when the file cannot be read
     * @throws IllegalStateException when a vision or chat token does not map to its Qwen2-VL id
     */
    public static ChatTokenizer open(Path directory) throws IOException {
        HuggingFaceTokenizer tokenizer =
                HuggingFaceTokenizer.newInstance(
                        directory.resolve("tokenizer.json"),
                        Map.of(
                                "addSpecialTokens", "false",
                                "truncation", "false",
                                "padding", "false",
                                "modelMaxLength", String.valueOf(Integer.MAX_VALUE)));
        ChatTokenizer chat = new ChatTokenizer(tokenizer);
        for (Map.Entry<String, Long> token : EXPECTED_IDS.entrySet()) {
            long[] ids = chat.encode(token.getKey());
            if (ids.length != 1 || ids[0] != token.getValue()) {
                chat.close();
                throw new IllegalStateException(
                        "tokenizer in "
                                + directory
                                + " encodes "
                                + token.getKey()
                                + " as "
                                + Arrays.toString(ids)
                                + ", expected ["
                                + token.getValue()
                                + "]; not a Qwen2-VL compatible tokenizer");
            }
        }
        return chat;
    }

    /** Token ids of {@code text}, without added special tokens and without truncation. */
    public long[] encode(String text) {
        return tokenizer.encode(text, false, false).getIds();
    }

    /** The text padding token id ({@code <|endoftext|>}, 151643). */
    public long padTokenId() {
        return ENDOFTEXT;
    }

    /**
     * Encodes rendered turns into {@code input_ids} and {@code labels} of equal length; labels are
     * -100 except on trained turns after their {@link QwenChatTemplate#ASSISTANT_HEADER_TOKENS}
     * header tokens.
     */
    public Encoded encode(List<TemplateTurn> turns) {
        LongSequence ids = new LongSequence();
        LongSequence labels = new LongSequence();
        for (TemplateTurn turn : turns) {
            int start = ids.size();
            for (TemplateTurn.Segment segment : turn.segments()) {
                if (segment.isImage()) {
                    ids.add(VISION_START);
                    ids.addRepeated(IMAGE_PAD, segment.imagePads());
                    ids.add(VISION_END);
                } else {
                    ids.addAll(encode(segment.text()));
                }
            }
            int end = ids.size();
            if (turn.trained()) {
                int header = Math.min(start + QwenChatTemplate.ASSISTANT_HEADER_TOKENS, end);
                labels.addRepeated(IGNORE_INDEX, header - start);
                labels.addRange(ids, header, end);
            } else {
                labels.addRepeated(IGNORE_INDEX, end - start);
            }
        }
        return new Encoded(ids.toArray(), labels.toArray());
    }

    @Override
    public void close() {
        tokenizer.close();
    }

    /** {@code input_ids} and {@code labels} (int64, same length) of one conversation. */
    public record Encoded(long[] inputIds, long[] labels) {}
}
