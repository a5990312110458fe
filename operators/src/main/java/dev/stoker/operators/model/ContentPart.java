package dev.stoker.operators.model;

/**
 * One part of a chat message's content, in the order it occurs: either text or an image.
 *
 * <p>Both record formats (LLaVA {@code <image>} placeholders and messages-style content lists) are
 * normalised into this form by the parser.
 */
public class ContentPart {
    /** Either {@code "text"} or {@code "image"}. */
    public String type;

    /** The text, for a text part; {@code null} for an image part. */
    public String text;

    /**
     * For an image part: the index into {@link SftRecord#imagePaths} (and, later, into the record's
     * fetched images). {@code -1} for text parts.
     */
    public int imageIndex = -1;

    public ContentPart() {}

    /** A text part. */
    public static ContentPart text(String text) {
        ContentPart p = new ContentPart();
        p.type = "text";
        p.text = text;
        return p;
    }

    /** An image part referring to {@code SftRecord.imagePaths[imageIndex]}. */
    public static ContentPart image(int imageIndex) {
        ContentPart p = new ContentPart();
        p.type = "image";
        p.imageIndex = imageIndex;
        return p;
    }

    public boolean isImage() {
        return "image".equals(type);
    }
}
