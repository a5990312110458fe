package dev.stoker.connectors.shm;

import dev.stoker.connectors.protocol.ShmLayout;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.stream.Stream;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** Cleans what earlier runs of a job left in its shared-memory directory. */
final class Generations {
    private static final Logger LOG = LoggerFactory.getLogger(Generations.class);

    private Generations() {}

    /**
     * Deletes the directories of other generations: earlier submissions of the job, crashed or
     * finished. Their batches were cut for a different first step and must never be read as fresh.
     */
    static void removeOtherGenerations(ShmLayout layout) throws IOException {
        if (!Files.isDirectory(layout.jobDir())) {
            return;
        }
        try (DirectoryStream<Path> dirs =
                Files.newDirectoryStream(layout.jobDir(), ShmLayout.GENERATION_PREFIX + "*")) {
            for (Path dir : dirs) {
                if (!dir.equals(layout.generationDir())) {
                    LOG.info("Removing stale generation {}", dir);
                    try (Stream<Path> walk = Files.walk(dir)) {
                        walk.sorted(Comparator.reverseOrder()).forEach(Generations::deleteQuietly);
                    } catch (UncheckedIOException e) {
                        LOG.warn("Could not fully remove {}: {}", dir, e.toString());
                    }
                }
            }
        }
    }

    /**
     * Deletes the half-written temporary files ({@code *.tmp}) a crashed attempt left directly in
     * {@code dir}. Batches and staged slots stay: they are identical to what this run writes.
     */
    static void removeTemporaryFiles(Path dir) throws IOException {
        if (!Files.isDirectory(dir)) {
            return;
        }
        try (DirectoryStream<Path> tmps = Files.newDirectoryStream(dir, "*.tmp")) {
            for (Path tmp : tmps) {
                deleteQuietly(tmp);
            }
        }
    }

    private static void deleteQuietly(Path p) {
        try {
            Files.deleteIfExists(p);
        } catch (IOException e) {
            LOG.debug("Could not delete {}: {}", p, e.toString());
        }
    }
}
