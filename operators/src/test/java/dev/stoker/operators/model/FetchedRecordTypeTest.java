package dev.stoker.operators.model;

import static org.assertj.core.api.Assertions.assertThat;

import org.apache.flink.api.common.serialization.SerializerConfigImpl;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.java.typeutils.PojoTypeInfo;
import org.apache.flink.core.memory.DataInputDeserializer;
import org.apache.flink.core.memory.DataOutputSerializer;
import org.junit.jupiter.api.Test;

/**
 * A fetched record with a video given as frame images stays a Flink POJO (no Kryo fallback between
 * the fetch and the media stage) and survives its serializer: the frames' bytes per video, {@code
 * null} at a video file, and the frame paths.
 */
class FetchedRecordTypeTest {
    @Test
    void aRecordWithFramesAndAVideoFileRoundTripsThroughItsPojoSerializer() throws Exception {
        TypeInformation<FetchedRecord> type = TypeInformation.of(FetchedRecord.class);
        assertThat(type).isInstanceOf(PojoTypeInfo.class);
        assertThat(TypeInformation.of(VideoRef.class)).isInstanceOf(PojoTypeInfo.class);
        TypeSerializer<FetchedRecord> serializer =
                type.createSerializer(new SerializerConfigImpl());

        SftRecord record =
                new SftRecord(
                        new RecordRef("s3://b/t.jsonl", 3, 2, "r3"),
                        new ChatMessage[0],
                        new ImageRef[0]);
        record.videos =
                new VideoRef[] {
                    new VideoRef("clips/a.mp4", 0, 0, 0),
                    VideoRef.ofFrames(new String[] {"f/1.jpg", "f/2.png"}, 1.5, 3136, 0)
                };
        FetchedRecord in = new FetchedRecord(record, new byte[0][]);
        in.videoBytes = new byte[][] {{1, 2, 3}, null};
        in.videoFrames = new byte[][][] {null, {{4, 5}, {6}}};

        DataOutputSerializer out = new DataOutputSerializer(256);
        serializer.serialize(in, out);
        FetchedRecord back =
                serializer.deserialize(new DataInputDeserializer(out.getCopyOfBuffer()));

        assertThat(back).usingRecursiveComparison().isEqualTo(in);
        assertThat(back.framesOf(1)).isDeepEqualTo(new byte[][] {{4, 5}, {6}});
        assertThat(back.framesOf(0)).isNull();
        assertThat(back.record.videos[1].givenAsFrames()).isTrue();
        assertThat(back.record.videos[1].name()).isEqualTo("2 frames 'f/1.jpg' .. 'f/2.png'");
    }
}
