package dev.stoker.operators.model;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import org.apache.flink.api.common.serialization.SerializerConfigImpl;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeutils.SerializerTestBase;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.java.typeutils.PojoTypeInfo;
import org.apache.flink.core.memory.DataInputDeserializer;
import org.apache.flink.core.memory.DataOutputSerializer;
import org.apache.flink.testutils.DeeplyEqualsChecker;
import org.apache.flink.types.StringValue;
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
            // an image and two videos (5 and 4 frames), frames of every byte value
            new TokenizedSample(
                            new RecordRef("videos", "file:/v.jsonl", 4, 3, "v"),
                            new long[] {151652, 151656, 151653},
                            new long[] {-100, -100, -100},
                            new byte[] {1, 2, 3},
                            new long[] {1, 2, 2})
                    .withVideos(
                            big,
                            new long[] {3, 4, 6, 2, 2, 2},
                            new int[] {5, 4},
                            new double[] {1.0, 2.0020000000000002}),
            new TokenizedSample(new RecordRef("f", 3, 2, "x"), null, null, null, null)
                    .withVideos(null, null, null, null),
        };
    }

    private static boolean sameSample(
            TokenizedSample a, TokenizedSample b, DeeplyEqualsChecker checker) {
        return a.ref.equals(b.ref)
                && checker.deepEquals(a.inputIds, b.inputIds)
                && checker.deepEquals(a.labels, b.labels)
                && checker.deepEquals(a.resizedRgb, b.resizedRgb)
                && checker.deepEquals(a.imageGridThw, b.imageGridThw)
                && checker.deepEquals(a.videoRgb, b.videoRgb)
                && checker.deepEquals(a.videoGridThw, b.videoGridThw)
                && checker.deepEquals(a.videoFrames, b.videoFrames)
                && checker.deepEquals(a.secondPerGridTs, b.secondPerGridTs);
    }

    /**
     * Version 3 (Stoker before video), written here from its documented layout, not by the
     * serializer: it restores as the same sample without videos (empty video arrays).
     */
    @Test
    void aSampleOfVersion3RestoresWithoutVideos() throws IOException {
        DataOutputSerializer out = new DataOutputSerializer(128);
        out.writeByte(3);
        StringValue.writeString("src", out);
        StringValue.writeString("file:/a.jsonl", out);
        out.writeLong(7);
        out.writeLong(6);
        StringValue.writeString(null, out);
        out.writeInt(2); // input_ids
        out.writeLong(151644);
        out.writeLong(42);
        out.writeInt(2); // labels
        out.writeLong(-100);
        out.writeLong(42);
        out.writeInt(3); // resized RGB
        out.write(new byte[] {9, 8, 7});
        out.writeInt(3); // image_grid_thw
        out.writeLong(1);
        out.writeLong(2);
        out.writeLong(2);
        DataInputDeserializer in = new DataInputDeserializer(out.getCopyOfBuffer());
        TokenizedSample sample = createSerializer().deserialize(in);
        assertThat(in.available()).isZero();
        assertThat(sample.ref).isEqualTo(new RecordRef("src", "file:/a.jsonl", 7, 6, null));
        assertThat(sample.inputIds).containsExactly(151644, 42);
        assertThat(sample.labels).containsExactly(-100, 42);
        assertThat(sample.resizedRgb).containsExactly(9, 8, 7);
        assertThat(sample.imageGridThw).containsExactly(1, 2, 2);
        assertThat(sample.videoRgb).isEmpty();
        assertThat(sample.videoGridThw).isEmpty();
        assertThat(sample.videoFrames).isEmpty();
        assertThat(sample.secondPerGridTs).isEmpty();
        assertThat(sample.numVideos()).isZero();
    }

    /**
     * Today's version, frozen in {@code checkpoint-formats/tokenized-sample-v4.hex} (written from
     * the documented layout, not by the serializer): it still restores to the same sample, and
     * today's serializer writes exactly those bytes, so a changed format fails here.
     */
    @Test
    void theFrozenSampleOfVersion4RestoresAndIsWhatTodayWrites() throws IOException {
        byte[] frozen;
        try (InputStream in =
                getClass().getResourceAsStream("/checkpoint-formats/tokenized-sample-v4.hex")) {
            assertThat(in).as("fixture tokenized-sample-v4.hex").isNotNull();
            frozen =
                    HexFormat.of()
                            .parseHex(
                                    new String(in.readAllBytes(), StandardCharsets.US_ASCII)
                                            .strip());
        }
        DataInputDeserializer in = new DataInputDeserializer(frozen);
        TokenizedSample sample = createSerializer().deserialize(in);
        assertThat(in.available()).isZero();
        assertThat(sample.ref)
                .isEqualTo(new RecordRef("mix-a", "s3://b/train.jsonl", 12, 11, null));
        assertThat(sample.inputIds).containsExactly(151652, 151655, 151653);
        assertThat(sample.labels).containsExactly(-100, -100, 151653);
        assertThat(sample.resizedRgb).containsExactly(255, 0, 127, 128, 1, 2);
        assertThat(sample.imageGridThw).containsExactly(1, 2, 2);
        assertThat(sample.videoRgb).containsExactly(9, 8, 7, 6, 5, 4, 3, 2);
        assertThat(sample.videoGridThw).containsExactly(1, 2, 2);
        assertThat(sample.videoFrames).containsExactly(2);
        assertThat(sample.secondPerGridTs).containsExactly(1.001);
        DataOutputSerializer out = new DataOutputSerializer(frozen.length);
        createSerializer().serialize(sample, out);
        assertThat(out.getCopyOfBuffer())
                .as(
                        "version %d still writes the bytes of version 4",
                        TokenizedSampleSerializer.VERSION)
                .isEqualTo(frozen);
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
                .hasMessageContaining(
                        "reads versions "
                                + TokenizedSampleSerializer.VERSION_WITHOUT_VIDEO
                                + " and "
                                + TokenizedSampleSerializer.VERSION);
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
