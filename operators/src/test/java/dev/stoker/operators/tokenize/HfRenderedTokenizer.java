package dev.stoker.operators.tokenize;

import ai.djl.huggingface.tokenizers.HuggingFaceTokenizer;
import java.io.IOException;
import java.util.Map;

/**
 * The reference for text without special-token strings: the unmodified {@code tokenizer.json}
 * through the DJL binding, encoding a whole rendered chat string with special tokens recognised, as
 * the Hugging Face processor does ({@code tokenizer(rendered, add_special_tokens=False)}).
 */
final class HfRenderedTokenizer implements AutoCloseable {
    private final HuggingFaceTokenizer tokenizer;

    HfRenderedTokenizer() throws IOException {
        tokenizer =
                HuggingFaceTokenizer.newInstance(
                        ChatTokenizerTest.tokenizerDir().resolve("tokenizer.json"),
                        Map.of(
                                "addSpecialTokens", "false",
                                "truncation", "false",
                                "padding", "false",
                                "modelMaxLength", String.valueOf(Integer.MAX_VALUE)));
    }

    long[] encode(String rendered) {
        return tokenizer.encode(rendered, false, false).getIds();
    }

    @Override
    public void close() {
        tokenizer.close();
    }
}
