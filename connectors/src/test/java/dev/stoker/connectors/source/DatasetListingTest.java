package dev.stoker.connectors.source;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class DatasetListingTest {

    @TempDir Path dir;

    @Test
    void listsMatchingFilesInPathOrderAndCountsNonBlankLines() throws IOException {
        Files.createDirectories(dir.resolve("sub"));
        Files.writeString(dir.resolve("b.jsonl"), "{}\n\n{}\n");
        Files.writeString(dir.resolve("a.jsonl"), "{}\n{}\n{}");
        Files.writeString(dir.resolve("sub/c.jsonl"), "{}\n");
        Files.writeString(dir.resolve("notes.txt"), "{}\n");

        DatasetListing listing =
                DatasetListing.scan(
                        new org.apache.flink.core.fs.Path(dir.toUri()), "*.jsonl", 1024);

        assertThat(listing.files()).hasSize(3);
        assertThat(listing.files().get(0)).endsWith("/a.jsonl");
        assertThat(listing.files().get(1)).endsWith("/b.jsonl");
        assertThat(listing.files().get(2)).endsWith("/sub/c.jsonl");
        assertThat(listing.numRecords()).isEqualTo(6);
        assertThat(listing.baseIndex(listing.files().get(0))).isZero();
        assertThat(listing.baseIndex(listing.files().get(1))).isEqualTo(3);
        assertThat(listing.baseIndex(listing.files().get(2))).isEqualTo(5);
    }

    @Test
    void failsClearlyWhenNothingMatches() {
        assertThatThrownBy(
                        () ->
                                DatasetListing.scan(
                                        new org.apache.flink.core.fs.Path(dir.toUri()),
                                        "*.jsonl",
                                        1024))
                .isInstanceOf(IOException.class)
                .hasMessageContaining("No file matching '*.jsonl'");
        assertThatThrownBy(
                        () ->
                                DatasetListing.scan(
                                        new org.apache.flink.core.fs.Path(
                                                dir.resolve("nope").toUri()),
                                        "*.jsonl",
                                        1024))
                .hasMessageContaining("does not exist");
    }
}
