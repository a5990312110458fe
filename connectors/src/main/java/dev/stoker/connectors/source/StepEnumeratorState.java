package dev.stoker.connectors.source;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.util.Collections;
import java.util.SortedSet;
import java.util.TreeSet;
import org.apache.flink.core.io.SimpleVersionedSerializer;

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

    /** Version 1: generation (UTF), nextStep int64, count int32, returned steps int64... */
    static final class Serializer implements SimpleVersionedSerializer<StepEnumeratorState> {
        static final Serializer INSTANCE = new Serializer();

        @Override
        public int getVersion() {
            return 1;
        }

        @Override
        public byte[] serialize(StepEnumeratorState state) throws IOException {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream();
            try (DataOutputStream out = new DataOutputStream(bytes)) {
                out.writeUTF(state.generation);
                out.writeLong(state.nextStep);
                out.writeInt(state.returnedSteps.size());
                for (long step : state.returnedSteps) {
                    out.writeLong(step);
                }
            }
            return bytes.toByteArray();
        }

        @Override
        public StepEnumeratorState deserialize(int version, byte[] serialized) throws IOException {
            if (version != 1) {
                throw new IOException("Unknown StepEnumeratorState version " + version);
            }
            try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(serialized))) {
                String generation = in.readUTF();
                long next = in.readLong();
                int n = in.readInt();
                SortedSet<Long> returned = new TreeSet<>();
                for (int i = 0; i < n; i++) {
                    returned.add(in.readLong());
                }
                return new StepEnumeratorState(generation, next, returned);
            }
        }
    }
}
