package dev.stoker.connectors.source;

import dev.stoker.operators.model.JsonlLine;
import dev.stoker.operators.model.RecordRef;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import org.apache.flink.core.fs.FSDataInputStream;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.fs.Path;

/**
 * Reads single records of a {@link DatasetListing} in any order.
 *
 * <p>Whole JSONL files up to {@code cacheBytes} are kept in memory (least recently used first out),
 * so a shuffled epoch reads each small file once; records of larger files are read by seeking to
 * their offset (a ranged GET on S3). Not thread-safe.
 */
final class RecordLineReader {
    private final DatasetListing listing;
    private final int maxLineBytes;
    private final long cacheBytes;
    private final Map<Integer, byte[]> cache = new LinkedHashMap<>(16, 0.75f, true);
    private final Set<Integer> uncacheable = new HashSet<>();
    private long cachedBytes;

    RecordLineReader(DatasetListing listing, int maxLineBytes, long cacheBytes) {
        this.listing = listing;
        this.maxLineBytes = maxLineBytes;
        this.cacheBytes = cacheBytes;
    }

    /**
     * The record with listing index {@code record}, tagged with {@code slotIndex}.
     *
     * @throws IOException if the file cannot be read or the record is gone (file changed since the
     *     listing)
     */
    JsonlLine read(int record, long slotIndex) throws IOException {
        DatasetListing.Location at = listing.locate(record);
        String file = listing.files().get(at.file);
        byte[] content = cached(at.file, file);
        JsonlLineReader.Line line;
        if (content != null) {
            line = firstLine(new ByteArrayInputStream(content, (int) at.offset, content.length));
        } else {
            Path path = new Path(file);
            try (FSDataInputStream in = path.getFileSystem().open(path)) {
                in.seek(at.offset);
                line = firstLine(in);
            }
        }
        if (line == null || line.offset != 0) {
            throw new IOException(
                    file
                            + ":"
                            + at.line
                            + ": record not found at byte "
                            + at.offset
                            + "; did the file change after the job was planned?");
        }
        return new JsonlLine(
                new RecordRef(file, at.line, slotIndex, null), line.bytes, line.originalLength);
    }

    private JsonlLineReader.Line firstLine(InputStream in) throws IOException {
        return new JsonlLineReader(in, maxLineBytes).next();
    }

    private byte[] cached(int fileIndex, String file) throws IOException {
        byte[] content = cache.get(fileIndex);
        if (content != null || uncacheable.contains(fileIndex)) {
            return content;
        }
        Path path = new Path(file);
        FileSystem fs = path.getFileSystem();
        long size = fs.getFileStatus(path).getLen();
        if (size > cacheBytes || size > Integer.MAX_VALUE - 8) {
            uncacheable.add(fileIndex);
            return null;
        }
        content = new byte[(int) size];
        try (FSDataInputStream in = fs.open(path)) {
            int n = in.readNBytes(content, 0, content.length);
            if (n != content.length) {
                throw new IOException(file + ": read " + n + " of " + size + " bytes");
            }
        }
        cache.put(fileIndex, content);
        cachedBytes += size;
        var it = cache.entrySet().iterator();
        while (cachedBytes > cacheBytes && it.hasNext()) {
            var eldest = it.next();
            if (eldest.getKey() != fileIndex) {
                cachedBytes -= eldest.getValue().length;
                it.remove();
            }
        }
        return content;
    }
}
