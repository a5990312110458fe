package dev.stoker.operators.model;

/**
 * A record together with the encoded bytes of each of its images (same order as {@link
 * SftRecord#images}) and of each of its videos: a video file either in memory ({@link #videoBytes})
 * or, when it is large, in a local spill file ({@link #videoFiles}), a video given as frame images
 * as its frames' files ({@link #videoFrames}).
 */
public class FetchedRecord {
    public SftRecord record;

    /** Encoded image files (JPEG, PNG, ...), one per {@link SftRecord#images} entry. */
    public byte[][] imageBytes;

    /**
     * Encoded video files (MP4, MOV, ...), one per {@link SftRecord#videos} entry; an entry is null
     * where the video is in {@link #videoFiles} instead, or given as frames ({@link
     * VideoRef#givenAsFrames()}).
     */
    public byte[][] videoBytes = new byte[0][];

    /**
     * Encoded frame images, one array per {@link SftRecord#videos} entry: for a video given as
     * frames its frames' files in order (one per {@link VideoRef#frames} entry), {@code null} at a
     * video file. Empty when the record has no video given as frames.
     */
    public byte[][][] videoFrames = new byte[0][][];

    /**
     * Spill files: empty when every video file is in {@link #videoBytes}, else one entry per {@link
     * SftRecord#videos} entry, the absolute path of the local file that holds the video where its
     * {@link #videoBytes} entry is null, null where that entry holds it (or the video is given as
     * frames). A spill file belongs to the record: the media stage deletes it once the video is
     * decoded, or the record dead-lettered. The path is local to the TaskManager that fetched the
     * video (the fetch and media operators are chained, so the record stays there).
     */
    public String[] videoFiles = new String[0];

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

    /** The spill file of video {@code index} (0-based), or null when it is in memory. */
    public String videoFile(int index) {
        return index < videoFiles.length ? videoFiles[index] : null;
    }
}
