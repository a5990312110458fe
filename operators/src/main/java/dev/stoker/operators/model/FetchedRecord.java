package dev.stoker.operators.model;

/**
 * A record together with the encoded bytes of each of its images (same order as {@link
 * SftRecord#images}) and of each of its videos, a video either in memory ({@link #videoBytes}) or,
 * when it is large, in a local spill file ({@link #videoFiles}).
 */
public class FetchedRecord {
    public SftRecord record;

    /** Encoded image files (JPEG, PNG, ...), one per {@link SftRecord#images} entry. */
    public byte[][] imageBytes;

    /**
     * Encoded video files (MP4, MOV, ...), one per {@link SftRecord#videos} entry; an entry is null
     * where the video is in {@link #videoFiles} instead.
     */
    public byte[][] videoBytes = new byte[0][];

    /**
     * Spill files: empty when every video is in {@link #videoBytes}, else one entry per {@link
     * SftRecord#videos} entry, the absolute path of the local file that holds the video where its
     * {@link #videoBytes} entry is null, null where that entry holds it. A spill file belongs to
     * the record: the media stage deletes it once the video is decoded, or the record
     * dead-lettered. The path is local to the TaskManager that fetched the video (the fetch and
     * media operators are chained, so the record stays there).
     */
    public String[] videoFiles = new String[0];

    public FetchedRecord() {}

    public FetchedRecord(SftRecord record, byte[][] imageBytes) {
        this.record = record;
        this.imageBytes = imageBytes;
    }

    /** The spill file of video {@code index} (0-based), or null when it is in memory. */
    public String videoFile(int index) {
        return index < videoFiles.length ? videoFiles[index] : null;
    }
}
