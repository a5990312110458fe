package dev.stoker.connectors.source;

import java.io.IOException;
import java.util.Collections;
import java.util.SortedSet;
import java.util.TreeSet;
import org.apache.flink.core.io.SimpleVersionedSerializer;
import org.apache.flink.core.memory.DataInputDeserializer;
import org.apache.flink.core.memory.DataOutputSerializer;

/**
 * Checkpointed state of the {@link StepEnumerator}: the shared-memory generation it produced for,
 * the next step never handed out, and steps handed back by failed readers.
 */
public final class StepEnumeratorState {
    final String generation;
    final long nextStep;
    final SortedSet<Long> returnedSteps;

    StepEnumeratorState(String generation, long nextStep, SortedSet<Long> returnedSteps) {
        this.generation = generation;
        this.nextStep = nextStep;
        this.returnedSteps = Collections.unmodifiableSortedSet(new TreeSet<>(returnedSteps));
    }

    /**
     * Checkpoint format of the state. Version {@value #VERSION}: generation (modified UTF-8, {@link
     * java.io.DataOutput#writeUTF}), nextStep (int64), the number of returned steps (int32), the
     * returned steps (int64 each, ascending), big-endian, nothing after. {@code
     * src/test/resources/checkpoint-formats} keeps bytes of each version, which must still restore.
     */
    static final class Serializer implements SimpleVersionedSerializer<StepEnumeratorState> {
        static final Serializer INSTANCE = new Serializer();

        /** The format version this serializer writes and reads. */
        static final int VERSION = 1;

        @Override
        public int getVersion() {
            return VERSION;
        }

        @Override
        public byte[] serialize(StepEnumeratorState state) throws IOException {
            DataOutputSerializer out = new DataOutputSerializer(64);
            out.writeUTF(state.generation);
            out.writeLong(state.nextStep);
            out.writeInt(state.returnedSteps.size());
            for (long step : state.returnedSteps) {
                out.writeLong(step);
            }
            return out.getCopyOfBuffer();
        }

        /**
         * @throws IOException if {@code version} is not {@value #VERSION} (the message names both),
         *     the count is negative, or the bytes are truncated or have bytes after the fields
         */
        @Override
        public StepEnumeratorState deserialize(int version, byte[] serialized) throws IOException {
            CheckpointFormat.requireVersion("StepEnumeratorState", version, VERSION);
            DataInputDeserializer in = new DataInputDeserializer(serialized);
            String generation = in.readUTF();
            long next = in.readLong();
            int n = in.readInt();
            if (n < 0) {
                throw new IOException(
                        "StepEnumeratorState checkpoint has a negative count of returned steps: "
                                + n);
            }
            SortedSet<Long> returned = new TreeSet<>();
            for (int i = 0; i < n; i++) {
                returned.add(in.readLong());
            }
            CheckpointFormat.requireFullyRead(
                    "StepEnumeratorState", version, in, serialized.length);
            return new StepEnumeratorState(generation, next, returned);
        }
    }
}
