package dev.stoker.connectors.source;

import java.io.BufferedInputStream;
import java.io.Closeable;
import java.io.IOException;
import java.io.InputStream;
import java.util.Arrays;

/**
 * Splits a JSONL byte stream into lines without decoding them.
 *
 * <p>Lines end at {@code \n}; a trailing {@code \r} is stripped (CRLF files). Blank lines (empty or
 * only spaces, tabs and {@code \r}) are skipped and are not records. A line longer than {@code
 * maxLineBytes} is cut to that length but still counted and returned, with its original length, so
 * the parser can reject it with a reason instead of the reader failing. Both the dataset planner
 * and the source use this class, so they agree on what a record is.
 */
public final class JsonlLineReader implements Closeable {

    /**
     * One non-blank line: 1-based line number, byte offset of its first byte from where reading
     * started, bytes (possibly cut) and original length.
     */
    public static final class Line {
        public final long lineNumber;
        public final long offset;
        public final byte[] bytes;
        public final long originalLength;

        Line(long lineNumber, long offset, byte[] bytes, long originalLength) {
            this.lineNumber = lineNumber;
            this.offset = offset;
            this.bytes = bytes;
            this.originalLength = originalLength;
        }
    }

    private final InputStream in;
    private final int maxLineBytes;
    private byte[] buffer = new byte[8192];
    private long lineNumber;
    private long position;
    private boolean eof;

    public JsonlLineReader(InputStream in, int maxLineBytes) {
        if (maxLineBytes <= 0) {
            throw new IllegalArgumentException("maxLineBytes must be positive: " + maxLineBytes);
        }
        this.in = new BufferedInputStream(in, 1 << 16);
        this.maxLineBytes = maxLineBytes;
    }

    /** Returns the next non-blank line, or {@code null} at end of stream. */
    public Line next() throws IOException {
        while (!eof) {
            Line line = readPhysicalLine();
            if (line != null && !isBlank(line.bytes)) {
                return line;
            }
        }
        return null;
    }

    private Line readPhysicalLine() throws IOException {
        int kept = 0;
        long length = 0;
        long offset = position;
        int b;
        while ((b = in.read()) != -1 && b != '\n') {
            if (kept < maxLineBytes) {
                if (kept == buffer.length) {
                    buffer = Arrays.copyOf(buffer, Math.min(maxLineBytes, buffer.length * 2));
                }
                buffer[kept++] = (byte) b;
            }
            length++;
        }
        position = offset + length + (b == -1 ? 0 : 1);
        if (b == -1) {
            eof = true;
            if (length == 0) {
                return null;
            }
        }
        lineNumber++;
        if (kept > 0 && kept == length && buffer[kept - 1] == '\r') {
            kept--;
            length--;
        }
        return new Line(lineNumber, offset, Arrays.copyOf(buffer, kept), length);
    }

    private static boolean isBlank(byte[] bytes) {
        for (byte x : bytes) {
            if (x != ' ' && x != '\t' && x != '\r') {
                return false;
            }
        }
        return true;
    }

    @Override
    public void close() throws IOException {
        in.close();
    }
}
