package dev.stoker.connectors.source;

import java.io.IOException;
import org.apache.flink.core.io.SimpleVersionedSerializer;
import org.apache.flink.core.memory.DataInputDeserializer;
import org.apache.flink.core.memory.DataOutputSerializer;

/**
 * Checkpoint format of a {@link StepSplit}. Version {@value #VERSION}: generation (modified UTF-8,
 * {@link java.io.DataOutput#writeUTF}), step (int64), elementsEmitted (int32), big-endian, nothing
 * after. {@code src/test/resources/checkpoint-formats} keeps bytes of each version, which must
 * still restore.
 */
final class StepSplitSerializer implements SimpleVersionedSerializer<StepSplit> {
    static final StepSplitSerializer INSTANCE = new StepSplitSerializer();

    /** The format version this serializer writes and reads. */
    static final int VERSION = 1;

    @Override
    public int getVersion() {
        return VERSION;
    }

    @Override
    public byte[] serialize(StepSplit split) throws IOException {
        DataOutputSerializer out = new DataOutputSerializer(32);
        out.writeUTF(split.generation);
        out.writeLong(split.step);
        out.writeInt(split.elementsEmitted);
        return out.getCopyOfBuffer();
    }

    /**
     * @throws IOException if {@code version} is not {@value #VERSION} (the message names both), or
     *     the bytes are truncated or have bytes after the fields
     */
    @Override
    public StepSplit deserialize(int version, byte[] serialized) throws IOException {
        CheckpointFormat.requireVersion("StepSplit", version, VERSION);
        DataInputDeserializer in = new DataInputDeserializer(serialized);
        StepSplit split = new StepSplit(in.readUTF(), in.readLong(), in.readInt());
        CheckpointFormat.requireFullyRead("StepSplit", version, in, serialized.length);
        return split;
    }
}
