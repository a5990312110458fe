package dev.stoker.connectors.source;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/**
 * Checkpoint format of a {@link StepSplit}: version 1 = (generation UTF, step int64,
 * elementsEmitted int32).
 */
final class StepSplitSerializer implements SimpleVersionedSerializer<StepSplit> {
    static final StepSplitSerializer INSTANCE = new StepSplitSerializer();

    @Override
    public int getVersion() {
        return 1;
    }

    @Override
    public byte[] serialize(StepSplit split) throws IOException {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream(32);
        try (DataOutputStream out = new DataOutputStream(bytes)) {
            out.writeUTF(split.generation);
            out.writeLong(split.step);
            out.writeInt(split.elementsEmitted);
        }
        return bytes.toByteArray();
    }

    @Override
    public StepSplit deserialize(int version, byte[] serialized) throws IOException {
        if (version != 1) {
            throw new IOException("Unknown StepSplit serializer version " + version);
        }
        try (DataInputStream in =
                new DataInputStream(new java.io.ByteArrayInputStream(serialized))) {
            return new StepSplit(in.readUTF(), in.readLong(), in.readInt());
        }
    }
}
