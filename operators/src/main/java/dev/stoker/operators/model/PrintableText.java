package dev.stoker.operators.model;

/**
 * Text from the data, made safe for a log line or a console: the Java twin of the Python tools'
 * {@code stoker.printable} (same notation), used where the job logs record text (dead letters).
 *
 * <p>Escaped, as in a Python string literal (lower-case hex): C0 and C1 control characters and DEL
 * (<code>&#92;x00</code>, <code>&#92;x1b</code>, <code>&#92;x7f</code>, <code>&#92;x9b</code>; tab,
 * line feed and carriage return as <code>&#92;t</code>, <code>&#92;n</code>, <code>&#92;r</code>),
 * lone surrogates (<code>&#92;ud800</code>), format characters such as the bidi embeddings,
 * overrides and isolates U+202A-U+202E and U+2066-U+2069 (<code>&#92;u202e</code>) and zero-width
 * characters, line and paragraph separators, spaces other than U+0020, private-use and unassigned
 * code points: <code>&#92;xNN</code> up to U+00FF, <code>&#92;uNNNN</code> up to U+FFFF, <code>
 * &#92;UNNNNNNNN</code> above; and the backslash itself as <code>&#92;&#92;</code>, so every
 * backslash in the result starts an escape and the original text can be read back. Letters of any
 * script, symbols and emoji (valid surrogate pairs) are kept. The result never moves the cursor,
 * changes a terminal's state, reorders the line or breaks it. Which code points are unassigned
 * follows the runtime's Unicode version (Java 17: Unicode 13; Python 3.11: 14), so a character
 * added since is escaped here and kept by Python. The cases both check are in {@code
 * schema/printable-cases.json}.
 */
public final class PrintableText {
    private PrintableText() {}

    /**
     * @param text any text, {@code null} included
     * @return {@code text} with every code point a terminal could not show as itself escaped
     *     ({@code "null"} for {@code null})
     */
    public static String escape(String text) {
        if (text == null) {
            return "null";
        }
        int first = 0;
        while (first < text.length()) {
            int cp = text.codePointAt(first);
            if (!shownAsItself(cp)) {
                break;
            }
            first += Character.charCount(cp);
        }
        if (first == text.length()) {
            return text;
        }
        StringBuilder out = new StringBuilder(text.length() + 16).append(text, 0, first);
        for (int i = first; i < text.length(); ) {
            int cp = text.codePointAt(i);
            i += Character.charCount(cp);
            if (shownAsItself(cp)) {
                out.appendCodePoint(cp);
            } else if (cp == '\\') {
                out.append("\\\\");
            } else if (cp == '\t') {
                out.append("\\t");
            } else if (cp == '\n') {
                out.append("\\n");
            } else if (cp == '\r') {
                out.append("\\r");
            } else if (cp <= 0xFF) {
                out.append(String.format("\\x%02x", cp));
            } else if (cp <= 0xFFFF) {
                out.append(String.format("\\u%04x", cp));
            } else {
                out.append(String.format("\\U%08x", cp));
            }
        }
        return out.toString();
    }

    private static boolean shownAsItself(int cp) {
        if (cp == '\\') {
            return false;
        }
        if (cp == ' ') {
            return true;
        }
        switch (Character.getType(cp)) {
            case Character.CONTROL:
            case Character.FORMAT:
            case Character.SURROGATE:
            case Character.PRIVATE_USE:
            case Character.UNASSIGNED:
            case Character.LINE_SEPARATOR:
            case Character.PARAGRAPH_SEPARATOR:
            case Character.SPACE_SEPARATOR:
                return false;
            default:
                return true;
        }
    }
}
