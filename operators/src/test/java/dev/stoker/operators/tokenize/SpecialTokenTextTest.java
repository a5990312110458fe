package dev.stoker.operators.tokenize;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.operators.model.ChatMessage;
import dev.stoker.operators.model.JsonlLine;
import dev.stoker.operators.model.PreprocessedImage;
import dev.stoker.operators.model.PreprocessedRecord;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.parse.RecordFormat;
import dev.stoker.operators.parse.SftRecordParser;
import dev.stoker.operators.preset.ModelPreset;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.LongStream;
import java.util.stream.StreamSupport;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * Message text holding special-token strings ({@code tokenize/special-token-text.jsonl}: a spliced
 * fake turn, {@code <|endoftext|>} inside and as an answer, vision-token strings next to a real
 * image, special strings adjacent to the template's own tokens and images, the box tokens, Qwen3's
 * non-special {@code <think>}/{@code <tool_call>}, and an ordinary record), through the parser and
 * {@link SampleTokenizer} for every preset:
 *
 * <ul>
 *   <li>{@code input_ids} and {@code labels} equal {@code special-token-text.golden.jsonl}, made by
 *       {@code scripts/golden/make_special_text_golden.py} with the Hugging Face {@code tokenizers}
 *       package ({@code encode_special_tokens = True}, i.e. {@code split_special_tokens=True}) for
 *       the text between the template's special tokens;
 *   <li>exactly one {@code <|im_start|>} and one {@code <|im_end|>} per real message plus the
 *       inserted default system turn, every {@code <|im_end|>} followed by {@code \n} and the next
 *       turn's {@code <|im_start|>} or the end, so none lies inside a message body; no {@code
 *       <|endoftext|>} at all;
 *   <li>{@code <|vision_start|>} / {@code <|vision_end|>} once per real image and {@code
 *       <|image_pad|>} exactly the real images' tokens (6 per 1x4x6 grid).
 * </ul>
 */
class SpecialTokenTextTest {
    private static final int PADS_PER_IMAGE = 6;
    private static ChatTokenizer tokenizer;
    private static final Map<String, JsonNode> GOLDEN = new HashMap<>();
    private static final List<String> LINES = new ArrayList<>();

    @BeforeAll
    static void load() throws Exception {
        tokenizer = ChatTokenizer.open(ChatTokenizerTest.tokenizerDir());
        ObjectMapper mapper = new ObjectMapper();
        for (String line : resource("special-token-text.golden.jsonl")) {
            JsonNode row = mapper.readTree(line);
            GOLDEN.put(row.get("id").asText() + "/" + row.get("preset").asText(), row);
        }
        LINES.addAll(resource("special-token-text.jsonl"));
    }

    @AfterAll
    static void close() {
        tokenizer.close();
    }

    @ParameterizedTest
    @EnumSource(ModelPreset.class)
    void textIsTextAndOnlyTheTemplateMakesSpecialTokens(ModelPreset preset) throws Exception {
        SampleTokenizer samples =
                new SampleTokenizer(
                        tokenizer,
                        preset.chatTemplate(),
                        2,
                        preset.maxPositionEmbeddings(),
                        SequenceLengthPolicy.DROP);
        assertThat(LINES).hasSize(9);
        for (int i = 0; i < LINES.size(); i++) {
            byte[] bytes = LINES.get(i).getBytes(StandardCharsets.UTF_8);
            SftRecord record =
                    new SftRecordParser()
                            .parse(
                                    new JsonlLine(
                                            new RecordRef("special.jsonl", i + 1, i, null),
                                            bytes,
                                            bytes.length),
                                    RecordFormat.AUTO);
            PreprocessedImage[] images = new PreprocessedImage[record.images.length];
            for (int k = 0; k < images.length; k++) {
                images[k] = QwenChatTemplateTest.image(1, 4, 6, 3);
            }
            TokenizedSample sample = samples.tokenize(new PreprocessedRecord(record, images));
            String id = record.ref.recordId;
            JsonNode golden = GOLDEN.get(id + "/" + preset.key());
            assertThat(golden).as("golden row of %s/%s", id, preset.key()).isNotNull();
            assertThat(sample.inputIds)
                    .as("input_ids of %s", id)
                    .containsExactly(longs(golden.get("input_ids")));
            assertThat(sample.labels)
                    .as("labels of %s", id)
                    .containsExactly(longs(golden.get("labels")));

            boolean insertedSystem =
                    preset.defaultSystemPrompt() != null
                            && !ChatMessage.SYSTEM.equals(record.messages[0].role);
            long turns = record.messages.length + (insertedSystem ? 1 : 0);
            long[] ids = sample.inputIds;
            assertThat(count(ids, ChatTokenizer.IM_START))
                    .as("<|im_start|> in %s", id)
                    .isEqualTo(turns);
            assertThat(count(ids, ChatTokenizer.IM_END))
                    .as("<|im_end|> in %s", id)
                    .isEqualTo(turns);
            assertThat(count(ids, ChatTokenizer.ENDOFTEXT)).as("<|endoftext|> in %s", id).isZero();
            for (int p = 0; p < ids.length; p++) {
                if (ids[p] == ChatTokenizer.IM_END) {
                    assertThat(ids[p + 1])
                            .as("newline after <|im_end|> at %d in %s", p, id)
                            .isEqualTo(198);
                    assertThat(p + 2 == ids.length || ids[p + 2] == ChatTokenizer.IM_START)
                            .as("<|im_end|> at %d in %s ends a turn", p, id)
                            .isTrue();
                }
            }
            assertThat(count(ids, ChatTokenizer.VISION_START)).isEqualTo(images.length);
            assertThat(count(ids, ChatTokenizer.VISION_END)).isEqualTo(images.length);
            assertThat(count(ids, ChatTokenizer.IMAGE_PAD))
                    .as("<|image_pad|> in %s", id)
                    .isEqualTo((long) PADS_PER_IMAGE * images.length);
            assertThat(sample.numImages()).isEqualTo(images.length);
        }
    }

    private static long count(long[] ids, long id) {
        return LongStream.of(ids).filter(v -> v == id).count();
    }

    private static long[] longs(JsonNode array) {
        return StreamSupport.stream(array.spliterator(), false)
                .mapToLong(JsonNode::longValue)
                .toArray();
    }

    private static List<String> resource(String name) throws IOException {
        try (InputStream in = SpecialTokenTextTest.class.getResourceAsStream("/tokenize/" + name)) {
            if (in == null) {
                throw new IllegalStateException(
                        "tokenize/"
                                + name
                                + " is missing; regenerate the golden with .venv/bin/python"
                                + " scripts/golden/make_special_text_golden.py");
            }
            return new String(in.readAllBytes(), StandardCharsets.UTF_8).lines().toList();
        }
    }
}
