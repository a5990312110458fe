package dev.stoker.operators.parse;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import dev.stoker.operators.json.Json;
import java.io.IOException;

/**
 * Best-effort record id of a line that cannot be parsed as a whole (cut at the maximum line length,
 * invalid UTF-8 or malformed JSON further on): streams the line's tokens up to the first defect and
 * returns the value of a top-level {@code "id"} string or number met before it, so that the dead
 * letter still names the record. Never throws.
 */
final class LeadingId {
    private static final JsonFactory JSON = Json.factory();

    /** Ids longer than this are not ids; stop instead of buffering a huge string. */
    private static final int MAX_ID_CHARS = 1024;

    private LeadingId() {}

    /** The top-level id before the first defect of {@code bytes}, or {@code null}. */
    static String read(byte[] bytes) {
        try (JsonParser p = JSON.createParser(bytes)) {
            if (p.nextToken() != JsonToken.START_OBJECT) {
                return null;
            }
            JsonToken t;
            while ((t = p.nextToken()) == JsonToken.FIELD_NAME) {
                boolean isId = "id".equals(p.currentName());
                t = p.nextToken();
                if (isId && (t == JsonToken.VALUE_STRING || t == JsonToken.VALUE_NUMBER_INT)) {
                    String id = p.getText();
                    return id.length() <= MAX_ID_CHARS && isScalars(id) ? id : null;
                }
                if (isId) {
                    return null;
                }
                p.skipChildren();
            }
            return null;
        } catch (IOException | RuntimeException e) {
            return null;
        }
    }

    private static boolean isScalars(String s) {
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (Character.isHighSurrogate(c)
                    && i + 1 < s.length()
                    && Character.isLowSurrogate(s.charAt(i + 1))) {
                i++;
            } else if (Character.isSurrogate(c)) {
                return false;
            }
        }
        return true;
    }
}
