package dev.stoker.operators.model;

/**
 * One part of a chat message's content, in the order it occurs: text, an image or a video.
 *
 * <p>Every record format (LLaVA {@code <image>}/{@code <video>} placeholders and messages-style
 * content lists) is normalised into this form by the parser.
 */
public class ContentPart {
    /** {@code "text"}, {@code "image"} or {@code "video"}. */
    public String type;

    /** The text, for a text part; {@code null} for an image or video part. */
    public String text;

    /**
     * For an image part: the index into {@link SftRecord#images} (and, later, into the record's
     * fetched images). {@code -1} for other parts.
     */
    public int imageIndex = -1;

    /**
     * For a video part: the index into {@link SftRecord#videos} (and, later, into the record's
     * fetched and preprocessed videos). {@code -1} for other parts.
     */
    public int videoIndex = -1;

    public ContentPart() {}

    /** A text part. */
    public static ContentPart text(String text) {
        ContentPart p = new ContentPart();
        p.type = "text";
        p.text = text;
        return p;
    }

    /** An image part referring to {@code SftRecord.images[imageIndex]}. */
    public static ContentPart image(int imageIndex) {
        ContentPart p = new ContentPart();
        p.type = "image";
        p.imageIndex = imageIndex;
        return p;
    }

    /** A video part referring to {@code SftRecord.videos[videoIndex]}. */
    public static ContentPart video(int videoIndex) {
        ContentPart p = new ContentPart();
        p.type = "video";
        p.videoIndex = videoIndex;
        return p;
    }

    public boolean isImage() {
        return "image".equals(type);
    }

    public boolean isVideo() {
        return "video".equals(type);
    }
}
