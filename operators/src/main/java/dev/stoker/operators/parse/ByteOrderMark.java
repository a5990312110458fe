package dev.stoker.operators.parse;

/**
 * The Unicode byte order marks a text file can start with, and so its encoding: the one rule the
 * source (how a JSONL file is cut into records) and the parser (how a record is rejected) share.
 *
 * <p>Only UTF-8 JSONL is read. A UTF-8 BOM ({@code EF BB BF}) at the start of a file is skipped, as
 * the JSON loader of Hugging Face {@code datasets} does, and so is one at the start of a line
 * inside a file (concatenated files; the source's line reader skips both); a file that starts with
 * a UTF-16 or UTF-32 BOM is one record, rejected as a whole ({@link
 * dev.stoker.operators.model.RejectReason#UNSUPPORTED_ENCODING}). Files without a BOM are taken as
 * UTF-8 (a BOM-less UTF-16 file fails as invalid UTF-8 or malformed JSON, line by line).
 */
public enum ByteOrderMark {
    /** {@code EF BB BF}. */
    UTF_8("UTF-8", 0xEF, 0xBB, 0xBF),
    /** {@code 00 00 FE FF}. */
    UTF_32BE("UTF-32BE", 0x00, 0x00, 0xFE, 0xFF),
    /** {@code FF FE 00 00}; checked before {@link #UTF_16LE}, whose mark is its prefix. */
    UTF_32LE("UTF-32LE", 0xFF, 0xFE, 0x00, 0x00),
    /** {@code FE FF}. */
    UTF_16BE("UTF-16BE", 0xFE, 0xFF),
    /** {@code FF FE}. */
    UTF_16LE("UTF-16LE", 0xFF, 0xFE);

    /** The longest mark, in bytes: what {@link #detect} needs to look at. */
    public static final int MAX_LENGTH = 4;

    private final String encoding;
    private final byte[] mark;

    ByteOrderMark(String encoding, int... mark) {
        this.encoding = encoding;
        this.mark = new byte[mark.length];
        for (int i = 0; i < mark.length; i++) {
            this.mark[i] = (byte) mark[i];
        }
    }

    /**
     * The mark {@code bytes} start with, or {@code null} for none. Marks are tried longest first,
     * so {@code FF FE 00 00} is UTF-32LE, not UTF-16LE.
     *
     * @param bytes the first bytes of a file or line; fewer than {@link #MAX_LENGTH} is fine
     */
    public static ByteOrderMark detect(byte[] bytes) {
        for (ByteOrderMark bom : values()) {
            if (bom.isPrefixOf(bytes)) {
                return bom;
            }
        }
        return null;
    }

    private boolean isPrefixOf(byte[] bytes) {
        if (bytes.length < mark.length) {
            return false;
        }
        for (int i = 0; i < mark.length; i++) {
            if (bytes[i] != mark[i]) {
                return false;
            }
        }
        return true;
    }

    /** The encoding's name, as Java and Python spell it: {@code UTF-16LE}. */
    public String encoding() {
        return encoding;
    }

    /** Length of the mark in bytes (2, 3 or 4). */
    public int length() {
        return mark.length;
    }

    /** Whether the mark is UTF-8's, the only encoding Stoker reads (its mark is skipped). */
    public boolean isUtf8() {
        return this == UTF_8;
    }

    /** The mark as hex bytes: {@code FF FE 00 00}. */
    public String hex() {
        StringBuilder sb = new StringBuilder();
        for (byte b : mark) {
            if (sb.length() > 0) {
                sb.append(' ');
            }
            sb.append(String.format("%02X", b & 0xFF));
        }
        return sb.toString();
    }
}
