package dev.stoker.connectors.shm;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.stream.Stream;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.complex.FixedSizeListVector;
import org.apache.arrow.vector.complex.ListVector;
import org.apache.arrow.vector.ipc.ArrowFileReader;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Writes real batch files into /dev/shm and reads them back with Arrow's own file reader. */
class ArrowBatchWriterTest {
    private static final int PATCH_DIM = 6;
    private static final long PAD = 151643;

    private Path jobDir;

    @BeforeEach
    void createDir() throws IOException {
        jobDir = Files.createTempDirectory(Path.of("/dev/shm"), "stoker-writer-test-");
    }

    @AfterEach
    void deleteDir() throws IOException {
        try (Stream<Path> walk = Files.walk(jobDir)) {
            walk.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        }
    }

    private static TokenizedSample sample(long index, int len, int patches, long... thw) {
        long[] ids = new long[len];
        long[] labels = new long[len];
        for (int i = 0; i < len; i++) {
            ids[i] = 1000 + index * 10 + i;
            labels[i] = i % 2 == 0 ? -100 : ids[i];
        }
        float[] px = new float[patches * PATCH_DIM];
        for (int i = 0; i < px.length; i++) {
            px[i] = index + i / 1000f;
        }
        return new TokenizedSample(
                new RecordRef("file:/data/train.jsonl", index + 1, index, "id-" + index),
                ids,
                labels,
                px,
                thw);
    }

    private ArrowBatchWriter writer() throws IOException {
        BatchPlan plan = new BatchPlan(8, 2, 2);
        return new ArrowBatchWriter(
                new ShmLayout(jobDir.toString()),
                new Manifest("test-job", plan, PATCH_DIM),
                new ArrowBatchEncoder(PATCH_DIM, PAD),
                UnregisteredMetricsGroup.createSinkWriterMetricGroup());
    }

    @Test
    void batchRoundTripsThroughAnArrowFile() throws Exception {
        TrainingBatch batch =
                new TrainingBatch(
                        3,
                        1,
                        2,
                        new TokenizedSample[] {
                            sample(7, 5, 2, 1, 1, 2), sample(6, 3, 3, 1, 1, 1, 1, 1, 2)
                        });
        try (ArrowBatchWriter w = writer()) {
            w.write(batch, null);
        }
        Path file = jobDir.resolve("rank-1/step-0000000003.arrow");
        assertThat(file).exists();
        assertThat(jobDir.resolve("rank-1/.step-0000000003.arrow.tmp")).doesNotExist();
        assertThat(PosixFilePermissions.toString(Files.getPosixFilePermissions(file)))
                .isEqualTo("rw-------");
        assertThat(
                        PosixFilePermissions.toString(
                                Files.getPosixFilePermissions(jobDir.resolve("rank-1"))))
                .isEqualTo("rwx------");

        try (RootAllocator allocator = new RootAllocator();
                ArrowFileReader reader = new ArrowFileReader(FileChannel.open(file), allocator)) {
            assertThat(reader.loadNextBatch()).isTrue();
            VectorSchemaRoot root = reader.getVectorSchemaRoot();
            assertThat(root.getRowCount()).isEqualTo(2);
            assertThat(root.getSchema().getCustomMetadata())
                    .containsEntry("stoker.step", "3")
                    .containsEntry("stoker.rank", "1")
                    .containsEntry("stoker.pad_token_id", String.valueOf(PAD));
            assertThat(((BigIntVector) root.getVector("sample_index")).get(0)).isEqualTo(7);
            assertThat(root.getVector("source").getObject(1).toString())
                    .isEqualTo("file:/data/train.jsonl:7");

            BigIntVector ids =
                    (BigIntVector)
                            ((FixedSizeListVector) root.getVector("input_ids")).getDataVector();
            BigIntVector labels =
                    (BigIntVector) ((FixedSizeListVector) root.getVector("labels")).getDataVector();
            BigIntVector mask =
                    (BigIntVector)
                            ((FixedSizeListVector) root.getVector("attention_mask"))
                                    .getDataVector();
            assertThat(ids.getValueCount()).isEqualTo(2 * 5);
            // row 1 (index 6) has 3 tokens, padded to 5
            assertThat(ids.get(5)).isEqualTo(1060);
            assertThat(ids.get(8)).isEqualTo(PAD);
            assertThat(labels.get(5)).isEqualTo(-100);
            assertThat(labels.get(6)).isEqualTo(1061);
            assertThat(labels.get(9)).isEqualTo(-100);
            assertThat(mask.get(7)).isEqualTo(1);
            assertThat(mask.get(8)).isZero();

            ListVector pixels = (ListVector) root.getVector("pixel_values");
            Float4Vector floats =
                    (Float4Vector) ((FixedSizeListVector) pixels.getDataVector()).getDataVector();
            assertThat(floats.getValueCount()).isEqualTo(5 * PATCH_DIM);
            assertThat(floats.get(2 * PATCH_DIM)).isEqualTo(6f); // first float of the second sample
            assertThat(pixels.getElementEndIndex(0)).isEqualTo(2);

            ListVector grids = (ListVector) root.getVector("image_grid_thw");
            BigIntVector thw =
                    (BigIntVector) ((FixedSizeListVector) grids.getDataVector()).getDataVector();
            assertThat(thw.getValueCount()).isEqualTo(9);
            assertThat(thw.get(8)).isEqualTo(2);
            assertThat(grids.getElementEndIndex(1) - grids.getElementStartIndex(1)).isEqualTo(2);
        }

        assertThat(
                        PosixFilePermissions.toString(
                                Files.getPosixFilePermissions(jobDir.resolve("manifest.json"))))
                .isEqualTo("rw-------");
        JsonNode manifest = new ObjectMapper().readTree(jobDir.resolve("manifest.json").toFile());
        assertThat(manifest.get("num_steps").asLong()).isEqualTo(2);
        assertThat(manifest.get("world_size").asInt()).isEqualTo(2);
    }

    @Test
    void emptyBatchIsStillPublished() throws Exception {
        try (ArrowBatchWriter w = writer()) {
            w.write(new TrainingBatch(0, 0, 2, new TokenizedSample[0]), null);
        }
        try (RootAllocator allocator = new RootAllocator();
                ArrowFileReader reader =
                        new ArrowFileReader(
                                FileChannel.open(jobDir.resolve("rank-0/step-0000000000.arrow")),
                                allocator)) {
            assertThat(reader.loadNextBatch()).isTrue();
            assertThat(reader.getVectorSchemaRoot().getRowCount()).isZero();
        }
    }

    @Test
    void schemaMatchesTheSharedSchemaDocument() throws IOException {
        JsonNode doc = new ObjectMapper().readTree(Path.of("../schema/batch-schema.json").toFile());
        List<String> expected = new ArrayList<>();
        for (JsonNode col : doc.get("columns")) {
            expected.add(col.get("name").asText() + ":" + col.get("arrow_type").asText());
        }
        List<String> actual = new ArrayList<>();
        for (Field f : BatchSchema.forBatch(7, PATCH_DIM, java.util.Map.of()).getFields()) {
            actual.add(
                    f.getName()
                            + ":"
                            + render(f)
                                    .replace("[7]", "[L]")
                                    .replace("[" + PATCH_DIM + "]", "[D]"));
        }
        assertThat(actual).containsExactlyElementsOf(expected);
        assertThat(doc.get("format_version").asInt()).isEqualTo(BatchSchema.FORMAT_VERSION);
    }

    private static String render(Field f) {
        ArrowType t = f.getType();
        if (t instanceof ArrowType.Int) {
            return "int" + ((ArrowType.Int) t).getBitWidth();
        } else if (t instanceof ArrowType.FloatingPoint) {
            return "float32";
        } else if (t instanceof ArrowType.Utf8) {
            return "utf8";
        } else if (t instanceof ArrowType.FixedSizeList) {
            Field item = f.getChildren().get(0);
            return "fixed_size_list<"
                    + render(item)
                    + (item.isNullable() ? "" : " not null")
                    + ">["
                    + ((ArrowType.FixedSizeList) t).getListSize()
                    + "]";
        } else if (t instanceof ArrowType.List) {
            return "list<" + render(f.getChildren().get(0)) + ">";
        }
        throw new AssertionError("unexpected type " + t);
    }
}
