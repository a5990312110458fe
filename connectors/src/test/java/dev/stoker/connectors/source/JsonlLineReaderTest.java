package dev.stoker.connectors.source;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class JsonlLineReaderTest {

    private static List<JsonlLineReader.Line> readAll(byte[] data, int max) throws IOException {
        List<JsonlLineReader.Line> lines = new ArrayList<>();
        try (JsonlLineReader r = new JsonlLineReader(new ByteArrayInputStream(data), max)) {
            JsonlLineReader.Line l;
            while ((l = r.next()) != null) {
                lines.add(l);
            }
        }
        return lines;
    }

    private static String text(JsonlLineReader.Line l) {
        return new String(l.bytes, StandardCharsets.UTF_8);
    }

    @Test
    void skipsBlankLinesButKeepsPhysicalLineNumbers() throws IOException {
        byte[] data =
                "{\"a\":1}\n\n   \t\n{\"b\":2}\r\n\r\n{\"c\":3}".getBytes(StandardCharsets.UTF_8);
        List<JsonlLineReader.Line> lines = readAll(data, 1024);
        assertThat(lines)
                .extracting(JsonlLineReaderTest::text)
                .containsExactly("{\"a\":1}", "{\"b\":2}", "{\"c\":3}");
        assertThat(lines).extracting(l -> l.lineNumber).containsExactly(1L, 4L, 6L);
    }

    /**
     * Concatenated files written by Windows tools: a UTF-8 byte order mark that starts a line
     * inside the file is skipped like the one at the start of a file (the record parses as if it
     * were not there; before issue 34 it was a MALFORMED_JSON dead letter), a line that holds only
     * the mark (the start of an empty file) is blank; only one per line, and a U+FEFF inside a
     * value stays text.
     */
    @Test
    void aByteOrderMarkStartingALineInsideTheFileIsSkipped() throws IOException {
        byte[] data =
                "{\"a\":1}\n\uFEFF\n\uFEFF \r\n\uFEFF{\"b\":\"\uFEFFx\"}\n\uFEFF\uFEFF{}\n"
                        .getBytes(StandardCharsets.UTF_8);
        List<JsonlLineReader.Line> lines = readAll(data, 1024);
        assertThat(lines)
                .extracting(JsonlLineReaderTest::text)
                .containsExactly("{\"a\":1}", "{\"b\":\"\uFEFFx\"}", "\uFEFF{}");
        assertThat(lines).extracting(l -> l.lineNumber).containsExactly(1L, 4L, 5L);
        // offsets point past the mark: line 4 starts at byte 8 + 4 + 6 = 18, its record at 21
        assertThat(lines.get(1).offset).isEqualTo(21);
        assertThat(lines.get(1).originalLength).isEqualTo(lines.get(1).bytes.length);
    }

    @Test
    void stripsOnlyTheFinalCarriageReturn() throws IOException {
        List<JsonlLineReader.Line> lines =
                readAll("x\r\r\n".getBytes(StandardCharsets.UTF_8), 1024);
        assertThat(lines).hasSize(1);
        assertThat(lines.get(0).bytes).containsExactly('x', '\r');
    }

    @Test
    void cutsOverlongLinesAndReportsTheirLength() throws IOException {
        byte[] data = ("0123456789abcdef\nshort\n").getBytes(StandardCharsets.UTF_8);
        List<JsonlLineReader.Line> lines = readAll(data, 8);
        assertThat(lines.get(0).bytes).hasSize(8);
        assertThat(lines.get(0).originalLength).isEqualTo(16);
        assertThat(text(lines.get(1))).isEqualTo("short");
        assertThat(lines.get(1).originalLength).isEqualTo(5);
    }

    @Test
    void keepsInvalidUtf8BytesUntouched() throws IOException {
        byte[] data = {'{', (byte) 0xE9, '}', '\n'};
        List<JsonlLineReader.Line> lines = readAll(data, 1024);
        assertThat(lines.get(0).bytes).containsExactly('{', (byte) 0xE9, '}');
    }

    @Test
    void emptyInputHasNoLines() throws IOException {
        assertThat(readAll(new byte[0], 16)).isEmpty();
        assertThat(readAll("\n\n".getBytes(StandardCharsets.UTF_8), 16)).isEmpty();
    }
}
