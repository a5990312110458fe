package dev.stoker.operators.parse;

import static org.assertj.core.api.Assertions.assertThat;

import com.code_intelligence.jazzer.junit.FuzzTest;
import dev.stoker.operators.FuzzContract;
import dev.stoker.operators.model.ChatMessage;
import dev.stoker.operators.model.ContentPart;
import dev.stoker.operators.model.JsonlLine;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SftRecord;
import java.time.Duration;

/**
 * Fuzzes {@link SftRecordParser#parse} with arbitrary line bytes, in every {@link RecordFormat}: it
 * must return a consistent record or throw {@link RejectedRecordException}, never anything else,
 * and never hang; a record a fixed format reads is the one {@code auto} reads. Without {@code
 * JAZZER_FUZZ} this runs over the seed corpus in {@code SftRecordParserFuzzTestInputs/parse} (real
 * lines of every record layout and the bad-encoding cases) as a regular test; see docs/fuzzing.md.
 */
class SftRecordParserFuzzTest {
    private static final SftRecordParser PARSER = new SftRecordParser();

    @FuzzTest(maxDuration = "60s")
    void parse(byte[] bytes) {
        JsonlLine line =
                new JsonlLine(new RecordRef("fuzz.jsonl", 1, 0, null), bytes, bytes.length);
        SftRecord auto = read(line, RecordFormat.AUTO);
        for (RecordFormat format : RecordFormat.values()) {
            SftRecord record = format == RecordFormat.AUTO ? auto : read(line, format);
            if (record != null) {
                check(record);
                // a fixed format only rejects more: what it reads, auto reads the same
                assertThat(auto).as(format.key()).usingRecursiveComparison().isEqualTo(record);
            }
        }
    }

    private static SftRecord read(JsonlLine line, RecordFormat format) {
        return FuzzContract.call(
                Duration.ofSeconds(10),
                () -> PARSER.parse(line, format),
                RejectedRecordException.class);
    }

    private static void check(SftRecord record) {
        assertThat(record.messages).isNotEmpty();
        assertThat(record.messages[record.messages.length - 1].role)
                .isEqualTo(ChatMessage.ASSISTANT);
        int imageParts = 0;
        for (ChatMessage m : record.messages) {
            for (ContentPart p : m.content) {
                if (p.isImage()) {
                    assertThat(p.imageIndex).isBetween(0, record.images.length - 1);
                    imageParts++;
                }
            }
        }
        assertThat(imageParts).isEqualTo(record.images.length);
    }
}
