package dev.stoker.operators.model;

/**
 * A record whose images and videos are preprocessed (same order as {@link SftRecord#images} and
 * {@link SftRecord#videos}).
 */
public class PreprocessedRecord {
    public SftRecord record;
    public PreprocessedImage[] images;

    /** One per {@link SftRecord#videos} entry. */
    public SampledVideo[] videos = new SampledVideo[0];

    public PreprocessedRecord() {}

    public PreprocessedRecord(SftRecord record, PreprocessedImage[] images) {
        this.record = record;
        this.images = images;
    }
}
