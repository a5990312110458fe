package dev.stoker.connectors.source;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.UUID;
import org.apache.flink.core.fs.FSDataInputStream;
import org.apache.flink.core.fs.FileStatus;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.fs.Path;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Where the {@link RecordIndex} of each JSONL file is kept once built: a directory on any Flink
 * filesystem (local, or shared such as {@code s3://bucket/stoker-index/} so that every TaskManager
 * reuses what the client built), one file per JSONL file named by the SHA-256 of its URI, valid
 * while the file's size and modification time are those recorded in it. A missing, stale or
 * unreadable entry is rebuilt by reading the JSONL file and written back; a cache that cannot be
 * written only costs the rebuild next time.
 */
public final class RecordIndexCache implements Serializable {
    private static final long serialVersionUID = 1L;
    private static final Logger LOG = LoggerFactory.getLogger(RecordIndexCache.class);

    private final String directory;
    private final int maxLineBytes;

    /**
     * @param directory the cache directory (any Flink filesystem URI or local path)
     * @param maxLineBytes the source's line length limit, with which indexes are built
     */
    public RecordIndexCache(String directory, int maxLineBytes) {
        this.directory = directory;
        this.maxLineBytes = maxLineBytes;
    }

    /** The cache directory as given. */
    public String directory() {
        return directory;
    }

    /**
     * The planning summary of {@code file} (its record count and digest), from the cache when
     * current (only the entry's header is read), else built and stored.
     *
     * @throws IOException if the JSONL file cannot be read
     */
    RecordIndex.Summary summary(FileStatus file) throws IOException {
        Path entry = entry(file.getPath().toString());
        try (DataInputStream in = open(entry)) {
            if (in != null) {
                RecordIndex.Summary summary = RecordIndex.readSummary(in);
                if (summary.fileSize() == file.getLen()
                        && summary.modificationTime() == file.getModificationTime()) {
                    return summary;
                }
            }
        } catch (IOException e) {
            LOG.info(
                    "Record index {} of {} is not readable ({}); rebuilding it",
                    entry,
                    file.getPath(),
                    e.toString());
        }
        return build(file.getPath(), file.getLen(), file.getModificationTime()).summary();
    }

    /**
     * The index of {@code uri} as planned: of the version of size {@code size} and modification
     * time {@code modificationTime}.
     *
     * @throws IOException if the file cannot be read, or has changed since it was planned
     */
    RecordIndex load(String uri, long size, long modificationTime) throws IOException {
        Path entry = entry(uri);
        try (DataInputStream in = open(entry)) {
            if (in != null) {
                RecordIndex index = RecordIndex.readFrom(in);
                if (index.fileSize == size && index.modificationTime == modificationTime) {
                    return index;
                }
            }
        } catch (IOException e) {
            LOG.info(
                    "Record index {} of {} is not readable ({}); rebuilding it",
                    entry,
                    uri,
                    e.toString());
        }
        Path path = new Path(uri);
        FileStatus now = path.getFileSystem().getFileStatus(path);
        if (now.getLen() != size || now.getModificationTime() != modificationTime) {
            throw new IOException(
                    uri
                            + " changed after the job was planned (size "
                            + size
                            + " -> "
                            + now.getLen()
                            + ", modification time "
                            + modificationTime
                            + " -> "
                            + now.getModificationTime()
                            + "): resubmit to plan the new version");
        }
        return build(path, size, modificationTime);
    }

    private RecordIndex build(Path file, long size, long modificationTime) throws IOException {
        RecordIndex index;
        try (FSDataInputStream in = file.getFileSystem().open(file)) {
            index = RecordIndex.build(in, size, modificationTime, maxLineBytes);
        }
        store(file.toString(), index);
        return index;
    }

    private void store(String uri, RecordIndex index) {
        Path entry = entry(uri);
        Path tmp = new Path(entry.getParent(), "." + entry.getName() + "." + UUID.randomUUID());
        try {
            FileSystem fs = entry.getFileSystem();
            fs.mkdirs(entry.getParent());
            try (DataOutputStream out =
                    new DataOutputStream(
                            new BufferedOutputStream(
                                    fs.create(tmp, FileSystem.WriteMode.OVERWRITE), 1 << 16))) {
                index.writeTo(out);
            }
            if (!fs.rename(tmp, entry)) {
                fs.delete(entry, false);
                if (!fs.rename(tmp, entry)) {
                    throw new IOException("rename to " + entry + " failed");
                }
            }
        } catch (IOException | RuntimeException e) {
            LOG.info("Record index of {} not kept in {}: {}", uri, directory, e.toString());
            try {
                tmp.getFileSystem().delete(tmp, false);
            } catch (IOException | RuntimeException ignored) {
                // nothing was written
            }
        }
    }

    private static DataInputStream open(Path entry) throws IOException {
        try {
            FileSystem fs = entry.getFileSystem();
            if (!fs.exists(entry)) {
                return null;
            }
            return new DataInputStream(new BufferedInputStream(fs.open(entry), 1 << 16));
        } catch (FileNotFoundException e) {
            return null;
        }
    }

    private Path entry(String uri) {
        MessageDigest sha;
        try {
            sha = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every Java platform has SHA-256", e);
        }
        String name = HexFormat.of().formatHex(sha.digest(uri.getBytes(StandardCharsets.UTF_8)));
        return new Path(new Path(directory), name + ".idx");
    }
}
