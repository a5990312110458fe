package dev.stoker.connectors.shm;

import static org.assertj.core.api.Assertions.assertThat;

import dev.stoker.connectors.protocol.BatchSchema;
import dev.stoker.connectors.protocol.PixelDtype;
import dev.stoker.operators.image.Patchifier;
import dev.stoker.operators.image.QwenVisionConfig;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import dev.stoker.operators.preset.ModelPreset;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BaseFixedWidthVector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.UInt1Vector;
import org.apache.arrow.vector.UInt2Vector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.complex.FixedSizeListVector;
import org.apache.arrow.vector.complex.ListVector;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * bfloat16 rounding and the {@code pixel_values} column in every element type: the sink's values
 * are {@link Patchifier}'s (checked against Hugging Face's in HfPixelParityTest), as float32 bit
 * for bit or rounded to bfloat16; uint8 holds the resized samples at the positions of those values
 * (the patch order of Hugging Face's reshape/transpose, rebuilt independently here).
 */
class PixelDtypeTest {
    private static final QwenVisionConfig VISION = ModelPreset.QWEN2_VL.visionConfig();

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

    /** The same cases as python/tests/unit/test_reader.py's BF16_CASES. */
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

    @Test
    void uint8ColumnHoldsTheResizedSamplesInHuggingFacesPatchOrder() {
        try (VectorSchemaRoot root = encode(PixelDtype.UINT8)) {
            BaseFixedWidthVector values = pixelItems(root);
            assertThat(values).isInstanceOf(UInt1Vector.class);
            byte[] expected = hfPatchOrder(RGB, 2, 2);
            assertThat(values.getValueCount()).isEqualTo(expected.length);
            for (int i = 0; i < expected.length; i++) {
                assertThat(((UInt1Vector) values).get(i)).as("value %d", i).isEqualTo(expected[i]);
                assertThat(values.isNull(i)).isFalse();
            }
            assertThat(root.getSchema().getCustomMetadata())
                    .containsEntry(BatchSchema.PIXEL_DTYPE_KEY, "uint8");
        }
    }

    /**
     * Several images per row, non-square grids, rows without images: value {@code i} of the uint8
     * column, normalised with the documented float32 arithmetic for the channel of its position, is
     * value {@code i} of the float32 column bit for bit, and the bytes are each image's in Hugging
     * Face's patch order.
     */
    @Test
    void uint8ValuesNormalisedAreTheFloat32ColumnBitForBit() {
        byte[] wide = new byte[28 * 56 * 3]; // 2 x 4 patches
        for (int i = 0; i < wide.length; i++) {
            wide[i] = (byte) (i * 7 + 3);
        }
        byte[] twoImages = new byte[RGB.length + wide.length];
        System.arraycopy(RGB, 0, twoImages, 0, RGB.length);
        System.arraycopy(wide, 0, twoImages, RGB.length, wide.length);
        TokenizedSample[] samples = {
            sample(0, RGB, new long[] {1, 2, 2}),
            sample(1, new byte[0], new long[0]),
            sample(2, twoImages, new long[] {1, 2, 2, 1, 2, 4})
        };
        byte[] hf =
                concat(hfPatchOrder(RGB, 2, 2), hfPatchOrder(RGB, 2, 2), hfPatchOrder(wide, 2, 4));
        int perChannel = VISION.patchDim() / 3;
        try (VectorSchemaRoot u8 = encode(PixelDtype.UINT8, samples);
                VectorSchemaRoot f32 = encode(PixelDtype.FLOAT32, samples)) {
            UInt1Vector bytes = (UInt1Vector) pixelItems(u8);
            Float4Vector floats = (Float4Vector) pixelItems(f32);
            assertThat(bytes.getValueCount()).isEqualTo(hf.length);
            assertThat(floats.getValueCount()).isEqualTo(hf.length);
            for (int i = 0; i < hf.length; i++) {
                assertThat(bytes.get(i)).as("value %d", i).isEqualTo(hf[i]);
                int c = (i % VISION.patchDim()) / perChannel;
                float mean = (float) VISION.imageMean[c];
                float std = (float) VISION.imageStd[c];
                float normalised = ((float) ((bytes.get(i) & 0xFF) * (1 / 255.0)) - mean) / std;
                assertThat(Float.floatToRawIntBits(floats.get(i)))
                        .as("value %d", i)
                        .isEqualTo(Float.floatToRawIntBits(normalised));
            }
            ListVector u8Rows = (ListVector) u8.getVector(BatchSchema.PIXEL_VALUES);
            ListVector f32Rows = (ListVector) f32.getVector(BatchSchema.PIXEL_VALUES);
            for (int r = 0; r < samples.length; r++) {
                assertThat(u8Rows.getElementEndIndex(r)).isEqualTo(f32Rows.getElementEndIndex(r));
            }
        }
    }

    /**
     * One image's patch rows as Hugging Face's {@code Qwen2VLImageProcessor} orders them: the frame
     * repeated to {@code temporal_patch_size}, {@code reshape(t, tps, C, gh/m, m, ps, gw/m, m,
     * ps).transpose(0, 3, 6, 4, 7, 2, 1, 5, 8).reshape(t*gh*gw, C*tps*ps*ps)}, written as the index
     * of each output value.
     */
    private static byte[] hfPatchOrder(byte[] rgb, int gridH, int gridW) {
        int ps = VISION.patchSize;
        int m = VISION.mergeSize;
        int tps = VISION.temporalPatchSize;
        int d = VISION.patchDim();
        int width = gridW * ps;
        byte[] out = new byte[gridH * gridW * d];
        for (int i = 0; i < out.length; i++) {
            int patch = i / d;
            int j = i % d;
            // patch = ((bh * gw/m + bw) * m + mh) * m + mw; j = ((c * tps + t) * ps + y) * ps + x
            int mw = patch % m;
            int mh = patch / m % m;
            int bw = patch / (m * m) % (gridW / m);
            int bh = patch / (m * m) / (gridW / m);
            int x = j % ps;
            int y = j / ps % ps;
            int c = j / (ps * ps * tps);
            int row = (bh * m + mh) * ps + y;
            int col = (bw * m + mw) * ps + x;
            out[i] = rgb[(row * width + col) * 3 + c];
        }
        return out;
    }

    private static byte[] concat(byte[]... parts) {
        int n = 0;
        for (byte[] p : parts) {
            n += p.length;
        }
        byte[] out = new byte[n];
        int at = 0;
        for (byte[] p : parts) {
            System.arraycopy(p, 0, out, at, p.length);
            at += p.length;
        }
        return out;
    }

    private static TokenizedSample sample(int slot, byte[] rgb, long[] grids) {
        return new TokenizedSample(
                new RecordRef(RecordRef.SINGLE_SOURCE, "file:/d.jsonl", slot + 1, slot, "r" + slot),
                new long[] {1, 2},
                new long[] {-100, 2},
                rgb,
                grids);
    }

    private VectorSchemaRoot encode(PixelDtype dtype, TokenizedSample[] samples) {
        TrainingBatch batch = new TrainingBatch(0, 0, samples.length, samples, new int[0]);
        return new ArrowBatchEncoder(VISION, 0, dtype).encode(batch, allocator);
    }

    private VectorSchemaRoot encode(PixelDtype dtype) {
        TokenizedSample withImages =
                new TokenizedSample(
                        new RecordRef(RecordRef.SINGLE_SOURCE, "file:/d.jsonl", 1, 0, "a"),
                        new long[] {1, 2},
                        new long[] {-100, 2},
                        RGB,
                        new long[] {1, 2, 2});
        TokenizedSample textOnly =
                new TokenizedSample(
                        new RecordRef(RecordRef.SINGLE_SOURCE, "file:/d.jsonl", 2, 1, "b"),
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
