package dev.stoker.operators.parse;

import static org.assertj.core.api.Assertions.assertThat;

import dev.stoker.operators.model.DeadLetter;
import dev.stoker.operators.model.DeadLetters;
import dev.stoker.operators.model.JsonlLine;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.Stage;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.util.OneInputStreamOperatorTestHarness;
import org.apache.flink.streaming.util.ProcessFunctionTestHarnesses;
import org.junit.jupiter.api.Test;

class ParseRecordFunctionTest {
    @Test
    void validLinesAreEmittedAndRejectedOnesBecomeDeadLettersWithTheirId() throws Exception {
        try (OneInputStreamOperatorTestHarness<JsonlLine, SftRecord> harness =
                ProcessFunctionTestHarnesses.forProcessFunction(new ParseRecordFunction())) {
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

    private static JsonlLine line(long lineNo, String json) {
        byte[] bytes = json.getBytes(StandardCharsets.UTF_8);
        return new JsonlLine(
                new RecordRef("f.jsonl", lineNo, lineNo - 1, null), bytes, bytes.length);
    }
}
