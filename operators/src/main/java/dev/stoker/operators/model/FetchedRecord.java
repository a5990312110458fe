package dev.stoker.operators.model;

/**
 * A record together with the encoded bytes of each of its images (same order as {@link
 * SftRecord#images}).
 */
public class FetchedRecord {
    public SftRecord record;

    /** Encoded image files (JPEG, PNG, ...), one per {@link SftRecord#images} entry. */
    public byte[][] imageBytes;

    /** Encoded video files (MP4, MOV, ...), one per {@link SftRecord#videos} entry. */
    public byte[][] videoBytes = new byte[0][];

    public FetchedRecord() {}

    public FetchedRecord(SftRecord record, byte[][] imageBytes) {
        this.record = record;
        this.imageBytes = imageBytes;
    }
}
