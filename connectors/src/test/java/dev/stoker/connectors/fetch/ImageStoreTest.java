package dev.stoker.connectors.fetch;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class ImageStoreTest {

    @TempDir Path dir;

    private ImageStore store(long max) throws Exception {
        Path root = Files.createDirectories(dir.resolve("root"));
        Files.createDirectories(root.resolve("images"));
        Files.write(root.resolve("images/a.jpg"), new byte[] {1, 2, 3});
        Files.write(dir.resolve("secret.txt"), new byte[] {9});
        return new ImageStore(root.toUri().toString(), max);
    }

    @Test
    void readsBytesRelativeToTheRoot() throws Exception {
        assertThat(store(100).read("images/a.jpg")).containsExactly(1, 2, 3);
        assertThat(store(100).read("images/../images/a.jpg")).containsExactly(1, 2, 3);
    }

    @ParameterizedTest
    @ValueSource(strings = {"../secret.txt", "images/../../secret.txt", "/etc/passwd"})
    void rejectsPathsLeavingTheRoot(String path) throws Exception {
        ImageStore store = store(100);
        assertThatThrownBy(() -> store.read(path))
                .isInstanceOf(RejectedRecordException.class)
                .satisfies(
                        e ->
                                assertThat(((RejectedRecordException) e).reason())
                                        .isEqualTo(RejectReason.UNSAFE_PATH));
    }

    @Test
    void missingAndOversizedObjectsAreRejectedWithTheirReason() throws Exception {
        ImageStore store = store(2);
        assertThatThrownBy(() -> store.read("images/none.png"))
                .satisfies(
                        e ->
                                assertThat(((RejectedRecordException) e).reason())
                                        .isEqualTo(RejectReason.IMAGE_NOT_FOUND))
                .hasMessageContaining("images/none.png");
        assertThatThrownBy(() -> store.read("images/a.jpg"))
                .satisfies(
                        e ->
                                assertThat(((RejectedRecordException) e).reason())
                                        .isEqualTo(RejectReason.IMAGE_TOO_LARGE))
                .hasMessageContaining("3 bytes");
    }

    @Test
    void symbolicLinksMayNotLeaveTheRoot() throws Exception {
        ImageStore store = store(100);
        Path root = dir.resolve("root");
        Files.createSymbolicLink(root.resolve("images/escape.jpg"), dir.resolve("secret.txt"));
        Files.createSymbolicLink(root.resolve("images/alias.jpg"), root.resolve("images/a.jpg"));

        assertThatThrownBy(() -> store.read("images/escape.jpg"))
                .satisfies(
                        e ->
                                assertThat(((RejectedRecordException) e).reason())
                                        .isEqualTo(RejectReason.UNSAFE_PATH))
                .hasMessageContaining("symbolic link");
        assertThat(store.read("images/alias.jpg")).containsExactly(1, 2, 3);
    }

    @Test
    void aRootReachedThroughASymbolicLinkStillWorks() throws Exception {
        store(100);
        Path link = Files.createSymbolicLink(dir.resolve("root-link"), dir.resolve("root"));
        ImageStore viaLink = new ImageStore(link.toUri().toString(), 100);
        assertThat(viaLink.read("images/a.jpg")).containsExactly(1, 2, 3);
    }
}
