package dev.stoker.operators.parse;

import com.fasterxml.jackson.databind.JsonNode;
import dev.stoker.operators.model.ChatMessage;
import dev.stoker.operators.model.ImageRef;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Reads the three supported record layouts into a {@link ConversationBuilder}.
 *
 * <ul>
 *   <li>LLaVA: {@code image} (string or array) or {@code images} (array) and {@code conversations}
 *       of {@code {from, value}} with {@code <image>} placeholders;
 *   <li>messages (OpenAI/Qwen): {@code messages} of {@code {role, content}} where content is a list
 *       of {@code {type: text|image|image_url}} parts (text is literal; {@code <image>} in it is
 *       not a placeholder);
 *   <li>LLaMA-Factory/ShareGPT: {@code messages} whose content is a string with {@code <image>}
 *       placeholders, plus a top-level {@code images} array.
 * </ul>
 */
final class RecordFormats {
    private static final Map<String, String> ROLES =
            Map.of(
                    "system", ChatMessage.SYSTEM,
                    "human", ChatMessage.USER,
                    "user", ChatMessage.USER,
                    "gpt", ChatMessage.ASSISTANT,
                    "assistant", ChatMessage.ASSISTANT);

    private RecordFormats() {}

    /** Reads a LLaVA record. */
    static ConversationBuilder readLlava(JsonNode root) throws RejectedRecordException {
        if (root.has("image") && root.has("images")) {
            throw invalid("record has both 'image' and 'images'");
        }
        String field = root.has("image") ? "image" : "images";
        ConversationBuilder builder = new ConversationBuilder(topLevelImages(root, field));
        JsonNode turns = requireArray(root, "conversations");
        for (int i = 0; i < turns.size(); i++) {
            String where = "conversations[" + i + "] (turn " + (i + 1) + ")";
            JsonNode turn = requireObject(turns.get(i), where);
            builder.beginTurn(role(turn, "from", where));
            builder.addTextWithPlaceholders(requireText(turn, "value", where));
        }
        return builder;
    }

    /** Reads a messages-style or LLaMA-Factory/ShareGPT record. */
    static ConversationBuilder readMessages(JsonNode root) throws RejectedRecordException {
        ConversationBuilder builder = new ConversationBuilder(topLevelImages(root, "images"));
        JsonNode turns = requireArray(root, "messages");
        for (int i = 0; i < turns.size(); i++) {
            String where = "messages[" + i + "] (turn " + (i + 1) + ")";
            JsonNode turn = requireObject(turns.get(i), where);
            builder.beginTurn(role(turn, "role", where));
            JsonNode content = turn.get("content");
            if (content == null || content.isNull()) {
                throw invalid(where + ": 'content' is " + (content == null ? "missing" : "null"));
            } else if (content.isTextual()) {
                builder.addTextWithPlaceholders(content.textValue());
            } else if (content.isArray()) {
                for (int p = 0; p < content.size(); p++) {
                    ContentParts.add(
                            builder,
                            requireObject(content.get(p), where + " content[" + p + "]"),
                            where + " content[" + p + "]");
                }
            } else {
                throw invalid(where + ": 'content' must be a string or a list of parts");
            }
        }
        return builder;
    }

    private static List<ImageRef> topLevelImages(JsonNode root, String field)
            throws RejectedRecordException {
        JsonNode node = root.get(field);
        List<ImageRef> images = new ArrayList<>();
        if (node == null || node.isNull()) {
            return images;
        }
        if (node.isTextual()) {
            images.add(
                    new ImageRef(
                            ImagePaths.requireSafe(node.textValue(), "'" + field + "'"), 0, 0));
        } else if (node.isArray()) {
            for (int i = 0; i < node.size(); i++) {
                String where = "'" + field + "'[" + i + "]";
                if (!node.get(i).isTextual()) {
                    throw invalid(where + " must be a string path");
                }
                images.add(
                        new ImageRef(ImagePaths.requireSafe(node.get(i).textValue(), where), 0, 0));
            }
        } else {
            throw invalid("'" + field + "' must be a string or an array of string paths");
        }
        return images;
    }

    private static String role(JsonNode turn, String field, String where)
            throws RejectedRecordException {
        String raw = requireText(turn, field, where);
        String role = ROLES.get(raw);
        if (role == null) {
            throw invalid(where + ": unknown role '" + raw + "' in '" + field + "'");
        }
        return role;
    }

    static JsonNode requireArray(JsonNode node, String field) throws RejectedRecordException {
        JsonNode value = node.get(field);
        if (value == null || value.isNull()) {
            throw invalid("'" + field + "' is " + (value == null ? "missing" : "null"));
        }
        if (!value.isArray()) {
            throw invalid("'" + field + "' must be an array");
        }
        return value;
    }

    static JsonNode requireObject(JsonNode node, String where) throws RejectedRecordException {
        if (!node.isObject()) {
            throw invalid(where + " must be a JSON object");
        }
        return node;
    }

    static String requireText(JsonNode node, String field, String where)
            throws RejectedRecordException {
        JsonNode value = node.get(field);
        if (value == null || value.isNull()) {
            throw invalid(where + ": '" + field + "' is " + (value == null ? "missing" : "null"));
        }
        if (!value.isTextual()) {
            throw invalid(where + ": '" + field + "' must be a string");
        }
        return value.textValue();
    }

    static RejectedRecordException invalid(String message) {
        return new RejectedRecordException(RejectReason.INVALID_RECORD, message);
    }
}
