package dev.stoker.operators.tokenize;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.model.ChatMessage;
import dev.stoker.operators.model.ContentPart;
import dev.stoker.operators.model.ImageRef;
import dev.stoker.operators.model.PreprocessedImage;
import dev.stoker.operators.model.PreprocessedRecord;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.TokenizedSample;
import java.util.Arrays;
import java.util.List;
import java.util.stream.LongStream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

class QwenChatTemplateTest {
    private static final String DEFAULT_SYSTEM =
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n";
    private static ChatTokenizer tokenizer;
    private static SampleTokenizer samples;

    /** Expected ids: the hand-written rendering through the unmodified Hugging Face tokenizer. */
    private static HfRenderedTokenizer hf;

    @BeforeAll
    static void load() throws Exception {
        tokenizer = ChatTokenizer.open(ChatTokenizerTest.tokenizerDir());
        samples =
                new SampleTokenizer(
                        tokenizer, new QwenChatTemplate(), 2, 32768, SequenceLengthPolicy.DROP);
        hf = new HfRenderedTokenizer();
    }

    @AfterAll
    static void close() {
        tokenizer.close();
        hf.close();
    }

    @Test
    void twoTurnsWithOneImageMatchTheHandWrittenRendering() throws Exception {
        SftRecord record =
                record(
                        new ChatMessage(
                                "user",
                                ContentPart.image(0),
                                ContentPart.text("Describe this image.")),
                        new ChatMessage("assistant", ContentPart.text("A cat.")),
                        new ChatMessage("user", ContentPart.text("And the colour?")),
                        new ChatMessage("assistant", ContentPart.text("Grey.")));
        PreprocessedImage image = image(1, 4, 6, 3);
        TokenizedSample sample =
                samples.tokenize(new PreprocessedRecord(record, new PreprocessedImage[] {image}));

        String expected =
                DEFAULT_SYSTEM
                        + "<|im_start|>user\n<|vision_start|>"
                        + "<|image_pad|>".repeat(6)
                        + "<|vision_end|>Describe this image.<|im_end|>\n"
                        + "<|im_start|>assistant\nA cat.<|im_end|>\n"
                        + "<|im_start|>user\nAnd the colour?<|im_end|>\n"
                        + "<|im_start|>assistant\nGrey.<|im_end|>\n";
        assertThat(sample.inputIds).containsExactly(hf.encode(expected));
        assertThat(LongStream.of(sample.inputIds).filter(id -> id == 151655).count()).isEqualTo(6);
        assertLabelsTrainExactly(sample, "A cat.<|im_end|>\n", "Grey.<|im_end|>\n");
        assertThat(sample.imageGridThw).containsExactly(1, 4, 6);
        // one image: its pixel array is taken over, not copied
        assertThat(sample.resizedRgb).isSameAs(image.resizedRgb);
    }

    @Test
    void assistantHeadersAreMaskedPerTurn() throws Exception {
        SftRecord record =
                record(
                        new ChatMessage("user", ContentPart.text("Hi")),
                        new ChatMessage("assistant", ContentPart.text("Hello")),
                        new ChatMessage("user", ContentPart.text("Bye")),
                        new ChatMessage("assistant", ContentPart.text("See you")));
        TokenizedSample sample =
                samples.tokenize(new PreprocessedRecord(record, new PreprocessedImage[0]));
        for (int i = 0; i + 2 < sample.inputIds.length; i++) {
            if (sample.inputIds[i] == 151644 && sample.inputIds[i + 1] == 77091) {
                assertThat(
                                new long[] {
                                    sample.labels[i], sample.labels[i + 1], sample.labels[i + 2]
                                })
                        .containsOnly(-100L);
                assertThat(sample.inputIds[i + 2]).isEqualTo(198);
                assertThat(sample.labels[i + 3]).isEqualTo(sample.inputIds[i + 3]);
            }
        }
        assertLabelsTrainExactly(sample, "Hello<|im_end|>\n", "See you<|im_end|>\n");
        assertThat(sample.resizedRgb).isEmpty();
        assertThat(sample.imageGridThw).isEmpty();
    }

    @Test
    void givenSystemPromptReplacesTheDefault() throws Exception {
        SftRecord record =
                record(
                        new ChatMessage("system", ContentPart.text("Be brief.")),
                        new ChatMessage("user", ContentPart.text("Hi")),
                        new ChatMessage("assistant", ContentPart.text("Hello")));
        TokenizedSample sample =
                samples.tokenize(new PreprocessedRecord(record, new PreprocessedImage[0]));
        String expected =
                "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                        + "<|im_start|>assistant\nHello<|im_end|>\n";
        assertThat(sample.inputIds).containsExactly(hf.encode(expected));
        assertLabelsTrainExactly(sample, "Hello<|im_end|>\n");
    }

    @Test
    void defaultSystemPromptIsAddedOnlyWhenAbsent() {
        QwenChatTemplate template = new QwenChatTemplate();
        List<TemplateTurn> withDefault =
                template.render(
                        record(
                                new ChatMessage("user", ContentPart.text("Hi")),
                                new ChatMessage("assistant", ContentPart.text("Yo"))),
                        new int[0],
                        List.of());
        assertThat(withDefault)
                .extracting(TemplateTurn::role)
                .containsExactly("system", "user", "assistant");
        assertThat(withDefault.get(0).segments())
                .containsExactly(
                        new TemplateTurn.Special(ChatTokenizer.IM_START),
                        new TemplateTurn.Text("system\nYou are a helpful assistant."),
                        new TemplateTurn.Special(ChatTokenizer.IM_END),
                        new TemplateTurn.Text("\n"));
        assertThat(withDefault)
                .extracting(TemplateTurn::trained)
                .containsExactly(false, false, true);
        List<TemplateTurn> given =
                template.render(
                        record(
                                new ChatMessage("system", ContentPart.text("S")),
                                new ChatMessage("user", ContentPart.text("Hi")),
                                new ChatMessage("assistant", ContentPart.text("Yo"))),
                        new int[0],
                        List.of());
        assertThat(given)
                .extracting(TemplateTurn::role)
                .containsExactly("system", "user", "assistant");
        assertThat(given.get(0).segments())
                .containsExactly(
                        new TemplateTurn.Special(ChatTokenizer.IM_START),
                        new TemplateTurn.Text("system\nS"),
                        new TemplateTurn.Special(ChatTokenizer.IM_END),
                        new TemplateTurn.Text("\n"));
    }

    @Test
    void twoImagesConcatenatePixelsAndGridsInOrder() throws Exception {
        SftRecord record =
                record(
                        new ChatMessage(
                                "user",
                                ContentPart.image(0),
                                ContentPart.image(1),
                                ContentPart.text("Compare.")),
                        new ChatMessage("assistant", ContentPart.text("Same.")));
        record.images = new ImageRef[] {new ImageRef("a.jpg", 0, 0), new ImageRef("b.jpg", 0, 0)};
        PreprocessedImage first = image(1, 2, 2, 3);
        PreprocessedImage second = image(1, 4, 6, 3);
        TokenizedSample sample =
                samples.tokenize(
                        new PreprocessedRecord(record, new PreprocessedImage[] {first, second}));
        String expected =
                DEFAULT_SYSTEM
                        + "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|><|vision_start|>"
                        + "<|image_pad|>".repeat(6)
                        + "<|vision_end|>Compare.<|im_end|>\n<|im_start|>assistant\nSame.<|im_end|>\n";
        assertThat(sample.inputIds).containsExactly(hf.encode(expected));
        assertThat(sample.imageGridThw).containsExactly(1, 2, 2, 1, 4, 6);
        assertThat(sample.resizedRgb).hasSize((4 + 24) * 3);
        assertThat(Arrays.copyOfRange(sample.resizedRgb, 0, 12)).containsExactly(first.resizedRgb);
        assertThat(Arrays.copyOfRange(sample.resizedRgb, 12, 84))
                .containsExactly(second.resizedRgb);
    }

    @Test
    void specialTokenTextInDataIsEncodedAsText() throws Exception {
        SftRecord record =
                record(
                        new ChatMessage("user", ContentPart.text("Say <|im_end|>")),
                        new ChatMessage("assistant", ContentPart.text("Done")));
        TokenizedSample sample =
                samples.tokenize(new PreprocessedRecord(record, new PreprocessedImage[0]));
        // one <|im_end|> per turn (default system, user, assistant), none from the text
        assertThat(LongStream.of(sample.inputIds).filter(id -> id == 151645).count()).isEqualTo(3);
        long[] userTurn =
                LongStream.concat(
                                LongStream.of(151644),
                                LongStream.concat(
                                        LongStream.of(tokenizer.encodeText("user\nSay <|im_end|>")),
                                        LongStream.of(151645, 198)))
                        .toArray();
        long[] system = hf.encode(DEFAULT_SYSTEM);
        assertThat(
                        Arrays.copyOfRange(
                                sample.inputIds, system.length, system.length + userTurn.length))
                .containsExactly(userTurn);
    }

    @Test
    void gridNotDivisibleByMergeAreaIsATokenizationFailure() {
        SftRecord record =
                record(
                        new ChatMessage("user", ContentPart.image(0)),
                        new ChatMessage("assistant", ContentPart.text("X")));
        assertThatThrownBy(
                        () ->
                                samples.tokenize(
                                        new PreprocessedRecord(
                                                record,
                                                new PreprocessedImage[] {image(1, 3, 3, 3)})))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> {
                            assertThat(e.reason()).isEqualTo(RejectReason.TOKENIZATION_FAILED);
                            assertThat(e.getMessage()).contains("merge_size^2 = 4");
                        });
        assertThatThrownBy(
                        () ->
                                samples.tokenize(
                                        new PreprocessedRecord(record, new PreprocessedImage[0])))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e ->
                                assertThat(e.getMessage())
                                        .contains("1 images referenced but 0 preprocessed"));
    }

    /**
     * Labels are -100 everywhere except a contiguous copy of the ids of each given trained text.
     */
    private static void assertLabelsTrainExactly(TokenizedSample sample, String... trainedTexts) {
        assertThat(sample.labels).hasSameSizeAs(sample.inputIds);
        long[] expectedTrained =
                Arrays.stream(trainedTexts)
                        .flatMapToLong(t -> LongStream.of(hf.encode(t)))
                        .toArray();
        long[] trained = LongStream.of(sample.labels).filter(l -> l != -100).toArray();
        assertThat(trained).containsExactly(expectedTrained);
        for (int i = 0; i < sample.labels.length; i++) {
            if (sample.labels[i] != -100) {
                assertThat(sample.labels[i]).isEqualTo(sample.inputIds[i]);
            }
        }
        assertThat(sample.labels[sample.labels.length - 1]).isEqualTo(198);
    }

    static SftRecord record(ChatMessage... messages) {
        long images =
                Arrays.stream(messages)
                        .flatMap(m -> Arrays.stream(m.content))
                        .filter(ContentPart::isImage)
                        .count();
        ImageRef[] refs = new ImageRef[(int) images];
        Arrays.setAll(refs, i -> new ImageRef("images/" + i + ".jpg", 0, 0));
        return new SftRecord(new RecordRef("test.jsonl", 1, 0, "r1"), messages, refs);
    }

    static PreprocessedImage image(int t, int h, int w, int bytesPerPatch) {
        byte[] pixels = new byte[t * h * w * bytesPerPatch];
        for (int i = 0; i < pixels.length; i++) {
            pixels[i] = (byte) (i * 3 + h);
        }
        return new PreprocessedImage(pixels, t, h, w);
    }
}
