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

    /**
     * The reader scans the stream in 64 KiB chunks: lines that straddle a chunk, lines longer than
     * a chunk (kept whole, or cut at the limit), a CRLF split between two chunks, and a stream that
     * hands out a few bytes per read give the same lines, offsets and lengths.
     */
    @Test
    void linesAcrossChunkBoundariesAreWhole() throws IOException {
        StringBuilder text = new StringBuilder();
        List<String> expected = new ArrayList<>();
        java.util.Random random = new java.util.Random(5);
        for (int i = 0; i < 40; i++) {
            String line = "{\"k\": \"" + "x".repeat(random.nextInt(20_000)) + "\"}";
            expected.add(line);
            text.append(line).append(i % 3 == 0 ? "\r\n" : "\n");
        }
        String big = "{\"big\": \"" + "y".repeat(200_000) + "\"}";
        expected.add(big);
        text.append(big).append("\n");
        byte[] data = text.toString().getBytes(StandardCharsets.UTF_8);
        // the CRLF after line 0 lands on a chunk boundary when line 0 is 65535 bytes long
        for (byte[] input : List.of(data, crlfOnTheBoundary())) {
            List<JsonlLineReader.Line> lines = readAll(input, 1 << 20);
            long offset = 0;
            for (JsonlLineReader.Line line : lines) {
                assertThat(line.offset).isEqualTo(offset);
                int end = offset(input, offset);
                offset = end + 1;
            }
        }
        assertThat(readAll(data, 1 << 20))
                .extracting(JsonlLineReaderTest::text)
                .isEqualTo(expected);
        List<JsonlLineReader.Line> trickled = new ArrayList<>();
        try (JsonlLineReader r =
                new JsonlLineReader(
                        new java.io.FilterInputStream(new ByteArrayInputStream(data)) {
                            @Override
                            public int read(byte[] b, int off, int len) throws IOException {
                                return super.read(b, off, Math.min(len, 7));
                            }
                        },
                        1 << 20)) {
            for (JsonlLineReader.Line l; (l = r.next()) != null; ) {
                trickled.add(l);
            }
        }
        assertThat(trickled).extracting(JsonlLineReaderTest::text).isEqualTo(expected);
        JsonlLineReader.Line cut = readAll(data, 100_000).get(expected.size() - 1);
        assertThat(cut.bytes).hasSize(100_000);
        assertThat(cut.originalLength).isEqualTo(big.length());
    }

    /** A 65535-byte line whose CR ends the first 64 KiB chunk and whose LF starts the next. */
    private static byte[] crlfOnTheBoundary() {
        return (FIRST + "\r\n{\"b\": 1}\n").getBytes(StandardCharsets.UTF_8);
    }

    private static final String FIRST = "{\"a\": \"" + "z".repeat(65535 - 9) + "\"}";

    /** Index of the next line feed at or after {@code from}. */
    private static int offset(byte[] data, long from) {
        int i = (int) from;
        while (data[i] != '\n') {
            i++;
        }
        return i;
    }

    @Test
    void emptyInputHasNoLines() throws IOException {
        assertThat(readAll(new byte[0], 16)).isEmpty();
        assertThat(readAll("\n\n".getBytes(StandardCharsets.UTF_8), 16)).isEmpty();
    }
}
