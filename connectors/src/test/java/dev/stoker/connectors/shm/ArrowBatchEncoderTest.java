package dev.stoker.connectors.shm;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.connectors.protocol.BatchSchema;
import dev.stoker.connectors.protocol.PixelDtype;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import dev.stoker.operators.preset.ModelPreset;
import java.util.Random;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BaseFixedWidthVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.complex.FixedSizeListVector;
import org.apache.arrow.vector.complex.ListVector;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The encoder refuses samples whose resized bytes do not match their image grids, and samples
 * without a mixture source name; its pixel columns do not depend on what the memory held before.
 */
class ArrowBatchEncoderTest {
    private final BufferAllocator allocator = new RootAllocator();
    private final ArrowBatchEncoder encoder =
            new ArrowBatchEncoder(ModelPreset.QWEN2_VL.visionConfig(), 0, PixelDtype.FLOAT32);

    @AfterEach
    void closeAllocator() {
        allocator.close();
    }

    private void encode(byte[] rgb, long... thw) {
        encode(new RecordRef("chat", "file:/d.jsonl", 7, 6, "r"), rgb, thw);
    }

    private void encode(RecordRef ref, byte[] rgb, long... thw) {
        TokenizedSample sample =
                new TokenizedSample(ref, new long[] {1, 2}, new long[] {-100, 2}, rgb, thw);
        TrainingBatch batch =
                new TrainingBatch(0, 0, 1, new TokenizedSample[] {sample}, new int[0]);
        encoder.encode(batch, allocator).close();
    }

    @Test
    void bytesThatAreNotThoseOfTheGridsAreRefusedNamingTheRecord() {
        // a 2x2-patch image of Qwen2-VL is 28 x 28 x 3 = 2352 bytes
        assertThatThrownBy(() -> encode(new byte[2352 - 3], 1, 2, 2))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("file:/d.jsonl")
                .hasMessageContaining("2349 resized RGB bytes, but image_grid_thw needs 2352");
        assertThatThrownBy(() -> encode(new byte[2352], 1, 2, 2, 1, 2, 2))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("needs 4704");
    }

    @Test
    void gridsOtherThanOneStillFrameAreRefused() {
        assertThatThrownBy(() -> encode(new byte[2 * 2352], 2, 2, 2))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("grid_thw (2, 2, 2)");
        assertThatThrownBy(() -> encode(new byte[0], 1))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("image_grid_thw is not (n, 3)");
    }

    @Test
    void aSampleWithoutASourceNameIsRefused() {
        assertThatThrownBy(() -> encode(new RecordRef("file:/d.jsonl", 7, 6, "r"), new byte[0]))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("file:/d.jsonl:7")
                .hasMessageContaining("no mixture source name");
    }

    /**
     * The pixel buffers are not zeroed before the patchifier fills them: with the sink's pooled
     * memory a batch gets the block of an earlier one, here one filled with 0xA5 bytes, and its
     * pixel columns must be those of a batch encoded on fresh memory, every value valid.
     */
    @ParameterizedTest
    @EnumSource(PixelDtype.class)
    void pixelColumnsDoNotDependOnWhatTheReusedMemoryHeld(PixelDtype dtype) {
        ModelPreset preset = ModelPreset.QWEN2_5_VL;
        ArrowBatchEncoder encoder = new ArrowBatchEncoder(preset.visionConfig(), 0, dtype);
        Random random = new Random(37);
        // 448 x 448: 32 x 32 patches; 8 frames of 224 x 224: 4 x 16 x 16 patches (>= 1 MiB each,
        // so the pool keeps the buffers)
        byte[] image = new byte[448 * 448 * 3];
        random.nextBytes(image);
        byte[] video = new byte[8 * 224 * 224 * 3];
        random.nextBytes(video);
        TokenizedSample withImage =
                new TokenizedSample(
                        new RecordRef("chat", "file:/d.jsonl", 1, 0, "i"),
                        new long[] {1, 2},
                        new long[] {-100, 2},
                        image,
                        new long[] {1, 32, 32});
        TokenizedSample withVideo =
                new TokenizedSample(
                                new RecordRef("chat", "file:/d.jsonl", 2, 1, "v"),
                                new long[] {1, 2},
                                new long[] {-100, 2},
                                new byte[0],
                                new long[0])
                        .withVideos(video, new long[] {4, 16, 16}, new int[] {8}, new double[] {1});
        int patchDim = preset.visionConfig().patchDim();
        check(encoder, withImage, BatchSchema.PIXEL_VALUES, 1024L * patchDim * dtype.bytes);
        check(encoder, withVideo, BatchSchema.PIXEL_VALUES_VIDEOS, 1024L * patchDim * dtype.bytes);
    }

    private void check(
            ArrowBatchEncoder encoder, TokenizedSample sample, String column, long bytes) {
        TrainingBatch batch =
                new TrainingBatch(0, 0, 1, new TokenizedSample[] {sample}, new int[0]);
        byte[] expected;
        try (VectorSchemaRoot root = encoder.encode(batch, allocator)) {
            expected = pixelBytes(root, column);
        }
        assertThat((long) expected.length).isEqualTo(bytes);
        try (ArrowMemoryPool pool = new ArrowMemoryPool();
                BufferAllocator pooled =
                        new RootAllocator(
                                RootAllocator.configBuilder()
                                        .allocationManagerFactory(pool)
                                        .build())) {
            try (ArrowBuf earlier = pooled.buffer(bytes)) {
                earlier.setBytes(0, filled(earlier.capacity()));
            }
            long held = pool.freeBytes();
            assertThat(held).isGreaterThanOrEqualTo(bytes);
            try (VectorSchemaRoot root = encoder.encode(batch, pooled)) {
                assertThat(pool.freeBytes()).as("the batch took the earlier block").isZero();
                assertThat(pixelBytes(root, column)).isEqualTo(expected);
            }
        }
    }

    private static byte[] filled(long length) {
        byte[] bytes = new byte[Math.toIntExact(length)];
        java.util.Arrays.fill(bytes, (byte) 0xA5);
        return bytes;
    }

    /** The values of a pixel column as bytes, each value checked valid. */
    private static byte[] pixelBytes(VectorSchemaRoot root, String column) {
        ListVector list = (ListVector) root.getVector(column);
        BaseFixedWidthVector values =
                (BaseFixedWidthVector) ((FixedSizeListVector) list.getDataVector()).getDataVector();
        int count = values.getValueCount();
        for (int i = 0; i < count; i++) {
            assertThat(values.isNull(i)).as("value %d is valid", i).isFalse();
        }
        byte[] bytes = new byte[Math.toIntExact((long) count * values.getTypeWidth())];
        values.getDataBuffer().getBytes(0, bytes);
        return bytes;
    }
}
