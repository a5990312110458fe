package dev.stoker.connectors.source;

import dev.stoker.operators.parse.ByteOrderMark;
import java.io.IOException;
import java.io.Serializable;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileSystems;
import java.nio.file.PathMatcher;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HexFormat;
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
 *
 * <p>{@link #fingerprint()} identifies the listing (which files, in which order, where each record
 * starts) for {@code manifest.json}'s {@code dataset_fingerprint}, so a trainer can tell a job over
 * another dataset from the one its checkpoint was trained on.
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
    private final String fingerprint;

    private DatasetListing(
            String root,
            List<String> files,
            List<String> relativeFiles,
            long[] fileSizes,
            long[] fileBase,
            long[] offsets,
            long[] lines) {
        this.root = root;
        this.files = files;
        this.fileBase = fileBase;
        this.offsets = offsets;
        this.lines = lines;
        this.fingerprint = fingerprint(relativeFiles, fileSizes, fileBase, offsets, lines);
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
        List<FileStatus> found = new ArrayList<>();
        collect(fs, root, matcher, found);
        if (found.isEmpty()) {
            throw new IOException("No file matching '" + glob + "' under dataset root " + root);
        }
        found.sort((a, b) -> a.getPath().toString().compareTo(b.getPath().toString()));
        List<String> files = new ArrayList<>();
        List<String> relative = new ArrayList<>();
        String rootPath = root.toUri().getPath();
        String prefix = rootPath.endsWith("/") ? rootPath : rootPath + "/";
        long[] base = new long[found.size()];
        long[] sizes = new long[found.size()];
        LongList offsets = new LongList();
        LongList lines = new LongList();
        for (int f = 0; f < found.size(); f++) {
            Path file = found.get(f).getPath();
            sizes[f] = found.get(f).getLen();
            files.add(file.toString());
            String path = file.toUri().getPath();
            relative.add(path.startsWith(prefix) ? path.substring(prefix.length()) : path);
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
                relative,
                sizes,
                base,
                offsets.toArray(),
                lines.toArray());
    }

    private static void collect(FileSystem fs, Path dir, PathMatcher matcher, List<FileStatus> out)
            throws IOException {
        for (FileStatus status : fs.listStatus(dir)) {
            Path p = status.getPath();
            if (status.isDir()) {
                collect(fs, p, matcher, out);
            } else if (matcher.matches(java.nio.file.Path.of(p.getName()))) {
                out.add(status);
            }
        }
    }

    /**
     * SHA-256 of the listing, as {@code "sha256:<64 lowercase hex digits>"}: for each file in
     * listing order, its path relative to the dataset root (UTF-8), a 0 byte, its size in bytes and
     * its number of records, then for each of its records the byte offset and the 1-based line
     * number (every number an 8-byte big-endian integer). The same for a copy of the dataset under
     * another root or filesystem; another when a file is added, removed or renamed, or a record
     * added, removed, moved to another line or changed in length. It does not read the records'
     * bytes: an edit that keeps every record's length and line keeps the fingerprint.
     */
    public String fingerprint() {
        return fingerprint;
    }

    private static String fingerprint(
            List<String> relativeFiles,
            long[] fileSizes,
            long[] fileBase,
            long[] offsets,
            long[] lines) {
        MessageDigest sha;
        try {
            sha = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every Java platform has SHA-256", e);
        }
        ByteBuffer longs = ByteBuffer.allocate(16);
        for (int f = 0; f < relativeFiles.size(); f++) {
            long first = fileBase[f];
            long end = f + 1 < fileBase.length ? fileBase[f + 1] : offsets.length;
            sha.update(relativeFiles.get(f).getBytes(StandardCharsets.UTF_8));
            sha.update((byte) 0);
            sha.update(longs.clear().putLong(fileSizes[f]).putLong(end - first).array());
            for (long i = first; i < end; i++) {
                sha.update(longs.clear().putLong(offsets[(int) i]).putLong(lines[(int) i]).array());
            }
        }
        return "sha256:" + HexFormat.of().formatHex(sha.digest());
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
