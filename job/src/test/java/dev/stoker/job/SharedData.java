package dev.stoker.job;

import java.nio.file.Files;
import java.nio.file.Path;

/** Locates {@code ../shared/data} (beside the repository) for tests that use the real inputs. */
final class SharedData {
    private SharedData() {}

    static Path dataDir() {
        for (Path dir = Path.of("").toAbsolutePath(); dir != null; dir = dir.getParent()) {
            Path candidate = dir.resolve("shared/data");
            if (Files.isDirectory(candidate)) {
                return candidate;
            }
        }
        throw new IllegalStateException(
                "../shared/data not found above "
                        + Path.of("").toAbsolutePath()
                        + "; tests need the shared inputs beside the repository");
    }
}
