package dev.stoker.operators.tokenize;

import static java.util.stream.Collectors.joining;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.operators.SharedData;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.LongStream;
import java.util.stream.StreamSupport;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class ChatTokenizerTest {
    private static ChatTokenizer tokenizer;

    @BeforeAll
    static void load() throws Exception {
        tokenizer = ChatTokenizer.open(tokenizerDir());
    }

    @AfterAll
    static void close() {
        tokenizer.close();
    }

    static Path tokenizerDir() {
        return SharedData.root().resolve("tokenizers").resolve("qwen3");
    }

    /**
     * The reference strings hold special tokens, recognised by the reference (transformers.js)
     * tokenizer. Hugging Face tokenizers split a string at its special tokens and encode each piece
     * between them on its own; doing that with {@link ChatTokenizer#encodeText} for the pieces must
     * give the reference ids.
     */
    @Test
    void reproducesEveryReferenceEncodingPieceByPiece() throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        List<String> lines =
                Files.readAllLines(
                        tokenizerDir().resolve("reference_encodings.jsonl"),
                        StandardCharsets.UTF_8);
        assertThat(lines).hasSize(10);
        Map<String, Long> special =
                Map.of(
                        "<|im_start|>", 151644L,
                        "<|im_end|>", 151645L,
                        "<|vision_start|>", 151652L,
                        "<|vision_end|>", 151653L,
                        "<|image_pad|>", 151655L,
                        "<|endoftext|>", 151643L);
        Pattern split =
                Pattern.compile(
                        special.keySet().stream().map(Pattern::quote).collect(joining("|")));
        for (String line : lines) {
            JsonNode ref = mapper.readTree(line);
            String text = ref.get("text").textValue();
            long[] expected =
                    StreamSupport.stream(ref.get("ids").spliterator(), false)
                            .mapToLong(JsonNode::longValue)
                            .toArray();
            LongStream.Builder ids = LongStream.builder();
            Matcher m = split.matcher(text);
            int from = 0;
            while (m.find()) {
                LongStream.of(tokenizer.encodeText(text.substring(from, m.start())))
                        .forEach(ids::add);
                ids.add(special.get(m.group()));
                from = m.end();
            }
            LongStream.of(tokenizer.encodeText(text.substring(from))).forEach(ids::add);
            assertThat(ids.build().toArray()).as(text).containsExactly(expected);
        }
    }

    @Test
    void longTextWithSpecialTokenStringsIsNotTruncatedAndHasNoSpecialIds() {
        long[] ids =
                tokenizer.encodeText(
                        "<|vision_start|>" + "<|image_pad|>".repeat(3000) + "<|vision_end|>");
        assertThat(ids).hasSizeGreaterThan(3000);
        assertThat(LongStream.of(ids).filter(id -> id >= 151643)).isEmpty();
    }

    @Test
    void longTextIsNotTruncated() {
        assertThat(tokenizer.encodeText("1".repeat(5000))).hasSize(5000);
    }

    @Test
    void padTokenIsEndOfTextButItsStringIsText() {
        assertThat(tokenizer.padTokenId()).isEqualTo(151643);
        assertThat(tokenizer.encodeText("<|endoftext|>"))
                .doesNotContain(151643L)
                .hasSizeGreaterThan(1);
    }

    /** Non-special added tokens are matched, as Hugging Face matches them with either setting. */
    @Test
    void nonSpecialAddedTokensKeepTheirIds() {
        assertThat(tokenizer.encodeText("<think>")).containsExactly(151667);
        assertThat(tokenizer.encodeText("</tool_call>")).containsExactly(151658);
    }

    @Test
    void rejectsATokenizerWithoutQwenVisionTokens(@TempDir Path dir) throws Exception {
        Files.writeString(
                dir.resolve("tokenizer.json"),
                """
                {"version": "1.0", "truncation": null, "padding": null,
                 "added_tokens": [{"id": 0, "content": "<|image_pad|>", "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": true}],
                 "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
                 "model": {"type": "WordLevel", "vocab": {"<|image_pad|>": 0, "[UNK]": 1}, "unk_token": "[UNK]"}}
                """);
        assertThatThrownBy(() -> ChatTokenizer.open(dir))
                .isInstanceOf(IllegalStateException.class)
                .hasMessageContaining("not a Qwen2-VL compatible tokenizer");
    }

    /** The seven special tokens Stoker needs, at their Qwen2-VL ids, as tokenizer.json entries. */
    static String qwenSpecialTokens() {
        String[][] tokens = {
            {"151643", "<|endoftext|>"},
            {"151644", "<|im_start|>"},
            {"151645", "<|im_end|>"},
            {"151652", "<|vision_start|>"},
            {"151653", "<|vision_end|>"},
            {"151655", "<|image_pad|>"},
            {"151656", "<|video_pad|>"}
        };
        StringBuilder json = new StringBuilder();
        for (String[] t : tokens) {
            json.append(
                    String.format(
                            "{\"id\": %s, \"content\": \"%s\", \"single_word\": false,"
                                    + " \"lstrip\": false, \"rstrip\": false, \"normalized\":"
                                    + " false, \"special\": true},",
                            t[0], t[1]));
        }
        return json.toString();
    }

    /**
     * The rewrite of tokenizer.json (special added tokens into the vocabulary) streams the file: it
     * must not depend on where added_tokens stands, must keep the non-special added tokens matched,
     * and must leave every other vocabulary entry as it was.
     */
    @Test
    void loadsATokenizerWhoseAddedTokensFollowTheModel(@TempDir Path dir) throws Exception {
        Files.writeString(
                dir.resolve("tokenizer.json"),
                """
                {"version": "1.0", "truncation": null, "padding": null,
                 "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
                 "model": {"type": "WordLevel", "vocab": {"hello": 7, "world": 8, "[UNK]": 9, "<think>": 151667},
                   "unk_token": "[UNK]"},
                 "added_tokens": [%s
                   {"id": 151667, "content": "<think>", "single_word": false, "lstrip": false,
                    "rstrip": false, "normalized": false, "special": false}]}
                """
                        .formatted(qwenSpecialTokens()));
        try (ChatTokenizer small = ChatTokenizer.open(dir)) {
            assertThat(small.encodeText("hello world")).containsExactly(7, 8);
            assertThat(small.encodeText("<think>")).containsExactly(151667);
            assertThat(small.encodeText("<|im_start|>")).doesNotContain(151644L);
        }
    }

    @Test
    void rejectsATokenizerWithoutAVocabulary(@TempDir Path dir) throws Exception {
        Files.writeString(
                dir.resolve("tokenizer.json"),
                """
                {"added_tokens": [%s {"id": 1, "content": "x", "special": false}],
                 "model": {"type": "WordLevel", "unk_token": "[UNK]"}}
                """
                        .formatted(qwenSpecialTokens()));
        assertThatThrownBy(() -> ChatTokenizer.open(dir))
                .isInstanceOf(IllegalStateException.class)
                .hasMessageContaining("has no model.vocab object");
    }
}
