package dev.stoker.connectors.shm;

import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.connectors.protocol.PixelDtype;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import dev.stoker.operators.preset.ModelPreset;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The encoder refuses samples whose resized bytes do not match their image grids, and samples
 * without a mixture source name.
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
}
