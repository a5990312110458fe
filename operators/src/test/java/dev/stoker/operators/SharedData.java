package dev.stoker.operators;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;

/** Locates {@code shared/data} by walking up from the working directory. */
public final class SharedData {
    private SharedData() {}

    /** The {@code shared/data} folder; fails with a clear message when it cannot be found. */
    public static Path root() {
        Path start = Path.of("").toAbsolutePath();
        for (Path p = start; p != null; p = p.getParent()) {
            Path candidate = p.resolve("shared").resolve("data");
            if (Files.isDirectory(candidate)) {
                return candidate;
            }
        }
        throw new IllegalStateException(
                "shared/data not found in "
                        + start
                        + " or any parent; the test data lives in the folder"
                        + " above the repository root (e.g. /work/shared/data)");
    }

    /** A file under {@code shared/data}. */
    public static Path path(String relative) {
        return root().resolve(relative);
    }

    /** The bytes of a file under {@code shared/data}. */
    public static byte[] bytes(String relative) {
        try {
            return Files.readAllBytes(path(relative));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
