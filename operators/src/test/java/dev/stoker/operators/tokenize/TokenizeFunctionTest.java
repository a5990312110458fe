package dev.stoker.operators.tokenize;

import static org.assertj.core.api.Assertions.assertThat;

import dev.stoker.operators.model.ChatMessage;
import dev.stoker.operators.model.ContentPart;
import dev.stoker.operators.model.DeadLetter;
import dev.stoker.operators.model.DeadLetters;
import dev.stoker.operators.model.PerSource;
import dev.stoker.operators.model.PreprocessedImage;
import dev.stoker.operators.model.PreprocessedRecord;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.Stage;
import dev.stoker.operators.model.TokenizedSample;
import java.util.List;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.util.OneInputStreamOperatorTestHarness;
import org.apache.flink.streaming.util.ProcessFunctionTestHarnesses;
import org.junit.jupiter.api.Test;

class TokenizeFunctionTest {
    @Test
    void emitsSamplesAndDeadLettersFailures() throws Exception {
        TokenizeFunction function =
                new TokenizeFunction(
                        ChatTokenizerTest.tokenizerDir().toString(),
                        2,
                        PerSource.uniform(new QwenChatTemplate()),
                        PerSource.uniform(32768),
                        SequenceLengthPolicy.DROP);
        try (OneInputStreamOperatorTestHarness<PreprocessedRecord, TokenizedSample> harness =
                ProcessFunctionTestHarnesses.forProcessFunction(function)) {
            PreprocessedRecord good =
                    new PreprocessedRecord(
                            QwenChatTemplateTest.record(
                                    new ChatMessage(
                                            "user",
                                            ContentPart.image(0),
                                            ContentPart.text("What is it?")),
                                    new ChatMessage("assistant", ContentPart.text("A cat."))),
                            new PreprocessedImage[] {QwenChatTemplateTest.image(1, 4, 6, 588)});
            PreprocessedRecord bad =
                    new PreprocessedRecord(
                            good.record,
                            new PreprocessedImage[] {QwenChatTemplateTest.image(1, 5, 5, 588)});
            harness.processElement(good, 0);
            harness.processElement(bad, 1);

            List<TokenizedSample> samples = harness.extractOutputValues();
            assertThat(samples).hasSize(1);
            TokenizedSample sample = samples.get(0);
            assertThat(sample.ref.recordId).isEqualTo("r1");
            assertThat(sample.numImages()).isEqualTo(1);
            assertThat(sample.resizedRgb).hasSize(24 * 588);
            assertThat(sample.labels).hasSameSizeAs(sample.inputIds);

            List<DeadLetter> letters =
                    harness.getSideOutput(DeadLetters.TAG).stream()
                            .map(StreamRecord::getValue)
                            .toList();
            assertThat(letters).hasSize(1);
            assertThat(letters.get(0).reason).isEqualTo(RejectReason.TOKENIZATION_FAILED);
            assertThat(letters.get(0).stage).isEqualTo(Stage.TOKENIZE);
            assertThat(letters.get(0).message).contains("(1, 5, 5)");
        }
    }
}
