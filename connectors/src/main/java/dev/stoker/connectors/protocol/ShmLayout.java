package dev.stoker.connectors.protocol;

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
 * File names of the batch protocol ({@code docs/batch-protocol.md}) for one generation of a job:
 * {@code <job dir>/manifest.json} names the current generation, whose files live under {@code <job
 * dir>/gen-<generation>/rank-<r>/}; and the owner-only, publish-by-rename way every protocol file
 * is written. The Python reader ({@code stoker.protocol}) mirrors these names; both sides' tests
 * check them against {@code "files"} in {@code schema/batch-schema.json}.
 */
public final class ShmLayout implements Serializable {
    private static final long serialVersionUID = 2L;

    /** Owner-only permissions for directories. */
    public static final FileAttribute<Set<PosixFilePermission>> DIR_PERMISSIONS =
            PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------"));

    /** Owner-only permissions for files. */
    public static final FileAttribute<Set<PosixFilePermission>> FILE_PERMISSIONS =
            PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------"));

    /** Prefix of generation directory names. */
    public static final String GENERATION_PREFIX = "gen-";

    /** File name of a rank's acknowledgement ({@link Ack}) in its rank directory. */
    public static final String ACK_FILE_NAME = "ack.json";

    private final String jobDir;
    private final String generation;

    /**
     * @param jobDir the job directory, e.g. {@code /dev/shm/stoker/<job-name>}
     * @param generation this submission's generation stamp (letters, digits, {@code -} and {@code
     *     _})
     * @throws IllegalArgumentException if the generation has other characters
     */
    public ShmLayout(String jobDir, String generation) {
        if (!isGenerationStamp(generation)) {
            throw new IllegalArgumentException("Invalid generation stamp: '" + generation + "'");
        }
        this.jobDir = jobDir;
        this.generation = generation;
    }

    /** Whether {@code stamp} is a valid generation stamp: letters, digits, {@code -}, {@code _}. */
    public static boolean isGenerationStamp(String stamp) {
        return stamp.matches("[A-Za-z0-9_-]+");
    }

    public Path jobDir() {
        return Path.of(jobDir);
    }

    public String generation() {
        return generation;
    }

    /** {@code manifest.json} in the job directory: names the current generation. */
    public Path manifest() {
        return jobDir().resolve(Manifest.FILE_NAME);
    }

    /** This generation's directory {@code gen-<generation>}. */
    public Path generationDir() {
        return jobDir().resolve(GENERATION_PREFIX + generation);
    }

    public Path rankDir(int rank) {
        return generationDir().resolve("rank-" + rank);
    }

    /** Published batch file {@code rank-<r>/step-<s:010d>.arrow}. */
    public Path batchFile(long step, int rank) {
        return rankDir(rank).resolve(String.format("step-%010d.arrow", step));
    }

    /** Whether {@code fileName} is a published batch file ({@code step-<s>.arrow}). */
    public static boolean isBatchFile(String fileName) {
        return fileName.startsWith("step-") && fileName.endsWith(".arrow");
    }

    /** Temporary name a batch is written under before it is published by rename. */
    public Path tempBatchFile(long step, int rank) {
        return rankDir(rank).resolve(String.format(".step-%010d.arrow.tmp", step));
    }

    /** Directory of the rank's staged slots (samples waiting for the rest of their batch). */
    public Path stagingDir(int rank) {
        return rankDir(rank).resolve(".staging");
    }

    /** Staged slot {@code .staging/step-<s:010d>.slot-<k>}. */
    public Path stagedSlot(long step, int rank, int slot) {
        return stagingDir(rank).resolve(String.format("step-%010d.slot-%d", step, slot));
    }

    /** The reader's acknowledgement file {@code rank-<r>/ack.json}. */
    public Path ackFile(int rank) {
        return rankDir(rank).resolve(ACK_FILE_NAME);
    }

    /** Creates {@code dir} (and parents) with owner-only permissions if missing. */
    public static void createPrivateDirectories(Path dir) throws IOException {
        if (!Files.isDirectory(dir)) {
            Files.createDirectories(dir, DIR_PERMISSIONS);
        }
    }

    /**
     * Atomically renames {@code tmp} to {@code target}, replacing it.
     *
     * @throws IOException if the rename fails or the filesystem has no atomic rename
     */
    public static void publish(Path tmp, Path target) throws IOException {
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
