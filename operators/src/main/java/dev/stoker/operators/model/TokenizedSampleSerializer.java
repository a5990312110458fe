package dev.stoker.operators.model;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import org.apache.flink.api.common.typeutils.SimpleTypeSerializerSnapshot;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.common.typeutils.TypeSerializerSnapshot;
import org.apache.flink.core.memory.DataInputView;
import org.apache.flink.core.memory.DataOutputView;
import org.apache.flink.types.StringValue;

/**
 * Flink serializer of {@link TokenizedSample} that moves {@code pixel_values} as bulk byte copies
 * instead of value by value (Flink's {@code FloatPrimitiveArraySerializer} writes each of the ~10^6
 * floats of a sample with its own call).
 *
 * <p>Format version {@value #VERSION}: a version byte; the {@link RecordRef} (file and record id as
 * nullable {@link StringValue}s, line and sample index as int64); then {@code input_ids}, {@code
 * labels} (int64), {@code pixel_values} (float32) and {@code image_grid_thw} (int64), each as an
 * int32 length ({@code -1} for null) followed by its elements (the int64s big-endian, as Flink
 * writes them; the float32s little-endian, copied in bulk). Used for the samples on their way to
 * the sink and for the slots the sink stages in shared memory.
 *
 * <p>Not thread-safe (it reuses a 64 KiB copy buffer); Flink {@linkplain #duplicate() duplicates}
 * it per thread.
 */
public final class TokenizedSampleSerializer extends TypeSerializer<TokenizedSample> {
    private static final long serialVersionUID = 1L;

    /** The format version written by this serializer. */
    static final int VERSION = 1;

    private static final int CHUNK_BYTES = 64 * 1024;

    private transient ByteBuffer chunk;
    private transient FloatBuffer chunkFloats;

    @Override
    public boolean isImmutableType() {
        return false;
    }

    @Override
    public TypeSerializer<TokenizedSample> duplicate() {
        return new TokenizedSampleSerializer();
    }

    @Override
    public TokenizedSample createInstance() {
        return new TokenizedSample();
    }

    @Override
    public TokenizedSample copy(TokenizedSample from) {
        RecordRef r = from.ref;
        return new TokenizedSample(
                r == null ? null : new RecordRef(r.file, r.line, r.sampleIndex, r.recordId),
                clone(from.inputIds),
                clone(from.labels),
                from.pixelValues == null ? null : from.pixelValues.clone(),
                clone(from.imageGridThw));
    }

    @Override
    public TokenizedSample copy(TokenizedSample from, TokenizedSample reuse) {
        return copy(from);
    }

    @Override
    public int getLength() {
        return -1;
    }

    /**
     * @throws IOException if {@code target} fails
     * @throws NullPointerException if {@code sample.ref} is null
     */
    @Override
    public void serialize(TokenizedSample sample, DataOutputView target) throws IOException {
        target.writeByte(VERSION);
        RecordRef ref = sample.ref;
        StringValue.writeString(ref.file, target);
        target.writeLong(ref.line);
        target.writeLong(ref.sampleIndex);
        StringValue.writeString(ref.recordId, target);
        writeLongs(sample.inputIds, target);
        writeLongs(sample.labels, target);
        writeFloats(sample.pixelValues, target);
        writeLongs(sample.imageGridThw, target);
    }

    /**
     * @throws IOException if {@code source} fails or holds another format version
     */
    @Override
    public TokenizedSample deserialize(DataInputView source) throws IOException {
        int version = source.readUnsignedByte();
        if (version != VERSION) {
            throw new IOException(
                    "unsupported TokenizedSample format version "
                            + version
                            + " (this Stoker reads version "
                            + VERSION
                            + ")");
        }
        RecordRef ref = new RecordRef();
        ref.file = StringValue.readString(source);
        ref.line = source.readLong();
        ref.sampleIndex = source.readLong();
        ref.recordId = StringValue.readString(source);
        long[] inputIds = readLongs(source);
        long[] labels = readLongs(source);
        float[] pixelValues = readFloats(source);
        return new TokenizedSample(ref, inputIds, labels, pixelValues, readLongs(source));
    }

    @Override
    public TokenizedSample deserialize(TokenizedSample reuse, DataInputView source)
            throws IOException {
        return deserialize(source);
    }

    @Override
    public void copy(DataInputView source, DataOutputView target) throws IOException {
        serialize(deserialize(source), target);
    }

    @Override
    public boolean equals(Object obj) {
        return obj instanceof TokenizedSampleSerializer;
    }

    @Override
    public int hashCode() {
        return TokenizedSampleSerializer.class.hashCode();
    }

    @Override
    public TypeSerializerSnapshot<TokenizedSample> snapshotConfiguration() {
        return new Snapshot();
    }

    private void writeFloats(float[] values, DataOutputView target) throws IOException {
        if (values == null) {
            target.writeInt(-1);
            return;
        }
        target.writeInt(values.length);
        ensureChunk();
        int perChunk = CHUNK_BYTES / Float.BYTES;
        for (int off = 0; off < values.length; off += perChunk) {
            int n = Math.min(perChunk, values.length - off);
            chunkFloats.clear();
            chunkFloats.put(values, off, n);
            target.write(chunk.array(), 0, n * Float.BYTES);
        }
    }

    private float[] readFloats(DataInputView source) throws IOException {
        int length = readLength(source);
        if (length < 0) {
            return null;
        }
        float[] values = new float[length];
        ensureChunk();
        int perChunk = CHUNK_BYTES / Float.BYTES;
        for (int off = 0; off < length; off += perChunk) {
            int n = Math.min(perChunk, length - off);
            source.readFully(chunk.array(), 0, n * Float.BYTES);
            chunkFloats.clear();
            chunkFloats.get(values, off, n);
        }
        return values;
    }

    private static void writeLongs(long[] values, DataOutputView target) throws IOException {
        if (values == null) {
            target.writeInt(-1);
            return;
        }
        target.writeInt(values.length);
        for (long v : values) { // token ids: thousands, not millions; no bulk copy needed
            target.writeLong(v);
        }
    }

    private static long[] readLongs(DataInputView source) throws IOException {
        int length = readLength(source);
        if (length < 0) {
            return null;
        }
        long[] values = new long[length];
        for (int i = 0; i < length; i++) {
            values[i] = source.readLong();
        }
        return values;
    }

    private static int readLength(DataInputView source) throws IOException {
        int length = source.readInt();
        if (length < -1) {
            throw new IOException("corrupt TokenizedSample: array length " + length);
        }
        return length;
    }

    private void ensureChunk() {
        if (chunk == null) {
            chunk = ByteBuffer.allocate(CHUNK_BYTES).order(ByteOrder.LITTLE_ENDIAN);
            chunkFloats = chunk.asFloatBuffer();
        }
    }

    private static long[] clone(long[] values) {
        return values == null ? null : values.clone();
    }

    /** Snapshot of the stateless configuration (there is none), for savepoints and staged slots. */
    public static final class Snapshot extends SimpleTypeSerializerSnapshot<TokenizedSample> {
        /** Used by Flink when it reads a snapshot back. */
        public Snapshot() {
            super(TokenizedSampleSerializer::new);
        }
    }
}
