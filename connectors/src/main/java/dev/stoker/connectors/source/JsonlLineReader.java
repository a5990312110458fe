package dev.stoker.connectors.source;

import dev.stoker.operators.parse.ByteOrderMark;
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
 *
 * <p>Read from the start of a file ({@link #fromStartOfFile}), it looks for a {@link
 * ByteOrderMark}: a UTF-8 BOM is skipped (the first line's offset is then 3); any other is reported
 * by {@link #byteOrderMark()} and not interpreted. A UTF-8 BOM that starts a line inside the file
 * (JSONL files written by Windows tools and concatenated) is skipped the same way, one per line:
 * the line's offset is past it, and a line of only the mark is blank.
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

    /** Size of the chunks read from the stream and scanned for line ends in bulk. */
    private static final int CHUNK = 1 << 16;

    /** Only for {@link #fromStartOfFile}'s look at the first bytes; chunks bypass its buffer. */
    private final BufferedInputStream in;

    private final int maxLineBytes;
    private ByteOrderMark byteOrderMark;
    private byte[] buffer = new byte[8192];
    private final byte[] chunk = new byte[CHUNK];
    private int chunkPos;
    private int chunkLen;
    private long lineNumber;
    private long position;
    private boolean eof;

    public JsonlLineReader(InputStream in, int maxLineBytes) {
        if (maxLineBytes <= 0) {
            throw new IllegalArgumentException("maxLineBytes must be positive: " + maxLineBytes);
        }
        this.in = new BufferedInputStream(in, ByteOrderMark.MAX_LENGTH);
        this.maxLineBytes = maxLineBytes;
    }

    /**
     * A reader of a whole file, {@code in} at its first byte: a UTF-8 byte order mark is skipped,
     * another one is reported by {@link #byteOrderMark()}.
     *
     * @throws IOException if the first bytes cannot be read
     */
    public static JsonlLineReader fromStartOfFile(InputStream in, int maxLineBytes)
            throws IOException {
        JsonlLineReader reader = new JsonlLineReader(in, maxLineBytes);
        reader.in.mark(ByteOrderMark.MAX_LENGTH);
        byte[] head = reader.in.readNBytes(ByteOrderMark.MAX_LENGTH);
        reader.in.reset();
        reader.byteOrderMark = ByteOrderMark.detect(head);
        if (reader.byteOrderMark == ByteOrderMark.UTF_8) {
            reader.in.skipNBytes(ByteOrderMark.UTF_8.length());
            reader.position = ByteOrderMark.UTF_8.length();
        }
        return reader;
    }

    /**
     * The byte order mark the file starts with, or {@code null} (also for a reader not made by
     * {@link #fromStartOfFile}).
     */
    public ByteOrderMark byteOrderMark() {
        return byteOrderMark;
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
        boolean newline = false;
        while (true) {
            if (chunkPos == chunkLen) {
                chunkPos = 0;
                chunkLen = Math.max(0, in.read(chunk, 0, CHUNK));
                if (chunkLen == 0) {
                    break;
                }
            }
            int start = chunkPos;
            int stop = start;
            while (stop < chunkLen && chunk[stop] != '\n') {
                stop++;
            }
            int take = Math.min(stop - start, maxLineBytes - kept);
            if (take > 0) {
                while (kept + take > buffer.length) {
                    buffer = Arrays.copyOf(buffer, Math.min(maxLineBytes, buffer.length * 2));
                }
                System.arraycopy(chunk, start, buffer, kept, take);
                kept += take;
            }
            length += stop - start;
            if (stop < chunkLen) {
                chunkPos = stop + 1;
                newline = true;
                break;
            }
            chunkPos = chunkLen;
        }
        position = offset + length + (newline ? 1 : 0);
        if (!newline) {
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
        int from = startsWithUtf8Mark(buffer, kept) ? ByteOrderMark.UTF_8.length() : 0;
        return new Line(
                lineNumber, offset + from, Arrays.copyOfRange(buffer, from, kept), length - from);
    }

    private static boolean startsWithUtf8Mark(byte[] bytes, int length) {
        return length >= 3
                && bytes[0] == (byte) 0xEF
                && bytes[1] == (byte) 0xBB
                && bytes[2] == (byte) 0xBF;
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
