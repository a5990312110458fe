package dev.stoker.connectors.source;

import dev.stoker.operators.parse.ByteOrderMark;
import java.io.IOException;
import java.io.Serializable;
import java.nio.file.FileSystems;
import java.nio.file.PathMatcher;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import org.apache.flink.core.fs.FileStatus;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.fs.Path;

/**
 * The dataset's JSONL files in deterministic order and where each record starts, computed once when
 * the job is planned.
 *
 * <p>Files are those under the dataset root (recursively) whose name matches the glob, sorted by
 * path. Record {@code i} of the listing order is the {@code k}-th non-blank line of file {@code f}
 * where {@code i = baseIndex(f) + k}. For each record the listing keeps its byte offset and 1-based
 * line number (16 bytes per record), so the source can read records in any order. Works on any
 * Flink {@link FileSystem} (local, S3).
 *
 * <p>Encoding ({@link ByteOrderMark}): a UTF-8 byte order mark at the start of a file is skipped
 * (the first record starts after it). A file that starts with a UTF-16 or UTF-32 mark is listed as
 * exactly one record (line 1, byte 0), so it takes one slot of the plan and ends up as one dead
 * letter ({@code UNSUPPORTED_ENCODING}): per epoch, samples + dead letters = records still holds.
 */
public final class DatasetListing implements Serializable {
    private static final long serialVersionUID = 2L;

    /** Where one record lives: file index into {@link #files()}, byte offset, 1-based line. */
    public static final class Location {
        public final int file;
        public final long offset;
        public final long line;

        Location(int file, long offset, long line) {
            this.file = file;
            this.offset = offset;
            this.line = line;
        }
    }

    private final String root;
    private final List<String> files;
    private final long[] fileBase;
    private final long[] offsets;
    private final long[] lines;

    private DatasetListing(
            String root, List<String> files, long[] fileBase, long[] offsets, long[] lines) {
        this.root = root;
        this.files = files;
        this.fileBase = fileBase;
        this.offsets = offsets;
        this.lines = lines;
    }

    /**
     * Lists the dataset and indexes its records.
     *
     * @param root dataset root directory (any Flink filesystem URI)
     * @param glob file-name glob such as {@code *.jsonl}
     * @param maxLineBytes the source's line length limit (records are counted the same way)
     * @throws IOException if the root cannot be listed or holds no matching file
     */
    public static DatasetListing scan(Path root, String glob, int maxLineBytes) throws IOException {
        FileSystem fs = root.getFileSystem();
        if (!fs.exists(root)) {
            throw new IOException("Dataset root does not exist: " + root);
        }
        PathMatcher matcher = FileSystems.getDefault().getPathMatcher("glob:" + glob);
        List<Path> found = new ArrayList<>();
        collect(fs, root, matcher, found);
        if (found.isEmpty()) {
            throw new IOException("No file matching '" + glob + "' under dataset root " + root);
        }
        found.sort((a, b) -> a.toString().compareTo(b.toString()));
        List<String> files = new ArrayList<>();
        long[] base = new long[found.size()];
        LongList offsets = new LongList();
        LongList lines = new LongList();
        for (int f = 0; f < found.size(); f++) {
            Path file = found.get(f);
            files.add(file.toString());
            base[f] = offsets.size;
            try (JsonlLineReader reader =
                    JsonlLineReader.fromStartOfFile(fs.open(file), maxLineBytes)) {
                ByteOrderMark bom = reader.byteOrderMark();
                if (bom != null && !bom.isUtf8()) {
                    // UTF-16/32: the whole file is one record, line 1 at byte 0, which the parser
                    // rejects naming the encoding (never split into garbage records)
                    offsets.add(0);
                    lines.add(1);
                    continue;
                }
                JsonlLineReader.Line line;
                while ((line = reader.next()) != null) {
                    offsets.add(line.offset);
                    lines.add(line.lineNumber);
                }
            }
        }
        return new DatasetListing(
                root.toString(),
                Collections.unmodifiableList(files),
                base,
                offsets.toArray(),
                lines.toArray());
    }

    private static void collect(FileSystem fs, Path dir, PathMatcher matcher, List<Path> out)
            throws IOException {
        for (FileStatus status : fs.listStatus(dir)) {
            Path p = status.getPath();
            if (status.isDir()) {
                collect(fs, p, matcher, out);
            } else if (matcher.matches(java.nio.file.Path.of(p.getName()))) {
                out.add(p);
            }
        }
    }

    /** Dataset root URI as given. */
    public String root() {
        return root;
    }

    /** JSONL file URIs in deterministic order. */
    public List<String> files() {
        return files;
    }

    /** Total number of records in all files: non-blank lines, and one for each UTF-16/32 file. */
    public long numRecords() {
        return offsets.length;
    }

    /**
     * Where record {@code index} (listing order) starts.
     *
     * @throws IndexOutOfBoundsException if {@code index} is not in {@code [0, numRecords())}
     */
    public Location locate(int index) {
        int f = Arrays.binarySearch(fileBase, index);
        if (f < 0) {
            f = -f - 2;
        }
        while (f + 1 < fileBase.length && fileBase[f + 1] == index) {
            f++; // skip files without records
        }
        return new Location(f, offsets[index], lines[index]);
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
