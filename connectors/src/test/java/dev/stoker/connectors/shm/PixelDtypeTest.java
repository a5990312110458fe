package dev.stoker.connectors.shm;

import static org.assertj.core.api.Assertions.assertThat;

import dev.stoker.connectors.protocol.BatchSchema;
import dev.stoker.connectors.protocol.PixelDtype;
import dev.stoker.operators.image.Patchifier;
import dev.stoker.operators.image.QwenVisionConfig;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BaseFixedWidthVector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.UInt2Vector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.complex.FixedSizeListVector;
import org.apache.arrow.vector.complex.ListVector;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * bfloat16 rounding and the {@code pixel_values} column in both element types: the sink's values
 * are {@link Patchifier}'s (checked against Hugging Face's in HfPixelParityTest), as float32 bit
 * for bit or rounded to bfloat16.
 */
class PixelDtypeTest {
    private static final QwenVisionConfig VISION = new QwenVisionConfig();

    /** A 28x28 image (2x2 patches of Qwen2-VL) using every byte value. */
    private static final byte[] RGB = new byte[28 * 28 * 3];

    static {
        for (int i = 0; i < RGB.length; i++) {
            RGB[i] = (byte) (i * 11 + i / 256);
        }
    }

    private final BufferAllocator allocator = new RootAllocator();

    @AfterEach
    void closeAllocator() {
        allocator.close();
    }

    /** The same cases as python/tests/test_reader.py's BF16_CASES. */
    @Test
    void roundsToNearestEvenLikeTorch() {
        assertBits(1.0f, 0x3F80);
        assertBits(-2.5f, 0xC020);
        assertBits(1.00390625f, 0x3F80); // 1 + 2^-8: a tie, to even (down)
        assertBits(1.01171875f, 0x3F82); // 1 + 3 * 2^-8: a tie, to even (up)
        assertBits(Math.nextUp(1.00390625f), 0x3F81); // one step above the tie: up
        assertBits(Float.POSITIVE_INFINITY, 0x7F80);
        assertBits(Float.NEGATIVE_INFINITY, 0xFF80);
        assertBits(Float.MAX_VALUE, 0x7F80); // beyond bfloat16's range: infinity
        assertBits(Float.NaN, 0x7FC0);
        assertBits(Float.intBitsToFloat(0xFFC1_2345), 0x7FC0); // any NaN, also negative ones
        assertBits(0.0f, 0x0000);
        assertBits(-0.0f, 0x8000);
        assertBits(1e-40f, 0x0001); // a float32 subnormal keeps its upper bits
    }

    @Test
    void widenedBackTheValueIsWithinHalfABfloat16Step() {
        for (float v = -3f; v < 3f; v += 0.001f) {
            float back = Float.intBitsToFloat((PixelDtype.toBfloat16(v) & 0xFFFF) << 16);
            assertThat(Math.abs(back - v)).isLessThanOrEqualTo(Math.ulp(back) * 65536 / 2);
        }
    }

    @Test
    void float32ColumnHoldsThePatchifiersValuesBitForBit() {
        float[] px = new Patchifier(VISION).patchify(RGB, 0, 2, 2);
        try (VectorSchemaRoot root = encode(PixelDtype.FLOAT32)) {
            BaseFixedWidthVector values = pixelItems(root);
            assertThat(values).isInstanceOf(Float4Vector.class);
            assertThat(values.getValueCount()).isEqualTo(px.length);
            for (int i = 0; i < px.length; i++) {
                assertThat(Float.floatToRawIntBits(((Float4Vector) values).get(i)))
                        .isEqualTo(Float.floatToRawIntBits(px[i]));
            }
            assertThat(root.getSchema().getCustomMetadata())
                    .containsEntry(BatchSchema.PIXEL_DTYPE_KEY, "float32");
        }
    }

    @Test
    void bfloat16ColumnIsUint16BitsNamedInTheMetadata() {
        float[] px = new Patchifier(VISION).patchify(RGB, 0, 2, 2);
        try (VectorSchemaRoot root = encode(PixelDtype.BFLOAT16)) {
            BaseFixedWidthVector values = pixelItems(root);
            assertThat(values).isInstanceOf(UInt2Vector.class);
            assertThat(values.getValueCount()).isEqualTo(px.length);
            for (int i = 0; i < px.length; i++) {
                assertThat(((UInt2Vector) values).get(i) & 0xFFFF)
                        .isEqualTo(PixelDtype.toBfloat16(px[i]) & 0xFFFF);
                assertThat(values.isNull(i)).isFalse();
            }
            assertThat(root.getSchema().getCustomMetadata())
                    .containsEntry(BatchSchema.PIXEL_DTYPE_KEY, "bfloat16");
        }
    }

    private VectorSchemaRoot encode(PixelDtype dtype) {
        TokenizedSample withImages =
                new TokenizedSample(
                        new RecordRef("file:/d.jsonl", 1, 0, "a"),
                        new long[] {1, 2},
                        new long[] {-100, 2},
                        RGB,
                        new long[] {1, 2, 2});
        TokenizedSample textOnly =
                new TokenizedSample(
                        new RecordRef("file:/d.jsonl", 2, 1, "b"),
                        new long[] {3},
                        new long[] {3},
                        new byte[0],
                        new long[0]);
        TrainingBatch batch =
                new TrainingBatch(
                        0, 0, 2, new TokenizedSample[] {textOnly, withImages}, new int[0]);
        return new ArrowBatchEncoder(VISION, 0, dtype).encode(batch, allocator);
    }

    private static BaseFixedWidthVector pixelItems(VectorSchemaRoot root) {
        ListVector list = (ListVector) root.getVector(BatchSchema.PIXEL_VALUES);
        return (BaseFixedWidthVector) ((FixedSizeListVector) list.getDataVector()).getDataVector();
    }

    private static void assertBits(float value, int bits) {
        assertThat(PixelDtype.toBfloat16(value) & 0xFFFF).as("bits of %s", value).isEqualTo(bits);
    }
}
