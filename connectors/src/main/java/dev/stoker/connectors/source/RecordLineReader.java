package dev.stoker.connectors.source;

import dev.stoker.operators.model.JsonlLine;
import dev.stoker.operators.model.RecordRef;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.flink.core.fs.FSDataInputStream;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.fs.Path;

/**
 * Reads single records of the mixture's sources, each a {@link DatasetListing}, in any order.
 *
 * <p>Whole JSONL files up to {@code cacheBytes} are kept in memory (least recently used first out),
 * so a shuffled epoch reads each small file once; records of larger files are read by seeking to
 * their offset (a ranged GET on S3). Where a record starts comes from its file's {@link
 * RecordIndex}; up to {@code cacheBytes} of indexes (16 bytes per record) are kept in memory too,
 * least recently used first out. {@link #read} is synchronized: a source reader's split fetchers
 * share one (ShuffledJsonlSource#splitReaders), and a closing fetcher may still read while the next
 * one starts.
 */
final class RecordLineReader {
    private final List<String> names;
    private final List<DatasetListing> listings;
    private final int maxLineBytes;
    private final long cacheBytes;
    private final Map<String, byte[]> cache = new LinkedHashMap<>(16, 0.75f, true);
    private final Set<String> uncacheable = new HashSet<>();
    private long cachedBytes;
    private final Map<String, RecordIndex> indexes = new LinkedHashMap<>(16, 0.75f, true);
    private long indexBytes;

    /**
     * @param names the sources' names, tagged onto each record's {@link RecordRef#source}
     * @param listings the sources' listings, in the same order
     */
    RecordLineReader(
            List<String> names, List<DatasetListing> listings, int maxLineBytes, long cacheBytes) {
        this.names = names;
        this.listings = listings;
        this.maxLineBytes = maxLineBytes;
        this.cacheBytes = cacheBytes;
    }

    /**
     * The record with listing index {@code record} of source {@code source}, tagged with {@code
     * slotIndex}.
     *
     * @throws IOException if the file cannot be read or the record is gone (file changed since the
     *     listing)
     */
    synchronized JsonlLine read(int source, long record, long slotIndex) throws IOException {
        DatasetListing listing = listings.get(source);
        DatasetListing.Location at = listing.locate(record);
        String file = listing.files().get(at.file);
        RecordIndex index = index(listing, at.file, file);
        long offset = index.offset(at.record);
        long lineNumber = index.line(at.record);
        byte[] content = cached(file);
        JsonlLineReader.Line line;
        if (content != null) {
            line = firstLine(new ByteArrayInputStream(content, (int) offset, content.length));
        } else {
            Path path = new Path(file);
            try (FSDataInputStream in = path.getFileSystem().open(path)) {
                in.seek(offset);
                line = firstLine(in);
            }
        }
        if (line == null || line.offset != 0) {
            throw new IOException(
                    file
                            + ":"
                            + lineNumber
                            + ": record not found at byte "
                            + offset
                            + "; did the file change after the job was planned?");
        }
        return new JsonlLine(
                new RecordRef(names.get(source), file, lineNumber, slotIndex, null),
                line.bytes,
                line.originalLength);
    }

    private RecordIndex index(DatasetListing listing, int fileIndex, String file)
            throws IOException {
        RecordIndex index = indexes.get(file);
        if (index != null) {
            return index;
        }
        index = listing.index(fileIndex);
        indexes.put(file, index);
        indexBytes += index.memoryBytes();
        var it = indexes.entrySet().iterator();
        while (indexBytes > cacheBytes && it.hasNext()) {
            var eldest = it.next();
            if (!eldest.getKey().equals(file)) {
                indexBytes -= eldest.getValue().memoryBytes();
                it.remove();
            }
        }
        return index;
    }

    private JsonlLineReader.Line firstLine(InputStream in) throws IOException {
        return new JsonlLineReader(in, maxLineBytes).next();
    }

    private byte[] cached(String file) throws IOException {
        byte[] content = cache.get(file);
        if (content != null || uncacheable.contains(file)) {
            return content;
        }
        Path path = new Path(file);
        FileSystem fs = path.getFileSystem();
        long size = fs.getFileStatus(path).getLen();
        if (size > cacheBytes || size > Integer.MAX_VALUE - 8) {
            uncacheable.add(file);
            return null;
        }
        content = new byte[(int) size];
        try (FSDataInputStream in = fs.open(path)) {
            int n = in.readNBytes(content, 0, content.length);
            if (n != content.length) {
                throw new IOException(file + ": read " + n + " of " + size + " bytes");
            }
        }
        cache.put(file, content);
        cachedBytes += size;
        var it = cache.entrySet().iterator();
        while (cachedBytes > cacheBytes && it.hasNext()) {
            var eldest = it.next();
            if (!eldest.getKey().equals(file)) {
                cachedBytes -= eldest.getValue().length;
                it.remove();
            }
        }
        return content;
    }
}
