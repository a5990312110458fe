package dev.stoker.operators.model;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.io.IOException;
import org.apache.flink.api.common.serialization.SerializerConfigImpl;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeutils.SerializerTestBase;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.java.typeutils.PojoTypeInfo;
import org.apache.flink.core.memory.DataInputDeserializer;
import org.apache.flink.core.memory.DataOutputSerializer;
import org.apache.flink.testutils.DeeplyEqualsChecker;
import org.junit.jupiter.api.Test;

/**
 * Flink's serializer contract (round trips alone and in sequences, copies, duplicates, snapshots)
 * for {@link TokenizedSampleSerializer}, plus the format version check and Flink's choice of the
 * serializer where a {@link TokenizedSample} is a field.
 */
class TokenizedSampleSerializerTest extends SerializerTestBase<TokenizedSample> {

    TokenizedSampleSerializerTest() {
        super(
                new DeeplyEqualsChecker()
                        .withCustomCheck(
                                (a, b) ->
                                        a instanceof TokenizedSample
                                                && b instanceof TokenizedSample,
                                (a, b, checker) ->
                                        sameSample(
                                                (TokenizedSample) a,
                                                (TokenizedSample) b,
                                                checker)));
    }

    @Override
    protected TypeSerializer<TokenizedSample> createSerializer() {
        return new TokenizedSampleSerializer();
    }

    @Override
    protected int getLength() {
        return -1;
    }

    @Override
    protected Class<TokenizedSample> getTypeClass() {
        return TokenizedSample.class;
    }

    @Override
    protected TokenizedSample[] getTestData() {
        // pixel arrays of every byte value, longer than Flink's network buffer, odd lengths, nulls
        byte[] big = new byte[3 * 16384 * 3 + 7];
        for (int i = 0; i < big.length; i++) {
            big[i] = (byte) (i * 7 + i / 256);
        }
        long[] ids = new long[9000];
        for (int i = 0; i < ids.length; i++) {
            ids[i] = 151_643L + i;
        }
        return new TokenizedSample[] {
            new TokenizedSample(
                    new RecordRef("llava-instruct", "s3://bucket/train.jsonl", 12, 11, "rec-11"),
                    new long[] {1, 2, 3},
                    new long[] {-100, 2, 3},
                    new byte[] {(byte) 255, 0, 127, (byte) 128, 1, 2},
                    new long[] {1, 2, 2}),
            new TokenizedSample(
                    new RecordRef("file:/data/ünïcödé.jsonl", 1L << 40, 0, null),
                    ids,
                    ids.clone(),
                    big,
                    new long[] {1, 14, 16, 1, 2, 2}),
            new TokenizedSample(
                    new RecordRef(null, 0, 5, ""),
                    new long[0],
                    new long[0],
                    new byte[0],
                    new long[0]),
            new TokenizedSample(new RecordRef("f", 3, 2, "x"), null, null, null, null),
        };
    }

    private static boolean sameSample(
            TokenizedSample a, TokenizedSample b, DeeplyEqualsChecker checker) {
        return a.ref.equals(b.ref)
                && checker.deepEquals(a.inputIds, b.inputIds)
                && checker.deepEquals(a.labels, b.labels)
                && checker.deepEquals(a.resizedRgb, b.resizedRgb)
                && checker.deepEquals(a.imageGridThw, b.imageGridThw);
    }

    @Test
    void anotherFormatVersionIsRejectedWithBothVersions() throws IOException {
        DataOutputSerializer out = new DataOutputSerializer(64);
        createSerializer().serialize(getTestData()[0], out);
        byte[] bytes = out.getCopyOfBuffer();
        bytes[0] = (byte) (TokenizedSampleSerializer.VERSION + 1);
        assertThatThrownBy(() -> createSerializer().deserialize(new DataInputDeserializer(bytes)))
                .isInstanceOf(IOException.class)
                .hasMessageContaining("version " + (TokenizedSampleSerializer.VERSION + 1))
                .hasMessageContaining("reads version " + TokenizedSampleSerializer.VERSION);
    }

    @Test
    void theFormatsOfEarlierStokersAreRejectedWithWhatToDo() throws IOException {
        DataOutputSerializer out = new DataOutputSerializer(64);
        createSerializer().serialize(getTestData()[0], out);
        byte[] bytes = out.getCopyOfBuffer();
        bytes[0] = 1;
        assertThatThrownBy(() -> createSerializer().deserialize(new DataInputDeserializer(bytes)))
                .isInstanceOf(IOException.class)
                .hasMessageContaining("version 1 was written by a Stoker that sent float32")
                .hasMessageContaining("start it afresh");
        bytes[0] = 2;
        assertThatThrownBy(() -> createSerializer().deserialize(new DataInputDeserializer(bytes)))
                .isInstanceOf(IOException.class)
                .hasMessageContaining("version 2 was written by a Stoker without mixture sources")
                .hasMessageContaining("start it afresh");
    }

    @Test
    void aNegativeArrayLengthIsRejected() throws IOException {
        DataOutputSerializer out = new DataOutputSerializer(64);
        TokenizedSample sample = getTestData()[0];
        createSerializer().serialize(sample, out);
        byte[] bytes = out.getCopyOfBuffer();
        // version byte, source (length varint + 14 chars), file (length varint + 23 chars), line,
        // sampleIndex, record id (1 + 6)
        int inputIdsLength =
                1
                        + 1
                        + sample.ref.source.length()
                        + 1
                        + sample.ref.file.length()
                        + 8
                        + 8
                        + 1
                        + sample.ref.recordId.length();
        assertThat(bytes[inputIdsLength + 3]).isEqualTo((byte) 3);
        bytes[inputIdsLength] = (byte) 0x80;
        assertThatThrownBy(() -> createSerializer().deserialize(new DataInputDeserializer(bytes)))
                .isInstanceOf(IOException.class)
                .hasMessageContaining("array length");
    }

    @Test
    void flinkPicksItWhereASampleIsAPojoField() {
        TypeInformation<SlotResult> slot = TypeInformation.of(SlotResult.class);
        assertThat(slot).isInstanceOf(PojoTypeInfo.class);
        PojoTypeInfo<SlotResult> pojo = (PojoTypeInfo<SlotResult>) slot;
        assertThat(pojo.getTypeAt("sample")).isInstanceOf(TokenizedSampleTypeInfo.class);
        assertThat(
                        TypeInformation.of(TokenizedSample.class)
                                .createSerializer(new SerializerConfigImpl()))
                .isInstanceOf(TokenizedSampleSerializer.class);
    }
}
