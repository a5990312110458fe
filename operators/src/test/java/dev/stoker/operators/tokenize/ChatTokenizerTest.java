package dev.stoker.operators.tokenize;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.operators.SharedData;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
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

    @Test
    void reproducesEveryReferenceEncoding() throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        List<String> lines =
                Files.readAllLines(
                        tokenizerDir().resolve("reference_encodings.jsonl"),
                        StandardCharsets.UTF_8);
        assertThat(lines).hasSize(10);
        for (String line : lines) {
            JsonNode ref = mapper.readTree(line);
            long[] expected =
                    StreamSupport.stream(ref.get("ids").spliterator(), false)
                            .mapToLong(JsonNode::longValue)
                            .toArray();
            assertThat(tokenizer.encode(ref.get("text").textValue()))
                    .as(ref.get("text").textValue())
                    .containsExactly(expected);
        }
    }

    @Test
    void threeThousandImagePadsAreNotTruncated() {
        long[] ids =
                tokenizer.encode(
                        "<|vision_start|>" + "<|image_pad|>".repeat(3000) + "<|vision_end|>");
        assertThat(ids).hasSize(3002);
        assertThat(ids[0]).isEqualTo(151652);
        assertThat(ids[3001]).isEqualTo(151653);
        assertThat(Arrays.stream(ids, 1, 3001).allMatch(id -> id == 151655)).isTrue();
    }

    @Test
    void longTextIsNotTruncated() {
        assertThat(tokenizer.encode("1".repeat(5000))).hasSize(5000);
    }

    @Test
    void padTokenIsEndOfText() {
        assertThat(tokenizer.padTokenId()).isEqualTo(151643);
        assertThat(tokenizer.encode("<|endoftext|>")).containsExactly(151643);
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
}
