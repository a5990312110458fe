package dev.stoker.operators.model;

/** A record whose images are preprocessed (same order as {@link SftRecord#images}). */
public class PreprocessedRecord {
    public SftRecord record;
    public PreprocessedImage[] images;

    public PreprocessedRecord() {}

    public PreprocessedRecord(SftRecord record, PreprocessedImage[] images) {
        this.record = record;
        this.images = images;
    }
}
