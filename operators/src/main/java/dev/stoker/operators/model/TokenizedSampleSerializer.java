package dev.stoker.operators.model;

import java.io.IOException;
import org.apache.flink.api.common.typeutils.SimpleTypeSerializerSnapshot;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.common.typeutils.TypeSerializerSnapshot;
import org.apache.flink.core.memory.DataInputView;
import org.apache.flink.core.memory.DataOutputView;
import org.apache.flink.types.StringValue;

/**
 * Flink serializer of {@link TokenizedSample} that moves the resized RGB bytes in one bulk copy.
 *
 * <p>Format version {@value #VERSION}: a version byte; the {@link RecordRef} (source, file and
 * record id as nullable {@link StringValue}s, line and sample index as int64); then {@code
 * input_ids}, {@code labels} (int64), the resized RGB (uint8) and {@code image_grid_thw} (int64),
 * then the video RGB (uint8), {@code video_grid_thw} (int64), the videos' frame counts (int32) and
 * {@code second_per_grid_ts} (float64), each as an int32 length ({@code -1} for null) followed by
 * its elements (big-endian, as Flink writes them). Used for the samples on their way to the sink
 * and for the slots the sink stages in shared memory. Version 3 (Stoker before video) is the same
 * without the four video arrays and is still read, as a sample without videos. Version 1 (Stoker
 * before the sink patchified) carried float32 {@code pixel_values} instead and is not read: the
 * normalised values cannot be turned back into the bytes. Version 2 (Stoker before mixtures) had no
 * source name and is not read either.
 */
public final class TokenizedSampleSerializer extends TypeSerializer<TokenizedSample> {
    private static final long serialVersionUID = 1L;

    /** The format version written by this serializer. */
    static final int VERSION = 4;

    /** The previous format version (no videos), still read. */
    static final int VERSION_WITHOUT_VIDEO = 3;

    @Override
    public boolean isImmutableType() {
        return false;
    }

    /** Stateless: one instance serves every thread. */
    @Override
    public TypeSerializer<TokenizedSample> duplicate() {
        return this;
    }

    @Override
    public TokenizedSample createInstance() {
        return new TokenizedSample();
    }

    @Override
    public TokenizedSample copy(TokenizedSample from) {
        RecordRef r = from.ref;
        return new TokenizedSample(
                        r == null
                                ? null
                                : new RecordRef(
                                        r.source, r.file, r.line, r.sampleIndex, r.recordId),
                        clone(from.inputIds),
                        clone(from.labels),
                        from.resizedRgb == null ? null : from.resizedRgb.clone(),
                        clone(from.imageGridThw))
                .withVideos(
                        from.videoRgb == null ? null : from.videoRgb.clone(),
                        clone(from.videoGridThw),
                        from.videoFrames == null ? null : from.videoFrames.clone(),
                        from.secondPerGridTs == null ? null : from.secondPerGridTs.clone());
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
        StringValue.writeString(ref.source, target);
        StringValue.writeString(ref.file, target);
        target.writeLong(ref.line);
        target.writeLong(ref.sampleIndex);
        StringValue.writeString(ref.recordId, target);
        writeLongs(sample.inputIds, target);
        writeLongs(sample.labels, target);
        writeBytes(sample.resizedRgb, target);
        writeLongs(sample.imageGridThw, target);
        writeBytes(sample.videoRgb, target);
        writeLongs(sample.videoGridThw, target);
        writeInts(sample.videoFrames, target);
        writeDoubles(sample.secondPerGridTs, target);
    }

    /**
     * @throws IOException if {@code source} fails or holds a format version other than {@value
     *     #VERSION} and {@value #VERSION_WITHOUT_VIDEO}
     */
    @Override
    public TokenizedSample deserialize(DataInputView source) throws IOException {
        int version = source.readUnsignedByte();
        if (version != VERSION && version != VERSION_WITHOUT_VIDEO) {
            throw new IOException(
                    "unsupported TokenizedSample format version "
                            + version
                            + " (this Stoker reads versions "
                            + VERSION_WITHOUT_VIDEO
                            + " and "
                            + VERSION
                            + (version == 1
                                    ? "; version 1 was written by a Stoker that sent float32"
                                            + " pixel_values to the sink"
                                    : version == 2
                                            ? "; version 2 was written by a Stoker without"
                                                    + " mixture sources"
                                            : "")
                            + (version == 1 || version == 2
                                    ? ": resume such a job with the Stoker that took the"
                                            + " savepoint, or start it afresh"
                                    : "")
                            + ")");
        }
        RecordRef ref = new RecordRef();
        ref.source = StringValue.readString(source);
        ref.file = StringValue.readString(source);
        ref.line = source.readLong();
        ref.sampleIndex = source.readLong();
        ref.recordId = StringValue.readString(source);
        long[] inputIds = readLongs(source);
        long[] labels = readLongs(source);
        byte[] resizedRgb = readBytes(source);
        TokenizedSample sample =
                new TokenizedSample(ref, inputIds, labels, resizedRgb, readLongs(source));
        if (version == VERSION) {
            sample.withVideos(
                    readBytes(source), readLongs(source), readInts(source), readDoubles(source));
        }
        return sample;
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

    private static void writeBytes(byte[] values, DataOutputView target) throws IOException {
        if (values == null) {
            target.writeInt(-1);
            return;
        }
        target.writeInt(values.length);
        target.write(values);
    }

    private static byte[] readBytes(DataInputView source) throws IOException {
        int length = readLength(source);
        if (length < 0) {
            return null;
        }
        byte[] values = new byte[length];
        source.readFully(values);
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

    private static void writeInts(int[] values, DataOutputView target) throws IOException {
        if (values == null) {
            target.writeInt(-1);
            return;
        }
        target.writeInt(values.length);
        for (int v : values) {
            target.writeInt(v);
        }
    }

    private static int[] readInts(DataInputView source) throws IOException {
        int length = readLength(source);
        if (length < 0) {
            return null;
        }
        int[] values = new int[length];
        for (int i = 0; i < length; i++) {
            values[i] = source.readInt();
        }
        return values;
    }

    private static void writeDoubles(double[] values, DataOutputView target) throws IOException {
        if (values == null) {
            target.writeInt(-1);
            return;
        }
        target.writeInt(values.length);
        for (double v : values) {
            target.writeDouble(v);
        }
    }

    private static double[] readDoubles(DataInputView source) throws IOException {
        int length = readLength(source);
        if (length < 0) {
            return null;
        }
        double[] values = new double[length];
        for (int i = 0; i < length; i++) {
            values[i] = source.readDouble();
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
