package dev.stoker.operators.model;

/**
 * A record together with the encoded bytes of each of its images (same order as {@link
 * SftRecord#images}) and videos.
 */
public class FetchedRecord {
    public SftRecord record;

    /** Encoded image files (JPEG, PNG, ...), one per {@link SftRecord#images} entry. */
    public byte[][] imageBytes;

    /**
     * Encoded video files (MP4, MOV, ...), one per {@link SftRecord#videos} entry; {@code null} at
     * a video given as frames ({@link VideoRef#givenAsFrames()}).
     */
    public byte[][] videoBytes = new byte[0][];

    /**
     * Encoded frame images, one array per {@link SftRecord#videos} entry: for a video given as
     * frames its frames' files in order (one per {@link VideoRef#frames} entry), {@code null} at a
     * video file. Empty when the record has no video given as frames.
     */
    public byte[][][] videoFrames = new byte[0][][];

    public FetchedRecord() {}

    public FetchedRecord(SftRecord record, byte[][] imageBytes) {
        this.record = record;
        this.imageBytes = imageBytes;
    }

    /**
     * The frames' files of video {@code index}, or {@code null} when it is a video file (or none of
     * the record's videos is given as frames).
     */
    public byte[][] framesOf(int index) {
        return videoFrames != null && index < videoFrames.length ? videoFrames[index] : null;
    }
}
