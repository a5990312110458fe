package dev.stoker.connectors.fetch;

import dev.stoker.operators.model.RejectReason;

/**
 * What an object fetched for a record is: an image or a video. Both are read the same way (same
 * root, same path rules, same client); they differ in their size limit and in the reasons and words
 * of their dead letters.
 */
public enum Media {
    IMAGE("image", RejectReason.IMAGE_NOT_FOUND, RejectReason.IMAGE_TOO_LARGE),
    VIDEO("video", RejectReason.VIDEO_NOT_FOUND, RejectReason.VIDEO_FILE_TOO_LARGE);

    private final String word;
    private final RejectReason notFound;
    private final RejectReason tooLarge;

    Media(String word, RejectReason notFound, RejectReason tooLarge) {
        this.word = word;
        this.notFound = notFound;
        this.tooLarge = tooLarge;
    }

    /** {@code "image"} or {@code "video"}, for messages. */
    public String word() {
        return word;
    }

    /** The reason of an object that is not there. */
    public RejectReason notFound() {
        return notFound;
    }

    /** The reason of an object over its size limit. */
    public RejectReason tooLarge() {
        return tooLarge;
    }
}
