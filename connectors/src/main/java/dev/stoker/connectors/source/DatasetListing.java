package dev.stoker.connectors.source;

import java.io.IOException;
import java.io.Serializable;
import java.nio.file.FileSystems;
import java.nio.file.PathMatcher;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.flink.core.fs.FileStatus;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.fs.Path;

/**
 * The dataset's JSONL files in deterministic order and the number of records in each, computed once
 * when the job is planned.
 *
 * <p>Files are those under the dataset root (recursively) whose name matches the glob, sorted by
 * path. Record {@code i} of the deterministic order is the {@code k}-th non-blank line of file
 * {@code f} where {@code i = baseIndex(f) + k}. Works on any Flink {@link FileSystem} (local, S3).
 */
public final class DatasetListing implements Serializable {
    private static final long serialVersionUID = 1L;

    private final String root;
    private final List<String> files;
    private final Map<String, Long> baseIndex;
    private final long numRecords;

    private DatasetListing(
            String root, List<String> files, Map<String, Long> baseIndex, long numRecords) {
        this.root = root;
        this.files = files;
        this.baseIndex = baseIndex;
        this.numRecords = numRecords;
    }

    /**
     * Lists and counts the dataset.
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
        Map<String, Long> base = new HashMap<>();
        long total = 0;
        for (Path file : found) {
            files.add(file.toString());
            base.put(file.toString(), total);
            total += countRecords(fs, file, maxLineBytes);
        }
        return new DatasetListing(
                root.toString(), Collections.unmodifiableList(files), base, total);
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

    private static long countRecords(FileSystem fs, Path file, int maxLineBytes)
            throws IOException {
        long n = 0;
        try (JsonlLineReader reader = new JsonlLineReader(fs.open(file), maxLineBytes)) {
            while (reader.next() != null) {
                n++;
            }
        }
        return n;
    }

    /** Dataset root URI as given. */
    public String root() {
        return root;
    }

    /** JSONL file URIs in deterministic order. */
    public List<String> files() {
        return files;
    }

    /** Sample index of the first record of {@code file}. */
    public long baseIndex(String file) {
        Long base = baseIndex.get(file);
        if (base == null) {
            throw new IllegalArgumentException("File is not part of the dataset listing: " + file);
        }
        return base;
    }

    /** Total number of records (non-blank lines) in all files. */
    public long numRecords() {
        return numRecords;
    }
}
