package dev.stoker.operators.parse;

import com.fasterxml.jackson.databind.JsonNode;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import java.util.Iterator;
import java.util.Map;

/**
 * Rejects strings that are not sequences of Unicode scalar values. Strict UTF-8 decoding already
 * excludes encoded surrogates, but JSON escapes such as {@code \ud800} can still produce an
 * unpaired surrogate, which cannot be encoded to UTF-8 and would reach the tokenizer as garbage.
 */
final class UnicodeScalars {
    private UnicodeScalars() {}

    /**
     * Checks every string value and field name under {@code node}.
     *
     * @throws RejectedRecordException {@link RejectReason#INVALID_RECORD} naming the JSON path
     */
    static void check(JsonNode node) throws RejectedRecordException {
        check(node, "$");
    }

    private static void check(JsonNode node, String path) throws RejectedRecordException {
        if (node.isTextual()) {
            requireScalars(node.textValue(), path);
        } else if (node.isArray()) {
            for (int i = 0; i < node.size(); i++) {
                check(node.get(i), path + "[" + i + "]");
            }
        } else if (node.isObject()) {
            Iterator<Map.Entry<String, JsonNode>> fields = node.fields();
            while (fields.hasNext()) {
                Map.Entry<String, JsonNode> field = fields.next();
                String fieldPath = path + "." + field.getKey();
                requireScalars(field.getKey(), fieldPath + " (field name)");
                check(field.getValue(), fieldPath);
            }
        }
    }

    private static void requireScalars(String s, String path) throws RejectedRecordException {
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (Character.isHighSurrogate(c)
                    && i + 1 < s.length()
                    && Character.isLowSurrogate(s.charAt(i + 1))) {
                i++;
            } else if (Character.isSurrogate(c)) {
                throw new RejectedRecordException(
                        RejectReason.INVALID_RECORD,
                        String.format(
                                "invalid Unicode scalar: lone surrogate \\u%04x at char %d of %s",
                                (int) c, i, path));
            }
        }
    }
}
