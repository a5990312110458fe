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
        assertLocation(listing.locate(0), 0, 0, 1);
        assertLocation(listing.locate(2), 0, 6, 3);
        assertLocation(listing.locate(3), 1, 0, 1);
        assertLocation(listing.locate(4), 1, 4, 3); // after a blank line
        assertLocation(listing.locate(5), 2, 0, 1);
    }

    @Test
    void locatesRecordsAcrossFilesWithoutRecords() throws IOException {
        Files.writeString(dir.resolve("a.jsonl"), "{}\r\n{\"x\": 1}\r\n");
        Files.writeString(dir.resolve("b.jsonl"), "\n \n");
        Files.writeString(dir.resolve("c.jsonl"), "");
        Files.writeString(dir.resolve("d.jsonl"), "{}");

        DatasetListing listing =
                DatasetListing.scan(
                        new org.apache.flink.core.fs.Path(dir.toUri()), "*.jsonl", 1024);

        assertThat(listing.numRecords()).isEqualTo(3);
        assertLocation(listing.locate(1), 0, 4, 2);
        assertLocation(listing.locate(2), 3, 0, 1);
        assertThatThrownBy(() -> listing.locate(3)).isInstanceOf(IndexOutOfBoundsException.class);
    }

    private static void assertLocation(
            DatasetListing.Location at, int file, long offset, long line) {
        assertThat(at.file).as("file").isEqualTo(file);
        assertThat(at.offset).as("offset").isEqualTo(offset);
        assertThat(at.line).as("line").isEqualTo(line);
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
