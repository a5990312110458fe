package dev.stoker.connectors.shm;

import static dev.stoker.operators.accounting.Accounting.SOURCE_GROUP;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.entry;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.connectors.protocol.Ack;
import dev.stoker.connectors.protocol.BatchSchema;
import dev.stoker.connectors.protocol.Manifest;
import dev.stoker.connectors.protocol.PixelDtype;
import dev.stoker.connectors.protocol.ShmLayout;
import dev.stoker.operators.accounting.Accounting;
import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.image.QwenVisionConfig;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.SlotResult;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import dev.stoker.operators.pack.MropePositions;
import dev.stoker.operators.preset.ModelPreset;
import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
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
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.metrics.testutils.MetricListener;
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

    /**
     * The vision config of these tests: one-pixel patches, two frames, no merging, mean 0 and std
     * 1, so a {@code pixel_values} row is {@code (R, R, G, G, B, B) / 255} of one pixel.
     */
    static QwenVisionConfig vision() {
        QwenVisionConfig vision = ModelPreset.QWEN2_VL.visionConfig();
        vision.patchSize = 1;
        vision.mergeSize = 1;
        vision.imageMean = new double[] {0, 0, 0};
        vision.imageStd = new double[] {1, 1, 1};
        return vision;
    }

    /**
     * {@code pixel_values[i]} (flat) of {@link #sample}{@code (index, ...)}: Hugging Face's rescale
     * {@code u8 * (1/255.0)} in float32 of the pixel byte the value comes from.
     */
    static float pixelValue(long index, int i) {
        int u = (int) ((index * 16 + i / 2) & 0xFF);
        return (float) (u * (1 / 255.0));
    }

    /** The mixture source of sample index {@code index}: chat for even indices, ocr for odd. */
    private static String sourceOf(long index) {
        return index % 2 == 0 ? "chat" : "ocr";
    }

    /** The {@code source} and {@code location} of each row, as {@code source@location}. */
    private static List<String> provenance(VectorSchemaRoot root) {
        List<String> out = new ArrayList<>();
        for (int r = 0; r < root.getRowCount(); r++) {
            out.add(
                    root.getVector(BatchSchema.SOURCE).getObject(r)
                            + "@"
                            + root.getVector(BatchSchema.LOCATION).getObject(r));
        }
        return out;
    }

    /**
     * A sample of source {@link #sourceOf}{@code (index)} from line {@code index + 1}, with {@code
     * len} tokens and {@code patches} one-pixel patches in images thw.
     */
    private static TokenizedSample sample(long index, int len, int patches, long... thw) {
        long[] ids = new long[len];
        long[] labels = new long[len];
        for (int i = 0; i < len; i++) {
            ids[i] = 1000 + index * 10 + i;
            labels[i] = i % 2 == 0 ? -100 : ids[i];
        }
        byte[] px = new byte[patches * 3];
        for (int i = 0; i < px.length; i++) {
            px[i] = (byte) (index * 16 + i);
        }
        return new TokenizedSample(
                new RecordRef(
                        sourceOf(index), "file:/data/train.jsonl", index + 1, index, "id-" + index),
                ids,
                labels,
                px,
                thw);
    }

    private ShmLayout layout() {
        return new ShmLayout(jobDir.toString(), "g1");
    }

    private ArrowBatchWriter writer(BatchPlan plan) {
        return writer(plan, UnregisteredMetricsGroup.createSinkWriterMetricGroup());
    }

    private ArrowBatchWriter writer(BatchPlan plan, MetricGroup metrics) {
        return new ArrowBatchWriter(
                plan,
                publisher(new ArrowBatchEncoder(vision(), PAD, PixelDtype.FLOAT32), metrics),
                new SlotStager(layout()),
                metrics);
    }

    private RankPublisher publisher(ArrowBatchEncoder encoder, MetricGroup metrics) {
        ShmLayout layout = layout();
        return new RankPublisher(layout, 0, new BatchFileWriter(layout, encoder), metrics, null);
    }

    /** Closes what a test opened, before the allocator it came from. */
    private static final class Closer extends ArrayList<AutoCloseable> implements AutoCloseable {
        @Override
        public void close() throws Exception {
            for (AutoCloseable c : this) {
                c.close();
            }
        }
    }

    private VectorSchemaRoot read(Path file, RootAllocator allocator, Closer open)
            throws IOException {
        ArrowFileReader reader = new ArrowFileReader(FileChannel.open(file), allocator);
        open.add(reader);
        assertThat(reader.loadNextBatch()).isTrue();
        return reader.getVectorSchemaRoot();
    }

    @Test
    void slotsArrivingInAnyOrderBecomeOneArrowFileInSlotOrder() throws Exception {
        BatchPlan plan = new BatchPlan(8, 2, 2, 1); // step 1, rank 1 = slot indices 6 and 7
        Path file = jobDir.resolve("gen-g1/rank-1/step-0000000001.arrow");
        try (ArrowBatchWriter w = writer(plan)) {
            w.write(SlotResult.of(sample(7, 5, 2, 1, 1, 2)), null);
            assertThat(file).doesNotExist();
            Path staged = jobDir.resolve("gen-g1/rank-1/.staging/step-0000000001.slot-1");
            assertThat(staged).as("a waiting slot is staged at a checkpoint only").doesNotExist();
            w.flush(false); // before a checkpoint barrier
            assertThat(staged).exists();
            w.write(SlotResult.of(sample(6, 3, 3, 1, 1, 1, 1, 1, 2)), null);
        }
        assertThat(file).exists();
        assertThat(jobDir.resolve("gen-g1/rank-1/.staging")).isEmptyDirectory();
        assertThat(jobDir.resolve("gen-g1/rank-1/.step-0000000001.arrow.tmp")).doesNotExist();
        assertThat(PosixFilePermissions.toString(Files.getPosixFilePermissions(file)))
                .isEqualTo("rw-------");
        assertThat(
                        PosixFilePermissions.toString(
                                Files.getPosixFilePermissions(jobDir.resolve("gen-g1/rank-1"))))
                .isEqualTo("rwx------");

        try (RootAllocator allocator = new RootAllocator();
                Closer open = new Closer()) {
            VectorSchemaRoot root = read(file, allocator, open);
            assertThat(root.getRowCount()).isEqualTo(2);
            assertThat(root.getSchema().getCustomMetadata())
                    .containsEntry("stoker.step", "1")
                    .containsEntry("stoker.rank", "1")
                    .containsEntry("stoker.backfilled_slots", "")
                    .containsEntry("stoker.pad_token_id", String.valueOf(PAD))
                    .containsEntry("stoker.image_token_id", "151655");
            List<String> documented = new ArrayList<>();
            new ObjectMapper()
                    .readTree(Path.of("../schema/batch-schema.json").toFile())
                    .get("metadata")
                    .fieldNames()
                    .forEachRemaining(documented::add);
            documented.remove(BatchSchema.PACKING_MAX_TOKENS_KEY); // packed batches only
            assertThat(root.getSchema().getCustomMetadata().keySet())
                    .containsExactlyInAnyOrderElementsOf(documented);
            assertThat(((BigIntVector) root.getVector("sample_index")).get(0)).isEqualTo(6);
            assertThat(provenance(root))
                    .containsExactly(
                            "chat@file:/data/train.jsonl:7", "ocr@file:/data/train.jsonl:8");

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
            // row 0 (index 6) has 3 tokens, padded to 5
            assertThat(ids.get(0)).isEqualTo(1060);
            assertThat(ids.get(3)).isEqualTo(PAD);
            assertThat(ids.get(5)).isEqualTo(1070);
            assertThat(labels.get(0)).isEqualTo(-100);
            assertThat(labels.get(1)).isEqualTo(1061);
            assertThat(labels.get(4)).isEqualTo(-100);
            assertThat(mask.get(2)).isEqualTo(1);
            assertThat(mask.get(3)).isZero();

            ListVector pixels = (ListVector) root.getVector("pixel_values");
            Float4Vector floats =
                    (Float4Vector) ((FixedSizeListVector) pixels.getDataVector()).getDataVector();
            assertThat(floats.getValueCount()).isEqualTo(5 * PATCH_DIM);
            // the second sample starts at row 3 with its own first pixel
            assertThat(floats.get(3 * PATCH_DIM)).isEqualTo(pixelValue(7, 0));
            assertThat(floats.get(3 * PATCH_DIM + 5)).isEqualTo(pixelValue(7, 5));
            assertThat(floats.get(2 * PATCH_DIM + 3)).isEqualTo(pixelValue(6, 2 * PATCH_DIM + 3));
            assertThat(pixels.getElementEndIndex(0)).isEqualTo(3);

            ListVector grids = (ListVector) root.getVector("image_grid_thw");
            BigIntVector thw =
                    (BigIntVector) ((FixedSizeListVector) grids.getDataVector()).getDataVector();
            assertThat(thw.getValueCount()).isEqualTo(9);
            assertThat(thw.get(8)).isEqualTo(2);
            assertThat(grids.getElementEndIndex(0) - grids.getElementStartIndex(0)).isEqualTo(2);
        }
    }

    @Test
    void rejectedAndPaddingSlotsAreBackfilled() throws Exception {
        BatchPlan plan = new BatchPlan(3, 1, 2, 1); // step 1: slot index 2, padding slot 3
        try (ArrowBatchWriter w = writer(plan)) {
            w.write(SlotResult.empty(0), null); // a dead letter
            w.write(SlotResult.of(sample(1, 2, 1, 1, 1, 1)), null);
            w.write(SlotResult.of(sample(2, 2, 1, 1, 1, 1)), null);
            w.write(SlotResult.empty(3), null); // the source's padding marker
        }
        try (RootAllocator allocator = new RootAllocator();
                Closer open = new Closer()) {
            VectorSchemaRoot step0 =
                    read(jobDir.resolve("gen-g1/rank-0/step-0000000000.arrow"), allocator, open);
            BigIntVector index0 = (BigIntVector) step0.getVector("sample_index");
            assertThat(step0.getRowCount()).isEqualTo(2);
            assertThat(index0.get(0)).isEqualTo(1);
            assertThat(index0.get(1)).isEqualTo(1);
            assertThat(step0.getSchema().getCustomMetadata())
                    .containsEntry("stoker.backfilled_slots", "0");
            // the copy carries the source and location of the row it copies
            assertThat(provenance(step0))
                    .containsExactly(
                            "ocr@file:/data/train.jsonl:2", "ocr@file:/data/train.jsonl:2");
            VectorSchemaRoot step1 =
                    read(jobDir.resolve("gen-g1/rank-0/step-0000000001.arrow"), allocator, open);
            assertThat(step1.getRowCount()).isEqualTo(2);
            assertThat(step1.getSchema().getCustomMetadata())
                    .containsEntry("stoker.backfilled_slots", "1");
            assertThat(provenance(step1))
                    .containsExactly(
                            "chat@file:/data/train.jsonl:3", "chat@file:/data/train.jsonl:3");
        }
    }

    /**
     * The sink's accounting of an unpacked batch with two sources, a short sample and a back-filled
     * row, against what the test reads in the file: each row's padding (L minus its attention mask)
     * for the row's source, each back-filled row for the source of the sample it copies.
     */
    @Test
    void paddingAndBackfilledRowsAreCountedPerSource() throws Exception {
        BatchPlan plan = new BatchPlan(3, 1, 3, 1); // step 0: slot indices 0, 1, 2
        MetricListener metrics = new MetricListener();
        try (ArrowBatchWriter w = writer(plan, metrics.getMetricGroup())) {
            w.write(SlotResult.empty(0), null); // a dead letter: a copy of slot 1 fills it
            w.write(SlotResult.of(sample(1, 2, 1, 1, 1, 1)), null); // ocr, 2 tokens
            w.write(SlotResult.of(sample(2, 5, 1, 1, 1, 1)), null); // chat, 5 tokens
        }
        try (RootAllocator allocator = new RootAllocator();
                Closer open = new Closer()) {
            VectorSchemaRoot root =
                    read(jobDir.resolve("gen-g1/rank-0/step-0000000000.arrow"), allocator, open);
            Map<String, Long> padding = paddingBySource(root);
            Map<String, Long> backfilled = backfilledBySource(root);
            // rows: ocr (copy) and ocr, 2 tokens each, and chat, 5 tokens; L = 5
            assertThat(padding).containsOnly(entry("ocr", 6L), entry("chat", 0L));
            assertThat(backfilled).containsOnly(entry("ocr", 1L));
            assertCounted(metrics, Accounting.PADDING_TOKENS, padding);
            assertCounted(metrics, Accounting.BACKFILLED_SAMPLES, backfilled);
            assertThat(metrics.getCounter(SOURCE_GROUP, "chat", Accounting.BACKFILLED_SAMPLES))
                    .as("registered on a source's first back-filled row")
                    .isEmpty();
        }
    }

    /**
     * A packed batch: a row's padding tail counts for the source of the row's last sample, a
     * back-filled sample for its own (the copied sample's) source.
     */
    @Test
    void packedPaddingCountsForTheRowsLastSample() throws Exception {
        TrainingBatch batch =
                new TrainingBatch(
                        0,
                        0,
                        2,
                        new TokenizedSample[] {sample(4, 3, 0), sample(9, 4, 0), sample(2, 2, 0)},
                        new int[] {2});
        batch.rowOf = new int[] {0, 0, 1}; // rows: chat + ocr (7 tokens), chat (2 tokens)
        MetricListener metrics = new MetricListener();
        try (RankPublisher publisher =
                publisher(
                        new ArrowBatchEncoder(
                                vision(),
                                PAD,
                                PixelDtype.FLOAT32,
                                8,
                                MropePositions.VideoTime.PATCH_INDEX,
                                0),
                        metrics.getMetricGroup())) {
            publisher.publish(batch);
        }
        try (RootAllocator allocator = new RootAllocator();
                Closer open = new Closer()) {
            VectorSchemaRoot root =
                    read(jobDir.resolve("gen-g1/rank-0/step-0000000000.arrow"), allocator, open);
            Map<String, Long> padding = paddingBySource(root);
            Map<String, Long> backfilled = backfilledBySource(root);
            assertThat(padding).containsOnly(entry("ocr", 0L), entry("chat", 5L));
            assertThat(backfilled).containsOnly(entry("chat", 1L));
            assertCounted(metrics, Accounting.PADDING_TOKENS, padding);
            assertCounted(metrics, Accounting.BACKFILLED_SAMPLES, backfilled);
        }
    }

    /** The {@code source} of each sample of row {@code r}: one unpacked, a list when packed. */
    private static List<String> rowSources(VectorSchemaRoot root, int r) {
        Object value = root.getVector(BatchSchema.SOURCE).getObject(r);
        if (value instanceof List<?> list) {
            return list.stream().map(Object::toString).toList();
        }
        return List.of(value.toString());
    }

    /** Per source of each row's last sample: L minus the row's attention mask, summed. */
    private static Map<String, Long> paddingBySource(VectorSchemaRoot root) {
        FixedSizeListVector mask = (FixedSizeListVector) root.getVector("attention_mask");
        BigIntVector values = (BigIntVector) mask.getDataVector();
        int seqLen = mask.getListSize();
        Map<String, Long> padding = new HashMap<>();
        for (int r = 0; r < root.getRowCount(); r++) {
            long tokens = 0;
            for (int t = 0; t < seqLen; t++) {
                tokens += values.get(r * seqLen + t);
            }
            List<String> sources = rowSources(root, r);
            padding.merge(sources.get(sources.size() - 1), seqLen - tokens, Long::sum);
        }
        return padding;
    }

    /** Per source: the samples {@code stoker.backfilled_slots} lists (positions in row order). */
    private static Map<String, Long> backfilledBySource(VectorSchemaRoot root) {
        List<String> samples = new ArrayList<>();
        for (int r = 0; r < root.getRowCount(); r++) {
            samples.addAll(rowSources(root, r));
        }
        Map<String, Long> backfilled = new HashMap<>();
        String slots = root.getSchema().getCustomMetadata().get(BatchSchema.BACKFILLED_SLOTS_KEY);
        for (String slot : slots.split(",")) {
            if (!slot.isEmpty()) {
                backfilled.merge(samples.get(Integer.parseInt(slot)), 1L, Long::sum);
            }
        }
        return backfilled;
    }

    /** Count {@code name}'s metric of each source is {@code expected}'s, its total their sum. */
    private static void assertCounted(
            MetricListener metrics, String name, Map<String, Long> expected) {
        expected.forEach(
                (source, n) ->
                        assertThat(metrics.getCounter(SOURCE_GROUP, source, name))
                                .as("%s of %s", name, source)
                                .hasValueSatisfying(c -> assertThat(c.getCount()).isEqualTo(n)));
        long total = expected.values().stream().mapToLong(Long::longValue).sum();
        assertThat(metrics.getCounter(name))
                .as("%s in total", name)
                .hasValueSatisfying(c -> assertThat(c.getCount()).isEqualTo(total));
    }

    @Test
    void slotsStagedBeforeARestartAreReadBack() throws Exception {
        BatchPlan plan = new BatchPlan(2, 1, 2, 1);
        Path file = jobDir.resolve("gen-g1/rank-0/step-0000000000.arrow");
        try (ArrowBatchWriter w = writer(plan)) {
            w.write(SlotResult.of(sample(0, 4, 2, 1, 1, 2)), null);
            w.flush(false); // a checkpoint, then the attempt fails
        }
        // a crashed attempt also left a half-written staged slot behind
        Path halfWritten = jobDir.resolve("gen-g1/rank-0/.staging/.step-0000000000.slot-1.tmp");
        Files.write(halfWritten, new byte[] {1, 2, 3});
        try (ArrowBatchWriter w = writer(plan)) {
            w.write(SlotResult.of(sample(1, 3, 1, 1, 1, 1)), null);
        }
        assertThat(halfWritten).doesNotExist();
        try (RootAllocator allocator = new RootAllocator();
                Closer open = new Closer()) {
            VectorSchemaRoot root = read(file, allocator, open);
            assertThat(root.getRowCount()).isEqualTo(2);
            BigIntVector ids =
                    (BigIntVector)
                            ((FixedSizeListVector) root.getVector("input_ids")).getDataVector();
            assertThat(ids.get(3)).isEqualTo(1003); // 4th token of the sample staged earlier
            assertThat(provenance(root))
                    .containsExactly(
                            "chat@file:/data/train.jsonl:1", "ocr@file:/data/train.jsonl:2");
            Float4Vector floats =
                    (Float4Vector)
                            ((FixedSizeListVector)
                                            ((ListVector) root.getVector("pixel_values"))
                                                    .getDataVector())
                                    .getDataVector();
            assertThat(floats.getValueCount()).isEqualTo(3 * PATCH_DIM);
            assertThat(floats.get(PATCH_DIM + 1)).isEqualTo(pixelValue(0, PATCH_DIM + 1));
        }
    }

    @Test
    void stepsTheReaderAlreadyAcknowledgedAreNotWrittenAgain() throws Exception {
        BatchPlan plan = new BatchPlan(4, 1, 2, 1);
        Files.createDirectories(jobDir.resolve("gen-g1/rank-0"));
        Files.writeString(jobDir.resolve("gen-g1/rank-0/ack.json"), "{\"consumed_step\": 0}");
        try (ArrowBatchWriter w = writer(plan)) {
            w.write(SlotResult.of(sample(0, 2, 1, 1, 1, 1)), null);
            w.write(SlotResult.of(sample(1, 2, 1, 1, 1, 1)), null);
            w.write(SlotResult.of(sample(2, 2, 1, 1, 1, 1)), null);
            w.write(SlotResult.of(sample(3, 2, 1, 1, 1, 1)), null);
        }
        assertThat(jobDir.resolve("gen-g1/rank-0/step-0000000000.arrow")).doesNotExist();
        assertThat(jobDir.resolve("gen-g1/rank-0/.staging/step-0000000000.slot-0")).doesNotExist();
        assertThat(jobDir.resolve("gen-g1/rank-0/step-0000000001.arrow")).exists();
    }

    @Test
    void otherGenerationsAreRemovedAndTheManifestNamesThisOne() throws Exception {
        Path stale = jobDir.resolve("gen-g0/rank-0/step-0000000005.arrow");
        Files.createDirectories(stale.getParent());
        Files.writeString(stale, "stale");
        Files.createDirectories(jobDir.resolve("gen-g1/rank-0"));
        Files.createDirectories(jobDir.resolve("dead-letters"));

        ShmLayout layout = layout();
        Generations.removeOtherGenerations(layout);
        String fingerprint = "sha256:" + "ab".repeat(32);
        new Manifest(
                        "test-job",
                        "g1",
                        new BatchPlan(8, 2, 2, 3),
                        5,
                        42L,
                        vision(),
                        fingerprint,
                        "qwen2.5-vl",
                        null,
                        "/data/mixture.yaml",
                        java.util.List.of())
                .writeTo(layout);

        assertThat(jobDir.resolve("gen-g0")).doesNotExist();
        assertThat(jobDir.resolve("gen-g1/rank-0")).isDirectory();
        assertThat(jobDir.resolve("dead-letters")).isDirectory();
        assertThat(
                        PosixFilePermissions.toString(
                                Files.getPosixFilePermissions(jobDir.resolve("manifest.json"))))
                .isEqualTo("rw-------");
        JsonNode manifest = new ObjectMapper().readTree(jobDir.resolve("manifest.json").toFile());
        assertThat(manifest.get("generation").asText()).isEqualTo("g1");
        assertThat(manifest.get("num_steps").asLong()).isEqualTo(6);
        assertThat(manifest.get("steps_per_epoch").asLong()).isEqualTo(2);
        assertThat(manifest.get("first_step").asLong()).isEqualTo(5);
        assertThat(manifest.get("world_size").asInt()).isEqualTo(2);
        assertThat(manifest.get("shuffle_seed").asLong()).isEqualTo(42);
        assertThat(manifest.get("dataset_fingerprint").asText()).isEqualTo(fingerprint);
        assertThat(manifest.get("model_preset").asText()).isEqualTo("qwen2.5-vl");
        assertThat(Ack.lastStepConsumedByAllRanks(jobDir)).hasValue(4);
    }

    /**
     * Batches with MB-sized pixel_values reuse the writer's pooled Arrow memory ({@link
     * ArrowMemoryPool}); each file holds exactly its own samples' values, also when a smaller batch
     * follows a larger one in the same block.
     */
    @Test
    void consecutiveLargeBatchesHoldExactlyTheirOwnPixels() throws Exception {
        BatchPlan plan = new BatchPlan(8, 2, 2, 1);
        // 21.6 MB, then 18 MB of float32: above Arrow's 16 MiB chunk, where sizes are not rounded
        int[][] patches = {{500_000, 400_000}, {450_000, 300_000}};
        try (ArrowBatchWriter w = writer(plan)) {
            for (int step = 0; step < 2; step++) {
                for (int k = 0; k < 2; k++) {
                    w.write(
                            SlotResult.of(
                                    sample(
                                            4L * step + k,
                                            3,
                                            patches[step][k],
                                            1,
                                            1,
                                            patches[step][k])),
                            null);
                }
            }
        }
        for (int step = 0; step < 2; step++) {
            Path file = jobDir.resolve("gen-g1/rank-0/step-000000000" + step + ".arrow");
            try (RootAllocator allocator = new RootAllocator();
                    Closer open = new Closer()) {
                ListVector pixels =
                        (ListVector) read(file, allocator, open).getVector("pixel_values");
                Float4Vector floats =
                        (Float4Vector)
                                ((FixedSizeListVector) pixels.getDataVector()).getDataVector();
                int first = patches[step][0] * PATCH_DIM;
                assertThat(floats.getValueCount()).isEqualTo(first + patches[step][1] * PATCH_DIM);
                for (int i = 0; i < floats.getValueCount(); i++) {
                    long index = 4L * step + (i < first ? 0 : 1);
                    float expected = pixelValue(index, i < first ? i : i - first);
                    if (floats.get(i) != expected) {
                        throw new AssertionError(
                                "step "
                                        + step
                                        + " value "
                                        + i
                                        + ": "
                                        + floats.get(i)
                                        + " != "
                                        + expected);
                    }
                }
            }
        }
    }

    @Test
    void schemaMatchesTheSharedSchemaDocument() throws IOException {
        JsonNode doc = new ObjectMapper().readTree(Path.of("../schema/batch-schema.json").toFile());
        List<String> expected = new ArrayList<>();
        List<String> expectedPacked = new ArrayList<>();
        for (JsonNode col : doc.get("columns")) {
            String type = col.get("arrow_type").asText();
            if (!col.path("packed_only").asBoolean(false)) {
                expected.add(col.get("name").asText() + ":" + type);
            }
            expectedPacked.add(
                    col.get("name").asText()
                            + ":"
                            + col.path("packed").path("arrow_type").asText(type));
        }
        List<String> packed = new ArrayList<>();
        for (Field f :
                BatchSchema.forPackedBatch(7, PATCH_DIM, PixelDtype.FLOAT32, java.util.Map.of())
                        .getFields()) {
            packed.add(
                    f.getName()
                            + ":"
                            + render(f)
                                    .replace("[28]", "[4L]")
                                    .replace("[7]", "[L]")
                                    .replace("[" + PATCH_DIM + "]", "[D]"));
        }
        assertThat(packed).containsExactlyElementsOf(expectedPacked);
        List<String> actual = new ArrayList<>();
        for (Field f :
                BatchSchema.forBatch(7, PATCH_DIM, PixelDtype.FLOAT32, java.util.Map.of())
                        .getFields()) {
            actual.add(
                    f.getName()
                            + ":"
                            + render(f)
                                    .replace("[7]", "[L]")
                                    .replace("[" + PATCH_DIM + "]", "[D]"));
        }
        assertThat(actual).containsExactlyElementsOf(expected);
        assertThat(doc.get("format_version").asInt()).isEqualTo(BatchSchema.FORMAT_VERSION);
        List<String> variants = new ArrayList<>();
        for (JsonNode col : doc.get("columns")) {
            for (PixelDtype dtype : PixelDtype.values()) {
                JsonNode variant = col.path("variants").path(dtype.metadataName);
                if (!variant.isMissingNode()) {
                    variants.add(dtype.metadataName);
                    Field f =
                            BatchSchema.forBatch(7, PATCH_DIM, dtype, java.util.Map.of())
                                    .findField(col.get("name").asText());
                    assertThat(render(f).replace("[" + PATCH_DIM + "]", "[D]"))
                            .isEqualTo(variant.get("arrow_type").asText());
                }
            }
        }
        // every element type but the pixel columns' own float32 is a variant of the document
        assertThat(variants).containsExactly("bfloat16", "uint8", "bfloat16", "uint8");
        assertThat(doc.get("metadata").has(BatchSchema.PIXEL_DTYPE_KEY)).isTrue();
    }

    private static String render(Field f) {
        ArrowType t = f.getType();
        if (t instanceof ArrowType.Int) {
            return (((ArrowType.Int) t).getIsSigned() ? "int" : "uint")
                    + ((ArrowType.Int) t).getBitWidth();
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
            // a scalar item shows its nullability, as in fixed_size_list<int64 not null>
            Field item = f.getChildren().get(0);
            boolean scalar = !(item.getType() instanceof ArrowType.FixedSizeList);
            return "list<" + render(item) + (scalar && !item.isNullable() ? " not null" : "") + ">";
        }
        throw new AssertionError("unexpected type " + t);
    }
}
