package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import dev.stoker.testkit.ExpectedFaultFilter;
import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.text.Normalizer;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.apache.flink.configuration.Configuration;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.io.TempDir;

/**
 * The whole job (as {@link BadInputsITCase} runs it) over JSONL files the test writes with the
 * JDK's encoders: the same records in UTF-8, UTF-8 with a byte order mark, UTF-16LE and UTF-16BE
 * with a BOM, and UTF-32LE with a BOM; and image names in NFD and NFC.
 *
 * <p>Expected: each UTF-16/32 file is exactly one dead letter ({@code UNSUPPORTED_ENCODING}, stage
 * parse, line 1) naming the file and its encoding, never a split into garbage records; the records
 * of the UTF-8 files (the BOM skipped) are batched; samples + dead letters = records, where a
 * rejected file counts as one record. An image whose file name is NFD is found by its NFD spelling
 * and {@code IMAGE_NOT_FOUND}, naming the path, by its NFC spelling (paths are used as written).
 */
@ExtendWith(ExpectedFaultFilter.DeadLettersExpected.class) // bad records on purpose, each asserted
class JsonlEncodingITCase {
    private static final int WORLD_SIZE = 2;
    private static final int MICRO_BATCH_SIZE = 3;

    /** "café" with a combining acute accent (NFD), as macOS and some tools write file names. */
    private static final String NFD_IMAGE = "images/cafe\u0301.jpg";

    private static final String NFC_IMAGE = Normalizer.normalize(NFD_IMAGE, Normalizer.Form.NFC);

    @RegisterExtension static final JobTestCluster CLUSTER = JobTestCluster.local(2);

    @TempDir Path dataset;

    private static String record(String id, String image) {
        return "{\"id\": \""
                + id
                + "\", \"image\": \""
                + image
                + "\", \"conversations\": [{\"from\": \"human\", \"value\": \"<image>\\nWhat is"
                + " this, caf\u00e9 \u732b?\"}, {\"from\": \"gpt\", \"value\": \"Coffee.\"}]}\n";
    }

    /** Three records; the prefix makes their ids unique per file. */
    private static String records(String prefix) {
        return record(prefix + "-1", "images/coffee.jpg")
                + record(prefix + "-2", "images/coffee.jpg")
                + record(prefix + "-3", "images/coffee.jpg");
    }

    @Test
    void utf16And32FilesAreOneDeadLetterEachAndUtf8FilesAreProcessed() throws Exception {
        Path images = Files.createDirectories(dataset.resolve("images"));
        Path coffee =
                SharedData.dataDir().resolve("bad-inputs/bad-encoding-jsonl/images/coffee.jpg");
        Files.copy(coffee, images.resolve("coffee.jpg"));
        Files.copy(coffee, dataset.resolve(NFD_IMAGE));
        assertThat(Files.exists(dataset.resolve(NFC_IMAGE)))
                .as("the file system keeps NFD and NFC names apart")
                .isFalse();

        Files.writeString(
                dataset.resolve("a-utf8.jsonl"),
                records("utf8") + record("nfd", NFD_IMAGE) + record("nfc", NFC_IMAGE));
        Files.write(
                dataset.resolve("b-utf8-bom.jsonl"),
                ("\uFEFF" + records("bom")).getBytes(StandardCharsets.UTF_8));
        Map<String, String> rejectedFiles =
                Map.of(
                        "c-utf16le.jsonl", "UTF-16LE",
                        "d-utf16be.jsonl", "UTF-16BE",
                        "e-utf32le.jsonl", "UTF-32LE");
        // the JDK's BOM-writing encoders: x-UTF-16LE-BOM (FF FE), UTF-16 (FE FF), X-UTF-32LE-BOM
        Map<String, String> jdkCharsets =
                Map.of(
                        "c-utf16le.jsonl", "x-UTF-16LE-BOM",
                        "d-utf16be.jsonl", "UTF-16",
                        "e-utf32le.jsonl", "X-UTF-32LE-BOM");
        for (String file : rejectedFiles.keySet()) {
            Files.write(
                    dataset.resolve(file),
                    records(file).getBytes(Charset.forName(jdkCharsets.get(file))));
        }

        JobRun.Result run =
                JobRun.run(
                        dataset,
                        CLUSTER.outputRoot(),
                        WORLD_SIZE,
                        MICRO_BATCH_SIZE,
                        new Configuration());
        run.assertAccounted();

        // 5 + 3 UTF-8 records, and one record per UTF-16/32 file
        assertThat(run.plan().numRecords()).isEqualTo(5 + 3 + 3);
        Map<String, JsonNode> deadByFile = new HashMap<>();
        for (JsonNode dl : run.deadLetters()) {
            String file = Path.of(dl.get("file").asText()).getFileName().toString();
            assertThat(deadByFile.put(file + ":" + dl.get("line").asLong(), dl))
                    .as("one dead letter for %s line %s", file, dl.get("line"))
                    .isNull();
        }
        assertThat(deadByFile.keySet())
                .containsExactlyInAnyOrder(
                        "a-utf8.jsonl:5",
                        "c-utf16le.jsonl:1",
                        "d-utf16be.jsonl:1",
                        "e-utf32le.jsonl:1");
        rejectedFiles.forEach(
                (file, encoding) -> {
                    JsonNode dl = deadByFile.get(file + ":1");
                    assertThat(dl.get("reason").asText()).isEqualTo("UNSUPPORTED_ENCODING");
                    assertThat(dl.get("stage").asText()).isEqualTo("parse");
                    assertThat(dl.get("record_id").isNull())
                            .as("no id read from %s", file)
                            .isTrue();
                    assertThat(dl.get("message").asText())
                            .contains(file, " is " + encoding + " ", "JSONL must be UTF-8");
                });

        JsonNode nfc = deadByFile.get("a-utf8.jsonl:5");
        assertThat(nfc.get("reason").asText()).isEqualTo("IMAGE_NOT_FOUND");
        assertThat(nfc.get("record_id").asText()).isEqualTo("nfc");
        assertThat(nfc.get("message").asText())
                .contains("'" + NFC_IMAGE + "' not found", "'" + NFD_IMAGE + "'");

        Map<String, Long> batchedByFile =
                run.samples().stream()
                        .collect(
                                Collectors.groupingBy(
                                        s ->
                                                Path.of(s.location().replaceFirst(":\\d+$", ""))
                                                        .getFileName()
                                                        .toString(),
                                        Collectors.counting()));
        assertThat(batchedByFile)
                .as("UTF-8 records batched: 3 + the NFD one, and 3 after the skipped BOM")
                .containsExactlyInAnyOrderEntriesOf(
                        Map.of("a-utf8.jsonl", 4L, "b-utf8-bom.jsonl", 3L));
        List<Long> bomLines =
                run.samples().stream()
                        .filter(s -> s.location().contains("b-utf8-bom.jsonl"))
                        .map(JobRun.Sample::line)
                        .sorted()
                        .toList();
        assertThat(bomLines).containsExactly(1L, 2L, 3L);
        assertThat(run.samples())
                .filteredOn(s -> s.location().endsWith("a-utf8.jsonl:4"))
                .as("the NFD-named image, referenced as NFD, is one image in a batch")
                .singleElement()
                .satisfies(s -> assertThat(s.gridThw()).hasSize(1));
    }
}
