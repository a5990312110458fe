package dev.stoker.operators.model;

/** A parsed and validated SFT conversation, normalised from any record format. */
public class SftRecord {
    /** Provenance, with {@link RecordRef#recordId} filled in when the record has an id. */
    public RecordRef ref;

    /** Turns in order. */
    public ChatMessage[] messages;

    /** Images in the order their parts occur; {@link ContentPart#imageIndex} points into this. */
    public ImageRef[] images;

    /** Videos in the order their parts occur; {@link ContentPart#videoIndex} points into this. */
    public VideoRef[] videos = new VideoRef[0];

    public SftRecord() {}

    public SftRecord(RecordRef ref, ChatMessage[] messages, ImageRef[] images) {
        this.ref = ref;
        this.messages = messages;
        this.images = images;
    }
}
