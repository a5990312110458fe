package dev.stoker.operators.parse;

import dev.stoker.operators.model.JsonlLine;
import dev.stoker.operators.model.RecordRef;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Test stand-in for the JSONL source: splits raw bytes on LF, strips a trailing CR, skips blank
 * lines.
 */
final class JsonlLines {
    private JsonlLines() {}

    static List<JsonlLine> read(Path file) throws IOException {
        byte[] bytes = Files.readAllBytes(file);
        List<JsonlLine> lines = new ArrayList<>();
        int start = 0;
        long lineNo = 1;
        while (start <= bytes.length) {
            int end = start;
            while (end < bytes.length && bytes[end] != '\n') {
                end++;
            }
            int stop = end > start && bytes[end - 1] == '\r' ? end - 1 : end;
            byte[] line = Arrays.copyOfRange(bytes, start, stop);
            if (!isBlank(line)) {
                RecordRef ref = new RecordRef(file.toString(), lineNo, lines.size(), null);
                lines.add(new JsonlLine(ref, line, line.length));
            }
            start = end + 1;
            lineNo++;
        }
        return lines;
    }

    private static boolean isBlank(byte[] line) {
        for (byte b : line) {
            if (b != ' ' && b != '\t') {
                return false;
            }
        }
        return true;
    }
}
