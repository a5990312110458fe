package dev.stoker.operators.model;

/**
 * One non-blank line of a JSONL file as read by the source, before decoding or parsing.
 *
 * <p>The bytes are kept raw (not decoded) so that invalid UTF-8 is reported by the parser instead
 * of being silently replaced with U+FFFD. A trailing {@code \r} (CRLF files) is already stripped.
 */
public class JsonlLine {
    /** Provenance; {@link RecordRef#recordId} is {@code null} at this stage. */
    public RecordRef ref;

    /** The line's bytes without the line terminator; at most the configured maximum line length. */
    public byte[] bytes;

    /** Length in bytes of the original line; larger than {@code bytes.length} if it was cut. */
    public long originalLength;

    /**
     * {@code true} for a padding marker: a slot past the end of the epoch that holds no record
     * ({@link #ref} has only the slot index; no bytes). The pipeline turns it into an empty slot.
     */
    public boolean padding;

    public JsonlLine() {}

    /** The padding marker of slot {@code slotIndex}. */
    public static JsonlLine padding(long slotIndex) {
        JsonlLine marker = new JsonlLine(new RecordRef(null, 0, slotIndex, null), new byte[0], 0);
        marker.padding = true;
        return marker;
    }

    public JsonlLine(RecordRef ref, byte[] bytes, long originalLength) {
        this.ref = ref;
        this.bytes = bytes;
        this.originalLength = originalLength;
    }

    /** Whether the line exceeded the maximum line length and was cut by the source. */
    public boolean isTruncated() {
        return originalLength > bytes.length;
    }
}
