package dev.stoker.connectors.shm;

import java.io.IOException;
import java.io.Serializable;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.FileAttribute;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Set;

/**
 * File names of the batch protocol ({@code docs/batch-protocol.md}) under a job directory such as
 * {@code /dev/shm/stoker/<job-name>/}. The Python reader mirrors these names.
 */
public final class ShmLayout implements Serializable {
    private static final long serialVersionUID = 1L;

    /** Owner-only permissions for directories. */
    static final FileAttribute<Set<PosixFilePermission>> DIR_PERMISSIONS =
            PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------"));

    /** Owner-only permissions for files. */
    static final FileAttribute<Set<PosixFilePermission>> FILE_PERMISSIONS =
            PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------"));

    private final String jobDir;

    /**
     * @param jobDir the job directory, e.g. {@code /dev/shm/stoker/<job-name>}
     */
    public ShmLayout(String jobDir) {
        this.jobDir = jobDir;
    }

    public Path jobDir() {
        return Path.of(jobDir);
    }

    public Path manifest() {
        return jobDir().resolve("manifest.json");
    }

    public Path rankDir(int rank) {
        return jobDir().resolve("rank-" + rank);
    }

    /** Published batch file {@code rank-<r>/step-<s:010d>.arrow}. */
    public Path batchFile(long step, int rank) {
        return rankDir(rank).resolve(String.format("step-%010d.arrow", step));
    }

    /** Temporary name a batch is written under before it is published by rename. */
    public Path tempBatchFile(long step, int rank) {
        return rankDir(rank).resolve(String.format(".step-%010d.arrow.tmp", step));
    }

    /** The reader's acknowledgement file {@code rank-<r>/ack.json}. */
    public Path ackFile(int rank) {
        return rankDir(rank).resolve("ack.json");
    }

    /** Creates {@code dir} (and parents) with owner-only permissions if missing. */
    static void createPrivateDirectories(Path dir) throws IOException {
        if (!Files.isDirectory(dir)) {
            Files.createDirectories(dir, DIR_PERMISSIONS);
        }
    }

    /** Atomically renames {@code tmp} to {@code target}, replacing it. */
    static void publish(Path tmp, Path target) throws IOException {
        try {
            Files.move(
                    tmp,
                    target,
                    StandardCopyOption.ATOMIC_MOVE,
                    StandardCopyOption.REPLACE_EXISTING);
        } catch (AtomicMoveNotSupportedException e) {
            throw new IOException("Batch directory does not support atomic rename: " + target, e);
        }
    }
}
