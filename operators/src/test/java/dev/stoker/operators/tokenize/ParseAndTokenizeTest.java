package dev.stoker.operators.tokenize;

import static org.assertj.core.api.Assertions.assertThat;

import dev.stoker.operators.SharedData;
import dev.stoker.operators.model.JsonlLine;
import dev.stoker.operators.model.PreprocessedImage;
import dev.stoker.operators.model.PreprocessedRecord;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.parse.RecordFormat;
import dev.stoker.operators.parse.SftRecordParser;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * A real dataset record through the parser and the tokenizer, against a hand-written rendering
 * tokenized by the unmodified Hugging Face tokenizer.
 */
class ParseAndTokenizeTest {
    private static ChatTokenizer tokenizer;
    private static HfRenderedTokenizer hf;

    @BeforeAll
    static void load() throws Exception {
        tokenizer = ChatTokenizer.open(ChatTokenizerTest.tokenizerDir());
        hf = new HfRenderedTokenizer();
    }

    @AfterAll
    static void close() {
        tokenizer.close();
        hf.close();
    }

    @Test
    void shareGptRecordWithTheSameImageInTwoTurns() throws Exception {
        List<String> lines =
                Files.readAllLines(
                        SharedData.root().resolve("llamafactory-sharegpt/train.jsonl"),
                        StandardCharsets.UTF_8);
        byte[] bytes = lines.get(0).getBytes(StandardCharsets.UTF_8);
        SftRecord record =
                new SftRecordParser()
                        .parse(
                                new JsonlLine(new RecordRef("lf", 1, 0, null), bytes, bytes.length),
                                RecordFormat.AUTO);
        PreprocessedImage[] images = {
            QwenChatTemplateTest.image(1, 2, 4, 588), QwenChatTemplateTest.image(1, 2, 4, 588)
        };
        TokenizedSample sample =
                new SampleTokenizer(
                                tokenizer,
                                new QwenChatTemplate(),
                                2,
                                32768,
                                SequenceLengthPolicy.DROP)
                        .tokenize(new PreprocessedRecord(record, images));

        String image = "<|vision_start|><|image_pad|><|image_pad|><|vision_end|>";
        String expected =
                "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                        + "<|im_start|>user\n"
                        + image
                        + "Who are they?<|im_end|>\n"
                        + "<|im_start|>assistant\nThey're Kane and Gretzka from Bayern Munich.<|im_end|>\n"
                        + "<|im_start|>user\nWhat are they doing?"
                        + image
                        + "<|im_end|>\n"
                        + "<|im_start|>assistant\nThey are celebrating on the soccer field.<|im_end|>\n";
        assertThat(sample.ref.recordId).isEqualTo("lf-0001");
        assertThat(sample.inputIds).containsExactly(hf.encode(expected));
        assertThat(sample.imageGridThw).containsExactly(1, 2, 4, 1, 2, 4);
    }
}
