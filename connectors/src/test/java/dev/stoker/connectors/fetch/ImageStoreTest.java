package dev.stoker.connectors.fetch;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.text.Normalizer;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

class ImageStoreTest {

    @TempDir Path dir;

    private ImageStore store(long max) throws Exception {
        Path root = Files.createDirectories(dir.resolve("root"));
        Files.createDirectories(root.resolve("images"));
        Files.write(root.resolve("images/a.jpg"), new byte[] {1, 2, 3});
        Files.write(dir.resolve("secret.txt"), new byte[] {9});
        return new ImageStore(root.toUri().toString(), max, 100);
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

    /** A video is read like an image, with its own limit and reasons. */
    @Test
    void videosHaveTheirOwnLimitAndReasons() throws Exception {
        Path root = Files.createDirectories(dir.resolve("media"));
        Files.write(root.resolve("a.mp4"), new byte[] {1, 2, 3, 4});
        ImageStore store = new ImageStore(root.toUri().toString(), 100, 3);
        assertThat(store.read("a.mp4")).containsExactly(1, 2, 3, 4);
        assertThatThrownBy(() -> store.read("a.mp4", Media.VIDEO))
                .satisfies(
                        e ->
                                assertThat(((RejectedRecordException) e).reason())
                                        .isEqualTo(RejectReason.VIDEO_FILE_TOO_LARGE))
                .hasMessage("'a.mp4' is 4 bytes, above the video limit of 3");
        assertThatThrownBy(() -> store.read("b.mp4", Media.VIDEO))
                .satisfies(
                        e ->
                                assertThat(((RejectedRecordException) e).reason())
                                        .isEqualTo(RejectReason.VIDEO_NOT_FOUND))
                .hasMessageContaining("'b.mp4' not found under");
        assertThat(new ImageStore(root.toUri().toString(), 1, 4).read("a.mp4", Media.VIDEO))
                .containsExactly(1, 2, 3, 4);
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
        ImageStore viaLink = new ImageStore(link.toUri().toString(), 100, 100);
        assertThat(viaLink.read("images/a.jpg")).containsExactly(1, 2, 3);
    }

    /**
     * A dataset that keeps annotations and images apart: the store's root is the image directory,
     * and the same escape rules hold relative to it.
     */
    @Test
    void pathsResolveAgainstAnImageRootApartFromTheJsonl() throws Exception {
        Files.createDirectories(dir.resolve("annotations"));
        Files.createDirectories(dir.resolve("images/photos"));
        Files.createDirectories(dir.resolve("images-private"));
        Files.writeString(dir.resolve("annotations/train.jsonl"), "{}\n");
        Files.write(dir.resolve("images/photos/a.jpg"), new byte[] {4, 5});
        Files.write(dir.resolve("images-private/b.jpg"), new byte[] {6});
        ImageStore store = new ImageStore(dir.resolve("images").toUri().toString(), 100, 100);

        assertThat(store.read("photos/a.jpg")).containsExactly(4, 5);
        for (String escaping :
                List.of(
                        "../annotations/train.jsonl",
                        "photos/../../annotations/train.jsonl",
                        "../images-private/b.jpg",
                        dir.resolve("images-private/b.jpg").toString())) {
            assertThatThrownBy(() -> store.read(escaping))
                    .as(escaping)
                    .isInstanceOfSatisfying(
                            RejectedRecordException.class,
                            e -> assertThat(e.reason()).isEqualTo(RejectReason.UNSAFE_PATH))
                    .hasMessageContaining("image root");
        }
    }

    @ParameterizedTest
    @CsvSource({
        "s3://b/images/, photos/a.jpg, s3://b/images/photos/a.jpg",
        "s3://b/images/, ./x/../a.jpg, s3://b/images/a.jpg",
        "s3://b/, images/a.jpg, s3://b/images/a.jpg",
        "file:/data/images/, a.jpg, file:/data/images/a.jpg"
    })
    void resolvesUnderTheRoot(String root, String path, String expected) throws Exception {
        assertThat(ImageStore.resolveUnderRoot(root, path).toString()).isEqualTo(expected);
    }

    @ParameterizedTest
    @CsvSource({
        "s3://b/images/, ../annotations/train.jsonl",
        "s3://b/images/, ../images-private/a.jpg",
        "s3://b/images/, a/../../annotations/x.jpg",
        "s3://b/images/, //other-bucket/images/a.jpg",
        "s3://b/images/, s3://other/images/a.jpg",
        "file:/data/images/, /etc/passwd"
    })
    void rejectsWhatLeavesTheRoot(String root, String path) {
        assertThatThrownBy(() -> ImageStore.resolveUnderRoot(root, path))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> assertThat(e.reason()).isEqualTo(RejectReason.UNSAFE_PATH));
    }

    /**
     * Names are matched as written (no Unicode normalization): a file named in NFD ("cafe" +
     * U+0301) is found by its NFD spelling; its NFC spelling (U+00E9) is another name, not found,
     * and the message names the path and the spelling that exists.
     */
    @Test
    void imageNamesAreMatchedAsWrittenWithoutUnicodeNormalization() throws Exception {
        String nfd = "images/cafe\u0301.png";
        String nfc = "images/caf\u00e9.png";
        assertThat(Normalizer.normalize(nfd, Normalizer.Form.NFC)).isEqualTo(nfc);
        ImageStore store = store(100);
        Path file = dir.resolve("root").resolve(nfd);
        Files.write(file, new byte[] {7});
        assertThat(file.getFileName().toString().getBytes(StandardCharsets.UTF_8))
                .as("the file system keeps the NFD bytes")
                .endsWith("e\u0301.png".getBytes(StandardCharsets.UTF_8));

        assertThat(store.read(nfd)).containsExactly(7);
        assertThatThrownBy(() -> store.read(nfc))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> assertThat(e.reason()).isEqualTo(RejectReason.IMAGE_NOT_FOUND))
                .hasMessageContaining("'" + nfc + "' not found")
                .hasMessageContaining("'" + nfd + "'")
                .hasMessageContaining("without Unicode normalization");
        // no hint when no other spelling exists
        assertThatThrownBy(() -> store.read("images/na\u00efve.png"))
                .hasMessageNotContaining("normalization");
    }
}
