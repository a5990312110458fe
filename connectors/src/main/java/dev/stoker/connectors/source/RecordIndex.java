package dev.stoker.connectors.source;

import dev.stoker.operators.parse.ByteOrderMark;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Arrays;

/**
 * Where each record of one JSONL file starts: its byte offset and 1-based line number, the records
 * being the file's non-blank lines as {@link JsonlLineReader} splits them (a UTF-8 byte order mark
 * skipped; a file that starts with a UTF-16 or UTF-32 mark is one record, line 1 at byte 0, which
 * the parser rejects naming the encoding).
 *
 * <p>Built once per file version by reading the file ({@link #build}) and kept in a {@link
 * RecordIndexCache}, keyed by the file's URI and checked against its size and modification time.
 * Memory: 16 bytes per record while loaded.
 *
 * <p>Its {@link Summary#digest} is the SHA-256 of the records' (offset, line) pairs, each an 8-byte
 * big-endian integer, in record order: what the dataset's fingerprint says of this file.
 */
public final class RecordIndex {
    private static final byte[] MAGIC = "STKRIDX1".getBytes(StandardCharsets.US_ASCII);

    /** The file version this index is of. */
    public final long fileSize;

    public final long modificationTime;
    private final long[] offsets;
    private final long[] lines;
    private final byte[] digest;

    private RecordIndex(
            long fileSize, long modificationTime, long[] offsets, long[] lines, byte[] digest) {
        this.fileSize = fileSize;
        this.modificationTime = modificationTime;
        this.offsets = offsets;
        this.lines = lines;
        this.digest = digest;
    }

    /**
     * Indexes a file by reading it from its first byte.
     *
     * @param in the file's content, from its first byte (not closed here)
     * @param fileSize the file's size in bytes, as its filesystem reports it
     * @param modificationTime the file's modification time, as its filesystem reports it
     * @param maxLineBytes the source's line length limit (a longer line is still one record)
     * @throws IOException if {@code in} fails
     */
    public static RecordIndex build(
            InputStream in, long fileSize, long modificationTime, int maxLineBytes)
            throws IOException {
        LongList offsets = new LongList();
        LongList lines = new LongList();
        JsonlLineReader reader = JsonlLineReader.fromStartOfFile(in, maxLineBytes);
        ByteOrderMark bom = reader.byteOrderMark();
        if (bom != null && !bom.isUtf8()) {
            offsets.add(0);
            lines.add(1);
        } else {
            JsonlLineReader.Line line;
            while ((line = reader.next()) != null) {
                offsets.add(line.offset);
                lines.add(line.lineNumber);
            }
        }
        long[] o = offsets.toArray();
        long[] l = lines.toArray();
        return new RecordIndex(fileSize, modificationTime, o, l, digest(o, l));
    }

    /** Records in the file. */
    public int numRecords() {
        return offsets.length;
    }

    /** Byte offset of record {@code k} (0-based, file order). */
    public long offset(int k) {
        return offsets[k];
    }

    /** 1-based line number of record {@code k}. */
    public long line(int k) {
        return lines[k];
    }

    /** Bytes this index takes in memory (its two arrays). */
    long memoryBytes() {
        return 16L * offsets.length;
    }

    /**
     * Writes the index: {@code "STKRIDX1"}, the file size, modification time and record count
     * (int64), the digest (32 bytes), then the offsets and the line numbers (int64 each).
     */
    void writeTo(DataOutputStream out) throws IOException {
        out.write(MAGIC);
        out.writeLong(fileSize);
        out.writeLong(modificationTime);
        out.writeLong(offsets.length);
        out.write(digest);
        for (long v : offsets) {
            out.writeLong(v);
        }
        for (long v : lines) {
            out.writeLong(v);
        }
    }

    /** What planning needs of an index: the file version it is of, its record count and digest. */
    record Summary(long fileSize, long modificationTime, int numRecords, byte[] digest) {}

    /** This index's {@link Summary}. */
    Summary summary() {
        return new Summary(fileSize, modificationTime, offsets.length, digest.clone());
    }

    /**
     * Reads the header of what {@link #writeTo} wrote (not the offsets).
     *
     * @throws IOException if the bytes are not an index, or are cut short
     */
    static Summary readSummary(DataInputStream in) throws IOException {
        byte[] magic = in.readNBytes(MAGIC.length);
        if (!Arrays.equals(magic, MAGIC)) {
            throw new IOException("not a Stoker record index (or another version)");
        }
        long size = in.readLong();
        long mtime = in.readLong();
        long count = in.readLong();
        if (count < 0 || count > Integer.MAX_VALUE) {
            throw new IOException("corrupt record index: " + count + " records");
        }
        byte[] digest = in.readNBytes(32);
        if (digest.length != 32) {
            throw new IOException("record index cut short");
        }
        return new Summary(size, mtime, (int) count, digest);
    }

    /**
     * Reads what {@link #writeTo} wrote.
     *
     * @throws IOException if the bytes are not an index, or are cut short
     */
    static RecordIndex readFrom(DataInputStream in) throws IOException {
        Summary head = readSummary(in);
        long[] offsets = readLongs(in, head.numRecords());
        long[] lines = readLongs(in, head.numRecords());
        return new RecordIndex(
                head.fileSize(), head.modificationTime(), offsets, lines, head.digest());
    }

    private static long[] readLongs(DataInputStream in, int n) throws IOException {
        byte[] bytes = in.readNBytes(8 * n);
        if (bytes.length != 8 * n) {
            throw new IOException("record index cut short");
        }
        long[] out = new long[n];
        ByteBuffer.wrap(bytes).asLongBuffer().get(out);
        return out;
    }

    private static byte[] digest(long[] offsets, long[] lines) {
        MessageDigest sha;
        try {
            sha = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every Java platform has SHA-256", e);
        }
        ByteBuffer pair = ByteBuffer.allocate(16);
        for (int i = 0; i < offsets.length; i++) {
            sha.update(pair.clear().putLong(offsets[i]).putLong(lines[i]).array());
        }
        return sha.digest();
    }

    /** A growable {@code long[]}. */
    private static final class LongList {
        long[] values = new long[1024];
        int size;

        void add(long v) {
            if (size == values.length) {
                values = Arrays.copyOf(values, size * 2);
            }
            values[size++] = v;
        }

        long[] toArray() {
            return Arrays.copyOf(values, size);
        }
    }
}
