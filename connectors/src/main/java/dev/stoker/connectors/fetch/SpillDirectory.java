package dev.stoker.connectors.fetch;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.FileSystems;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.flink.api.common.TaskInfo;
import org.apache.flink.api.common.functions.RuntimeContext;
import org.apache.flink.util.FileUtils;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One fetch subtask attempt's directory of video spill files, {@code stoker-video-spill-<job
 * id>-subtask-<index>-attempt-<attempt>} under {@link SpillSettings#directory()}: created
 * (owner-only on POSIX filesystems) when the subtask opens, deleted with everything in it when it
 * closes, so the files of records in flight when a task fails or is cancelled go with it.
 *
 * <p>A TaskManager that dies cannot delete its directories. Streaming jobs run one attempt of a
 * subtask at a time, so when a subtask opens, every other directory of the same job and subtask
 * index on this machine (an earlier attempt's, whose task is over) is stale, and is deleted then.
 * Directories of another job are never touched (another job may be running on this TaskManager).
 *
 * <p>The files: {@link #newFile()} names a new file; whoever writes it owns it until it is handed
 * on in a record ({@code FetchedRecord.videoFiles}), whose media stage deletes it once decoded.
 * Thread-safe.
 */
public final class SpillDirectory implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(SpillDirectory.class);

    /** The first part of every spill directory's name. */
    static final String PREFIX = "stoker-video-spill-";

    private final Path path;
    private final long thresholdBytes;
    private final AtomicLong files = new AtomicLong();

    private SpillDirectory(Path path, long thresholdBytes) {
        this.path = path;
        this.thresholdBytes = thresholdBytes;
    }

    /**
     * Creates the spill directory of the calling subtask attempt ({@code context}'s job, subtask
     * index and attempt number), after deleting those of earlier attempts of the same subtask.
     *
     * @throws IOException if the directory cannot be created (the message names it and {@code
     *     stoker.video.spill-dir})
     */
    public static SpillDirectory create(SpillSettings settings, RuntimeContext context)
            throws IOException {
        TaskInfo task = context.getTaskInfo();
        return create(
                settings,
                context.getJobInfo().getJobId().toString(),
                task.getIndexOfThisSubtask(),
                task.getAttemptNumber());
    }

    /**
     * Creates the spill directory of attempt {@code attempt} of subtask {@code subtask} of job
     * {@code jobId}, after deleting every other directory of that job and subtask.
     *
     * @throws IOException if the directory cannot be created (the message names it and {@code
     *     stoker.video.spill-dir})
     */
    static SpillDirectory create(SpillSettings settings, String jobId, int subtask, int attempt)
            throws IOException {
        Path parent =
                Path.of(
                                settings.directory() != null
                                        ? settings.directory()
                                        : System.getProperty("java.io.tmpdir"))
                        .toAbsolutePath();
        String stem = PREFIX + jobId + "-subtask-" + subtask + "-attempt-";
        Path dir = parent.resolve(stem + attempt);
        try {
            Files.createDirectories(parent);
            deleteStale(parent, stem);
            if (FileSystems.getDefault().supportedFileAttributeViews().contains("posix")) {
                Files.createDirectory(
                        dir,
                        PosixFilePermissions.asFileAttribute(
                                PosixFilePermissions.fromString("rwx------")));
            } else {
                Files.createDirectory(dir);
            }
        } catch (IOException e) {
            throw new IOException(
                    "cannot create the video spill directory "
                            + dir
                            + " (stoker.video.spill-dir): "
                            + e,
                    e);
        }
        return new SpillDirectory(dir, settings.thresholdBytes());
    }

    /** Deletes every directory in {@code parent} named {@code stem<attempt number>}. */
    private static void deleteStale(Path parent, String stem) throws IOException {
        try (DirectoryStream<Path> entries =
                Files.newDirectoryStream(
                        parent,
                        p -> {
                            String name = p.getFileName().toString();
                            return name.startsWith(stem)
                                    && name.length() > stem.length()
                                    && name.substring(stem.length())
                                            .chars()
                                            .allMatch(Character::isDigit);
                        })) {
            for (Path stale : entries) {
                LOG.info(
                        "Deleting the video spill directory {} of an earlier attempt of this"
                                + " subtask",
                        stale);
                FileUtils.deleteDirectory(stale.toFile());
            }
        }
    }

    /** The directory. */
    public Path path() {
        return path;
    }

    /** Whether a video of {@code sizeBytes} bytes goes to a spill file (above the threshold). */
    public boolean spills(long sizeBytes) {
        return sizeBytes > thresholdBytes;
    }

    /** A new file name in the directory, unique in it; the file is not created. */
    public Path newFile() {
        return path.resolve("video-" + files.incrementAndGet());
    }

    /**
     * Deletes {@code file} if it exists; a failure is logged (the directory's deletion on close
     * takes it then). Does nothing for null.
     */
    public static void deleteQuietly(Path file) {
        if (file == null) {
            return;
        }
        try {
            Files.deleteIfExists(file);
        } catch (IOException e) {
            LOG.warn("Could not delete the video spill file {}", file, e);
        }
    }

    /** Deletes the directory and every file in it; a failure is logged. */
    @Override
    public void close() {
        try {
            FileUtils.deleteDirectory(path.toFile());
        } catch (IOException e) {
            LOG.warn("Could not delete the video spill directory {}", path, e);
        }
    }

    @Override
    public String toString() {
        return path.toString();
    }
}
