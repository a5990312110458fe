package dev.stoker.connectors.source;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.model.JsonlLine;
import dev.stoker.operators.parse.ByteOrderMark;
import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

class DatasetListingTest {

    @TempDir Path dir;
    @TempDir Path cache;

    @Test
    void listsMatchingFilesInPathOrderAndCountsNonBlankLines() throws IOException {
        Files.createDirectories(dir.resolve("sub"));
        Files.writeString(dir.resolve("b.jsonl"), "{}\n\n{}\n");
        Files.writeString(dir.resolve("a.jsonl"), "{}\n{}\n{}");
        Files.writeString(dir.resolve("sub/c.jsonl"), "{}\n");
        Files.writeString(dir.resolve("notes.txt"), "{}\n");

        DatasetListing listing = scan();

        assertThat(listing.files()).hasSize(3);
        assertThat(listing.files().get(0)).endsWith("/a.jsonl");
        assertThat(listing.files().get(1)).endsWith("/b.jsonl");
        assertThat(listing.files().get(2)).endsWith("/sub/c.jsonl");
        assertThat(listing.numRecords()).isEqualTo(6);
        assertLocation(listing, 0, 0, 0, 1);
        assertLocation(listing, 2, 0, 6, 3);
        assertLocation(listing, 3, 1, 0, 1);
        assertLocation(listing, 4, 1, 4, 3); // after a blank line
        assertLocation(listing, 5, 2, 0, 1);
    }

    @Test
    void locatesRecordsAcrossFilesWithoutRecords() throws IOException {
        Files.writeString(dir.resolve("a.jsonl"), "{}\r\n{\"x\": 1}\r\n");
        Files.writeString(dir.resolve("b.jsonl"), "\n \n");
        Files.writeString(dir.resolve("c.jsonl"), "");
        Files.writeString(dir.resolve("d.jsonl"), "{}");

        DatasetListing listing = scan();

        assertThat(listing.numRecords()).isEqualTo(3);
        assertLocation(listing, 1, 0, 4, 2);
        assertLocation(listing, 2, 3, 0, 1);
        assertThatThrownBy(() -> listing.locate(3)).isInstanceOf(IndexOutOfBoundsException.class);
    }

    /**
     * The fingerprint is the documented SHA-256 (assembled here with {@link DataOutputStream},
     * whose longs are big-endian), the same for a copy under another root, and another for each
     * change of the listing.
     */
    @Test
    void fingerprintIsTheDocumentedDigestOfTheListing(@TempDir Path other) throws Exception {
        Files.createDirectories(dir.resolve("sub"));
        Files.writeString(dir.resolve("a.jsonl"), "{}\n\n{\"k\": 1}\n");
        Files.writeString(dir.resolve("sub/b.jsonl"), "{}");
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        DataOutputStream out = new DataOutputStream(bytes);
        out.write("a.jsonl".getBytes(StandardCharsets.UTF_8));
        out.write(0);
        out.writeLong(13); // bytes
        out.writeLong(2); // records
        out.write(sha256(0, 1, 4, 3)); // record 0: byte 0, line 1; record 1: after "{}\n\n", line 3
        out.write("sub/b.jsonl".getBytes(StandardCharsets.UTF_8));
        out.write(0);
        out.writeLong(2);
        out.writeLong(1);
        out.write(sha256(0, 1));
        String expected =
                "sha256:"
                        + HexFormat.of()
                                .formatHex(
                                        MessageDigest.getInstance("SHA-256")
                                                .digest(bytes.toByteArray()));

        assertThat(fingerprint(dir)).isEqualTo(expected);

        Path copy = other.resolve("elsewhere");
        Files.createDirectories(copy.resolve("sub"));
        Files.copy(dir.resolve("a.jsonl"), copy.resolve("a.jsonl"));
        Files.copy(dir.resolve("sub/b.jsonl"), copy.resolve("sub/b.jsonl"));
        assertThat(fingerprint(copy)).as("a copy under another root").isEqualTo(expected);

        Files.writeString(copy.resolve("a.jsonl"), "{}\n\n{\"k\": 2}\n");
        assertThat(fingerprint(copy)).as("same lengths and lines (not read)").isEqualTo(expected);
        Files.writeString(copy.resolve("a.jsonl"), "{}\n\n{\"k\": 10}\n");
        assertThat(fingerprint(copy)).as("a record of another length").isNotEqualTo(expected);
        Files.writeString(copy.resolve("a.jsonl"), "{}\n{\"k\": 1}\n");
        assertThat(fingerprint(copy)).as("a record on another line").isNotEqualTo(expected);
        Files.writeString(copy.resolve("a.jsonl"), "{}\n\n{\"k\": 1}\n{}\n");
        assertThat(fingerprint(copy)).as("a record more").isNotEqualTo(expected);
        Files.writeString(copy.resolve("a.jsonl"), "{}\n\n{\"k\": 1}\n");
        Files.move(copy.resolve("sub/b.jsonl"), copy.resolve("sub/c.jsonl"));
        assertThat(fingerprint(copy)).as("a file renamed").isNotEqualTo(expected);
        Files.move(copy.resolve("sub/c.jsonl"), copy.resolve("sub/b.jsonl"));
        assertThat(fingerprint(copy)).as("back as it was").isEqualTo(expected);
        Files.writeString(copy.resolve("z.jsonl"), "");
        assertThat(fingerprint(copy))
                .as("a file more, even without records")
                .isNotEqualTo(expected);
    }

    /** SHA-256 of the longs, each 8 bytes big-endian. */
    private static byte[] sha256(long... values) throws Exception {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        DataOutputStream out = new DataOutputStream(bytes);
        for (long v : values) {
            out.writeLong(v);
        }
        return MessageDigest.getInstance("SHA-256").digest(bytes.toByteArray());
    }

    private String fingerprint(Path root) throws IOException {
        return scan(root).fingerprint();
    }

    private static void assertLocation(
            DatasetListing listing, long index, int file, long offset, long line)
            throws IOException {
        DatasetListing.Location at = listing.locate(index);
        assertThat(at.file).as("file").isEqualTo(file);
        RecordIndex records = listing.index(at.file);
        assertThat(records.offset(at.record)).as("offset").isEqualTo(offset);
        assertThat(records.line(at.record)).as("line").isEqualTo(line);
    }

    @Test
    void failsClearlyWhenNothingMatches() {
        assertThatThrownBy(this::scan)
                .isInstanceOf(IOException.class)
                .hasMessageContaining("No file matching '*.jsonl'");
        assertThatThrownBy(() -> scan(dir.resolve("nope"))).hasMessageContaining("does not exist");
    }

    /**
     * A UTF-8 byte order mark at the start of a file is skipped: the first record starts after it
     * (a mark alone on the first line leaves a blank line, not a record), and the source reads the
     * record without it. Files are written with the JDK's encoders.
     */
    @Test
    void utf8ByteOrderMarkAtTheStartOfAFileIsSkipped() throws IOException {
        Files.writeString(dir.resolve("a.jsonl"), "\uFEFF{\"a\": 1}\n{\"a\": 2}\n");
        Files.writeString(dir.resolve("b.jsonl"), "\uFEFF\n{\"b\": 1}\n");

        DatasetListing listing = scan();

        assertThat(listing.numRecords()).isEqualTo(3);
        assertLocation(listing, 0, 0, 3, 1);
        assertLocation(listing, 1, 0, 12, 2);
        assertLocation(listing, 2, 1, 4, 2);
        RecordLineReader reader = reader(listing, 1 << 20);
        assertThat(text(reader.read(0, 0, 0))).isEqualTo("{\"a\": 1}");
        assertThat(text(reader.read(0, 2, 2))).isEqualTo("{\"b\": 1}");
        RecordLineReader uncached = reader(listing, 0);
        assertThat(text(uncached.read(0, 0, 0))).isEqualTo("{\"a\": 1}");
    }

    /**
     * A file with a UTF-16 or UTF-32 byte order mark is one record (line 1, byte 0), whatever its
     * number of lines, and the source hands the parser its first bytes, mark included, so the
     * parser can reject it naming the encoding; the UTF-8 file beside it is split as usual.
     */
    @ParameterizedTest
    @CsvSource({
        "UTF-16, UTF_16BE",
        "x-UTF-16LE-BOM, UTF_16LE",
        "X-UTF-32BE-BOM, UTF_32BE",
        "X-UTF-32LE-BOM, UTF_32LE"
    })
    void utf16Or32FileIsOneRecordStartingWithItsMark(String jdkCharset, ByteOrderMark expected)
            throws IOException {
        byte[] utf16Or32 =
                "{\"a\": 1}\n{\"a\": 2}\n{\"a\": 3}\n".getBytes(Charset.forName(jdkCharset));
        Files.write(dir.resolve("a.jsonl"), utf16Or32);
        Files.writeString(dir.resolve("b.jsonl"), "{\"b\": 1}\n{\"b\": 2}\n");

        DatasetListing listing = scan();

        assertThat(listing.numRecords()).isEqualTo(3);
        assertLocation(listing, 0, 0, 0, 1);
        assertLocation(listing, 1, 1, 0, 1);
        assertLocation(listing, 2, 1, 9, 2);
        JsonlLine first = reader(listing, 1 << 20).read(0, 0, 0);
        assertThat(first.ref.line).isEqualTo(1);
        assertThat(first.bytes).startsWith(Arrays.copyOf(utf16Or32, expected.length()));
        assertThat(ByteOrderMark.detect(first.bytes)).isEqualTo(expected);
    }

    private static RecordLineReader reader(DatasetListing listing, long cacheBytes) {
        return new RecordLineReader(List.of("dataset"), List.of(listing), 1024, cacheBytes);
    }

    private DatasetListing scan() throws IOException {
        return scan(dir);
    }

    private DatasetListing scan(Path root) throws IOException {
        return DatasetListing.scan(
                new org.apache.flink.core.fs.Path(root.toUri()),
                "*.jsonl",
                new RecordIndexCache(cache.toString(), 1024),
                2);
    }

    /**
     * Each file is read once per version: a second listing takes the record counts from the cached
     * indexes (shown here by a same-size edit with the old modification time, which the listing
     * does not see), a new modification time rebuilds the index, and a reader whose file changed
     * after the listing fails naming the file instead of reading wrong records.
     */
    @Test
    void indexesAreBuiltOncePerFileVersionAndReused() throws IOException {
        Path a = dir.resolve("a.jsonl");
        Files.writeString(a, "{\"a\": 1}\n{\"a\": 2}\n");
        Files.writeString(dir.resolve("b.jsonl"), "{}\n");
        DatasetListing first = scan();
        assertThat(first.numRecords()).isEqualTo(3);
        try (var entries = Files.list(cache)) {
            assertThat(entries.filter(p -> p.toString().endsWith(".idx"))).hasSize(2);
        }

        java.nio.file.attribute.FileTime planned = Files.getLastModifiedTime(a);
        Files.writeString(a, "{\"a\": 1, \"b\": 22}\n"); // same size (18 bytes), one record less
        Files.setLastModifiedTime(a, planned);
        assertThat(scan().numRecords()).as("from the cached index").isEqualTo(3);

        Files.setLastModifiedTime(
                a, java.nio.file.attribute.FileTime.fromMillis(planned.toMillis() + 5000));
        DatasetListing rebuilt = scan();
        assertThat(rebuilt.numRecords()).as("rebuilt for the new version").isEqualTo(2);
        assertLocation(rebuilt, 1, 1, 0, 1);
        assertThatThrownBy(() -> first.index(0))
                .isInstanceOf(IOException.class)
                .hasMessageContaining("a.jsonl changed after the job was planned");
    }

    private static String text(JsonlLine line) {
        return new String(line.bytes, StandardCharsets.UTF_8);
    }
}
