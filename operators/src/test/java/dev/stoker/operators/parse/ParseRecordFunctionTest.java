package dev.stoker.operators.parse;

import static org.assertj.core.api.Assertions.assertThat;

import dev.stoker.operators.model.DeadLetter;
import dev.stoker.operators.model.DeadLetters;
import dev.stoker.operators.model.JsonlLine;
import dev.stoker.operators.model.PerSource;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.Stage;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.util.OneInputStreamOperatorTestHarness;
import org.apache.flink.streaming.util.ProcessFunctionTestHarnesses;
import org.junit.jupiter.api.Test;

class ParseRecordFunctionTest {
    @Test
    void validLinesAreEmittedAndRejectedOnesBecomeDeadLettersWithTheirId() throws Exception {
        try (OneInputStreamOperatorTestHarness<JsonlLine, SftRecord> harness =
                ProcessFunctionTestHarnesses.forProcessFunction(
                        new ParseRecordFunction(PerSource.uniform(RecordFormat.AUTO)))) {
            harness.processElement(
                    line(
                            1,
                            "{\"id\": \"ok\", \"conversations\": [{\"from\": \"human\", \"value\": \"Hi\"},"
                                    + " {\"from\": \"gpt\", \"value\": \"Hello\"}]}"),
                    0);
            harness.processElement(
                    line(
                            2,
                            "{\"id\": \"traversal\", \"image\": \"../x.jpg\", \"conversations\": []}"),
                    0);
            harness.processElement(line(3, "{\"id\": "), 0);

            assertThat(harness.extractOutputValues())
                    .extracting(r -> r.ref.recordId)
                    .containsExactly("ok");
            List<DeadLetter> letters =
                    harness.getSideOutput(DeadLetters.TAG).stream()
                            .map(StreamRecord::getValue)
                            .toList();
            assertThat(letters)
                    .extracting(l -> l.reason)
                    .containsExactly(RejectReason.UNSAFE_PATH, RejectReason.MALFORMED_JSON);
            assertThat(letters).extracting(l -> l.stage).containsOnly(Stage.PARSE);
            assertThat(letters.get(0).ref).isEqualTo(new RecordRef("f.jsonl", 2, 1, "traversal"));
            assertThat(letters.get(1).ref).isEqualTo(new RecordRef("f.jsonl", 3, 2, null));
            assertThat(letters.get(0).toString()).contains("f.jsonl:2 (id=traversal)", "../x.jpg");
        }
    }

    /**
     * Two sources with fixed formats: each reads its own layout and dead-letters the other's,
     * naming the format expected and what the record has.
     */
    @Test
    void aSourceWithAFixedFormatDeadLettersARecordInAnotherLayout() throws Exception {
        String llava =
                "{\"id\": \"l\", \"image\": \"a.jpg\", \"conversations\": [{\"from\": \"human\","
                        + " \"value\": \"<image>Hi\"}, {\"from\": \"gpt\", \"value\": \"Yo\"}]}";
        String shareGpt =
                "{\"id\": \"s\", \"images\": [\"a.jpg\"], \"messages\": [{\"role\": \"user\","
                        + " \"content\": \"<image>Hi\"}, {\"role\": \"assistant\", \"content\":"
                        + " \"Yo\"}]}";
        PerSource<RecordFormat> formats =
                PerSource.of(Map.of("chat", RecordFormat.LLAVA, "lf", RecordFormat.SHAREGPT));
        try (OneInputStreamOperatorTestHarness<JsonlLine, SftRecord> harness =
                ProcessFunctionTestHarnesses.forProcessFunction(new ParseRecordFunction(formats))) {
            harness.processElement(line("chat", 1, llava), 0);
            harness.processElement(line("chat", 2, shareGpt), 0);
            harness.processElement(line("lf", 1, shareGpt), 0);
            harness.processElement(line("lf", 2, llava), 0);

            assertThat(harness.extractOutputValues())
                    .extracting(r -> r.ref.source + "/" + r.ref.recordId)
                    .containsExactly("chat/l", "lf/s");
            List<DeadLetter> letters =
                    harness.getSideOutput(DeadLetters.TAG).stream()
                            .map(StreamRecord::getValue)
                            .toList();
            assertThat(letters)
                    .extracting(l -> l.ref)
                    .containsExactly(
                            new RecordRef("chat", "f.jsonl", 2, 1, "s"),
                            new RecordRef("lf", "f.jsonl", 2, 1, "l"));
            assertThat(letters).extracting(l -> l.reason).containsOnly(RejectReason.INVALID_RECORD);
            assertThat(letters.get(0).message)
                    .isEqualTo(
                            "not a llava record (the format of its source): it has 'messages', not"
                                    + " 'conversations' (the messages or sharegpt format)");
            assertThat(letters.get(1).message)
                    .isEqualTo(
                            "not a sharegpt record (the format of its source): it has"
                                    + " 'conversations', not 'messages' (the llava format)");
        }
    }

    private static JsonlLine line(String source, long lineNo, String json) {
        byte[] bytes = json.getBytes(StandardCharsets.UTF_8);
        return new JsonlLine(
                new RecordRef(source, "f.jsonl", lineNo, lineNo - 1, null), bytes, bytes.length);
    }

    private static JsonlLine line(long lineNo, String json) {
        byte[] bytes = json.getBytes(StandardCharsets.UTF_8);
        return new JsonlLine(
                new RecordRef("f.jsonl", lineNo, lineNo - 1, null), bytes, bytes.length);
    }
}
