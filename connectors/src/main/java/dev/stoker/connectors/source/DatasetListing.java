package dev.stoker.connectors.source;

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
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.flink.core.fs.FileStatus;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.fs.Path;
import org.apache.flink.util.concurrent.ExecutorThreadFactory;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A dataset's JSONL files in deterministic order and how many records each holds, computed once
 * when the job is planned; where each record starts is in the files' {@link RecordIndex}es, which
 * the source loads from the {@link RecordIndexCache} as it reads.
 *
 * <p>Files are those under the dataset root (recursively) whose name matches the glob, sorted by
 * path. Record {@code i} of the listing order is record {@code k} (the {@code k}-th non-blank line)
 * of file {@code f} where {@code i = baseIndex(f) + k}. The listing keeps a few numbers per file
 * and none per record, so its size (in the job graph, in every source subtask) does not grow with
 * the record count. Works on any Flink {@link FileSystem} (local, S3). Files are indexed in
 * parallel, each read once per version: an index in the cache is reused while the file's size and
 * modification time are unchanged.
 *
 * <p>{@link #fingerprint()} identifies the listing (which files, in which order, where each record
 * starts) for {@code manifest.json}'s {@code dataset_fingerprint}, so a trainer can tell a job over
 * another dataset from the one its checkpoint was trained on.
 */
public final class DatasetListing implements Serializable {
    private static final long serialVersionUID = 3L;
    private static final Logger LOG = LoggerFactory.getLogger(DatasetListing.class);
    private static final long PROGRESS_EVERY_MS = 10_000;

    /** Where one record lives: file index into {@link #files()} and record within the file. */
    public static final class Location {
        public final int file;
        public final int record;

        Location(int file, int record) {
            this.file = file;
            this.record = record;
        }
    }

    private final String root;
    private final List<String> files;
    private final long[] sizes;
    private final long[] modificationTimes;
    private final long[] fileBase;
    private final String fingerprint;
    private final RecordIndexCache indexes;

    private DatasetListing(
            String root,
            List<String> files,
            long[] sizes,
            long[] modificationTimes,
            long[] fileBase,
            String fingerprint,
            RecordIndexCache indexes) {
        this.root = root;
        this.files = files;
        this.sizes = sizes;
        this.modificationTimes = modificationTimes;
        this.fileBase = fileBase;
        this.fingerprint = fingerprint;
        this.indexes = indexes;
    }

    /**
     * Lists the dataset and indexes its files ({@code threads} at a time), logging progress every
     * 10 seconds.
     *
     * @param root dataset root directory (any Flink filesystem URI)
     * @param glob file-name glob such as {@code *.jsonl}
     * @param indexes where the files' record indexes are kept (and with which line limit built)
     * @param threads files indexed at once
     * @throws IOException if the root cannot be listed, holds no matching file, or a file cannot be
     *     read
     */
    public static DatasetListing scan(Path root, String glob, RecordIndexCache indexes, int threads)
            throws IOException {
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
        RecordIndex.Summary[] summaries = summaries(root, found, indexes, threads);

        int n = found.size();
        List<String> files = new ArrayList<>(n);
        long[] sizes = new long[n];
        long[] times = new long[n];
        long[] base = new long[n + 1];
        MessageDigest sha = sha256();
        String rootPath = root.toUri().getPath();
        String prefix = rootPath.endsWith("/") ? rootPath : rootPath + "/";
        ByteBuffer longs = ByteBuffer.allocate(16);
        for (int f = 0; f < n; f++) {
            FileStatus status = found.get(f);
            files.add(status.getPath().toString());
            sizes[f] = status.getLen();
            times[f] = status.getModificationTime();
            base[f + 1] = base[f] + summaries[f].numRecords();
            String path = status.getPath().toUri().getPath();
            String relative = path.startsWith(prefix) ? path.substring(prefix.length()) : path;
            sha.update(relative.getBytes(StandardCharsets.UTF_8));
            sha.update((byte) 0);
            sha.update(longs.clear().putLong(sizes[f]).putLong(summaries[f].numRecords()).array());
            sha.update(summaries[f].digest());
        }
        return new DatasetListing(
                root.toString(),
                Collections.unmodifiableList(files),
                sizes,
                times,
                base,
                "sha256:" + HexFormat.of().formatHex(sha.digest()),
                indexes);
    }

    private static RecordIndex.Summary[] summaries(
            Path root, List<FileStatus> files, RecordIndexCache indexes, int threads)
            throws IOException {
        RecordIndex.Summary[] out = new RecordIndex.Summary[files.size()];
        ExecutorService pool =
                Executors.newFixedThreadPool(
                        Math.max(1, Math.min(threads, files.size())),
                        new ExecutorThreadFactory("stoker-listing"));
        AtomicInteger done = new AtomicInteger();
        AtomicLong records = new AtomicLong();
        try {
            List<Future<?>> futures = new ArrayList<>();
            for (int f = 0; f < files.size(); f++) {
                int i = f;
                futures.add(
                        pool.submit(
                                () -> {
                                    out[i] = indexes.summary(files.get(i));
                                    records.addAndGet(out[i].numRecords());
                                    done.incrementAndGet();
                                    return null;
                                }));
            }
            long start = System.currentTimeMillis();
            long lastLog = start;
            for (Future<?> future : futures) {
                while (true) {
                    try {
                        future.get(PROGRESS_EVERY_MS, TimeUnit.MILLISECONDS);
                        break;
                    } catch (java.util.concurrent.TimeoutException slow) {
                        // fall through to the progress line
                    }
                    long now = System.currentTimeMillis();
                    if (now - lastLog >= PROGRESS_EVERY_MS) {
                        LOG.info(
                                "Listing {}: {} of {} files indexed, {} records, {} s",
                                root,
                                done.get(),
                                files.size(),
                                records.get(),
                                (now - start) / 1000);
                        lastLog = now;
                    }
                }
            }
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            throw cause instanceof IOException io ? io : new IOException(cause);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted while listing " + root, e);
        } finally {
            pool.shutdownNow();
        }
        return out;
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
     * its number of records (8-byte big-endian integers), then the 32-byte SHA-256 of its records'
     * byte offsets and 1-based line numbers (each an 8-byte big-endian integer, in record order).
     * The same for a copy of the dataset under another root or filesystem; another when a file is
     * added, removed or renamed, or a record added, removed, moved to another line or changed in
     * length. It does not read the records' bytes: an edit that keeps every record's length and
     * line keeps the fingerprint.
     */
    public String fingerprint() {
        return fingerprint;
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
        return fileBase[fileBase.length - 1];
    }

    /**
     * Which file holds record {@code index} (listing order), and which of its records it is.
     *
     * @throws IndexOutOfBoundsException if {@code index} is not in {@code [0, numRecords())}
     */
    public Location locate(long index) {
        if (index < 0 || index >= numRecords()) {
            throw new IndexOutOfBoundsException("record " + index + " of " + numRecords());
        }
        int f = Arrays.binarySearch(fileBase, index);
        f = f >= 0 ? f : -f - 2;
        while (fileBase[f + 1] == index) {
            f++; // skip files without records
        }
        return new Location(f, (int) (index - fileBase[f]));
    }

    /**
     * The record index of file {@code file}, of the version listed.
     *
     * @throws IOException if the file cannot be read or has changed since the listing
     */
    RecordIndex index(int file) throws IOException {
        return indexes.load(files.get(file), sizes[file], modificationTimes[file]);
    }

    private static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every Java platform has SHA-256", e);
        }
    }
}
