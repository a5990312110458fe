package dev.stoker.connectors.shm;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.connectors.protocol.BatchSchema;
import dev.stoker.connectors.protocol.PixelDtype;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import dev.stoker.operators.pack.MropePositions;
import dev.stoker.operators.tokenize.ChatTokenizer;
import java.util.ArrayList;
import java.util.List;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.complex.FixedSizeListVector;
import org.apache.arrow.vector.complex.ListVector;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * A packed batch's columns: samples one after another per row, per-row sample lists, each sample's
 * own positions, the sub-sequence boundaries, and no label on a sample's first token.
 */
class PackedBatchEncodingTest {
    private static final long IMG = ChatTokenizer.IMAGE_PAD;
    private static final long PAD = 151643;
    private final BufferAllocator allocator = new RootAllocator();

    @AfterEach
    void closeAllocator() {
        allocator.close();
    }

    /**
     * A sample of source chat (even {@code index}) or ocr (odd) from line {@code index + 1};
     * vision(): patch 1, merge 1, so an image of grid (1, 1, w) has w tokens and w*3 bytes.
     */
    private static TokenizedSample sample(long index, long[] ids, long... thw) {
        long[] labels = new long[ids.length];
        for (int i = 0; i < ids.length; i++) {
            labels[i] = ids[i] == IMG ? -100 : ids[i] + 1000;
        }
        int bytes = 0;
        for (int i = 0; i < thw.length; i += 3) {
            bytes += (int) (thw[i + 1] * thw[i + 2] * 3);
        }
        return new TokenizedSample(
                new RecordRef(
                        index % 2 == 0 ? "chat" : "ocr", "file:/d.jsonl", index + 1, index, null),
                ids,
                labels,
                new byte[bytes],
                thw);
    }

    private static List<Long> longs(BigIntVector v) {
        List<Long> out = new ArrayList<>();
        for (int i = 0; i < v.getValueCount(); i++) {
            out.add(v.get(i));
        }
        return out;
    }

    @Test
    void rowsHoldWholeSamplesWithTheirOwnPositionsAndBoundaries() {
        TokenizedSample a = sample(4, new long[] {1, 2, 3});
        TokenizedSample b = sample(9, new long[] {5, IMG, IMG, 6}, 1, 1, 2);
        TokenizedSample c = sample(2, new long[] {7, 8});
        TrainingBatch batch =
                new TrainingBatch(3, 1, 2, new TokenizedSample[] {a, b, c}, new int[] {2});
        batch.rowOf = new int[] {0, 0, 1};
        ArrowBatchEncoder encoder =
                new ArrowBatchEncoder(
                        ArrowBatchWriterTest.vision(),
                        PAD,
                        PixelDtype.FLOAT32,
                        8,
                        MropePositions.VideoTime.PATCH_INDEX,
                        0);
        try (VectorSchemaRoot root = encoder.encode(batch, allocator)) {
            assertThat(root.getRowCount()).isEqualTo(2);
            assertThat(root.getSchema().getCustomMetadata())
                    .containsEntry(BatchSchema.PACKING_MAX_TOKENS_KEY, "8")
                    .containsEntry(BatchSchema.BACKFILLED_SLOTS_KEY, "2");
            ListVector index = (ListVector) root.getVector(BatchSchema.SAMPLE_INDEX);
            assertThat(List.copyOf(index.getObject(0))).isEqualTo(List.of(4L, 9L));
            assertThat(List.copyOf(index.getObject(1))).isEqualTo(List.of(2L));
            ListVector source = (ListVector) root.getVector(BatchSchema.SOURCE);
            ListVector location = (ListVector) root.getVector(BatchSchema.LOCATION);
            assertThat(source.getObject(0)).map(Object::toString).containsExactly("chat", "ocr");
            assertThat(location.getObject(0))
                    .map(Object::toString)
                    .containsExactly("file:/d.jsonl:5", "file:/d.jsonl:10");
            assertThat(source.getObject(1)).map(Object::toString).containsExactly("chat");
            assertThat(location.getObject(1))
                    .map(Object::toString)
                    .containsExactly("file:/d.jsonl:3");

            // L = 7, the longest row (3 + 4 tokens)
            BigIntVector ids = data(root, BatchSchema.INPUT_IDS);
            assertThat(longs(ids))
                    .containsExactly(1L, 2L, 3L, 5L, IMG, IMG, 6L, 7L, 8L, PAD, PAD, PAD, PAD, PAD);
            assertThat(longs(data(root, BatchSchema.LABELS)))
                    .containsExactly(
                            -100L, 1002L, 1003L, -100L, -100L, -100L, 1006L, -100L, 1008L, -100L,
                            -100L, -100L, -100L, -100L);
            assertThat(longs(data(root, BatchSchema.ATTENTION_MASK)))
                    .containsExactly(1L, 1L, 1L, 1L, 1L, 1L, 1L, 1L, 1L, 0L, 0L, 0L, 0L, 0L);

            // row 0: text, temporal, height, width; b's image (1, 1, 2) sits at p = 1 of b
            List<Long> pos = longs(data(root, BatchSchema.POSITION_IDS));
            assertThat(pos.subList(0, 7)).containsExactly(0L, 1L, 2L, 0L, 1L, 2L, 3L);
            assertThat(pos.subList(7, 14)).containsExactly(0L, 1L, 2L, 0L, 1L, 1L, 3L);
            assertThat(pos.subList(14, 21)).containsExactly(0L, 1L, 2L, 0L, 1L, 1L, 3L);
            assertThat(pos.subList(21, 28)).containsExactly(0L, 1L, 2L, 0L, 1L, 2L, 3L);
            // row 1: c, then a padding tail counting from 0 on every axis
            for (int axis = 0; axis < 4; axis++) {
                assertThat(pos.subList(28 + 7 * axis, 35 + 7 * axis))
                        .containsExactly(0L, 1L, 0L, 1L, 2L, 3L, 4L);
            }

            ListVector cu = (ListVector) root.getVector(BatchSchema.CU_SEQLENS);
            assertThat(List.copyOf(cu.getObject(0))).isEqualTo(List.of(0, 3, 7));
            assertThat(List.copyOf(cu.getObject(1))).isEqualTo(List.of(0, 2, 7));
            assertThat(cu.getDataVector()).isInstanceOf(IntVector.class);

            ListVector grids = (ListVector) root.getVector(BatchSchema.IMAGE_GRID_THW);
            assertThat(grids.getElementEndIndex(0) - grids.getElementStartIndex(0)).isEqualTo(1);
            assertThat(grids.getElementEndIndex(1) - grids.getElementStartIndex(1)).isZero();
            ListVector pixels = (ListVector) root.getVector(BatchSchema.PIXEL_VALUES);
            assertThat(pixels.getElementEndIndex(0)).isEqualTo(2);
        }
    }

    private static BigIntVector data(VectorSchemaRoot root, String name) {
        return (BigIntVector) ((FixedSizeListVector) root.getVector(name)).getDataVector();
    }

    @Test
    void anEncoderRefusesTheOtherKindOfBatchAndRowsLongerThanItsRowSize() {
        TokenizedSample a = sample(4, new long[] {1, 2, 3});
        TrainingBatch packed = new TrainingBatch(0, 0, 1, new TokenizedSample[] {a, a}, new int[0]);
        packed.rowOf = new int[] {0, 0};
        TrainingBatch unpacked = new TrainingBatch(0, 0, 1, new TokenizedSample[] {a}, new int[0]);
        ArrowBatchEncoder plain =
                new ArrowBatchEncoder(ArrowBatchWriterTest.vision(), PAD, PixelDtype.FLOAT32);
        ArrowBatchEncoder packing =
                new ArrowBatchEncoder(
                        ArrowBatchWriterTest.vision(),
                        PAD,
                        PixelDtype.FLOAT32,
                        5,
                        MropePositions.VideoTime.PATCH_INDEX,
                        0);
        assertThatThrownBy(() -> plain.encode(packed, allocator))
                .hasMessageContaining("is packed but the sink does not pack");
        assertThatThrownBy(() -> packing.encode(unpacked, allocator))
                .hasMessageContaining("is not packed but the sink packs");
        assertThatThrownBy(() -> packing.encode(packed, allocator))
                .hasMessageContaining("has a row of 6 tokens, more than 5");
        packed.rowOf = new int[] {1, 1};
        assertThatThrownBy(() -> packing.encode(packed, allocator))
                .hasMessageContaining("without gaps");
    }
}
