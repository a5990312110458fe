package dev.stoker.operators;

import java.nio.file.Files;
import java.nio.file.Path;

/** Locates the shared test data ({@code shared/data}) by walking up from the working directory. */
public final class SharedData {
    private SharedData() {}

    /** The {@code shared/data} folder; fails with a clear message when it cannot be found. */
    public static Path dataDir() {
        Path start = Path.of("").toAbsolutePath();
        for (Path dir = start; dir != null; dir = dir.getParent()) {
            Path candidate = dir.resolve("shared").resolve("data");
            if (Files.isDirectory(candidate)) {
                return candidate;
            }
        }
        throw new IllegalStateException("shared/data not found in " + start + " or any parent directory");
    }
}
