package dev.stoker.operators.parse;

import com.fasterxml.jackson.databind.JsonNode;
import dev.stoker.operators.model.ChatMessage;
import dev.stoker.operators.model.ImageRef;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.VideoRef;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Reads the three supported record layouts into a {@link ConversationBuilder}.
 *
 * <ul>
 *   <li>LLaVA: {@code image} (string or array) or {@code images} (array), {@code video} (string or
 *       array) or {@code videos} (array), and {@code conversations} of {@code {from, value}} with
 *       {@code <image>} and {@code <video>} placeholders; in a record with videos and no image
 *       whose text has no {@code <video>}, each {@code <image>} stands for the next video (the
 *       LLaVA-NeXT / LLaVA-Video-178K convention);
 *   <li>messages (OpenAI/Qwen): {@code messages} of {@code {role, content}} where content is a list
 *       of {@code {type: text|image|image_url|video}} parts (text is literal; {@code <image>} in it
 *       is not a placeholder);
 *   <li>LLaMA-Factory/ShareGPT: {@code messages} whose content is a string with {@code <image>} and
 *       {@code <video>} placeholders, plus top-level {@code images} and {@code videos} arrays.
 * </ul>
 *
 * <p>A video given as a list of frame images (an array of paths where a video path is expected: an
 * entry of {@code videos} / {@code video}, or a video part's {@code video}) is read as one video
 * whose frames are those images in order ({@link VideoRef#ofFrames}), as transformers 5.23.0's
 * {@code apply_chat_template} and qwen-vl-utils accept it; each frame path is checked as an image
 * path ({@link ImagePaths#requireSafe}). An empty list or an entry that is not a string is refused
 * ({@link RejectReason#INVALID_RECORD}) naming its place in the record ({@link #frames}).
 *
 * <p>A source's {@link RecordFormat} says which: {@link RecordFormat#AUTO} reads a record with
 * {@code messages} as messages or ShareGPT (turn by turn: list content as parts, string content
 * with placeholders) and any other as LLaVA; a fixed format rejects a record in another layout.
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

    /**
     * Reads a record in {@code format}.
     *
     * @throws RejectedRecordException {@link RejectReason#INVALID_RECORD} naming {@code format} and
     *     what the record has instead when it is not in {@code format}, or naming the field when
     *     the record is not valid in its layout (also {@link RejectReason#UNSAFE_PATH} for an image
     *     path that leaves the image root)
     */
    static ConversationBuilder read(JsonNode root, RecordFormat format)
            throws RejectedRecordException {
        if (root.has("conversations") && root.has("messages")) {
            throw invalid("record has both 'conversations' and 'messages'");
        }
        return switch (format) {
            case AUTO -> root.has("messages") ? readMessages(root, format) : readLlava(root);
            case LLAVA -> {
                if (!root.has("conversations")) {
                    throw notIn(format, whatItHas(root));
                }
                yield readLlava(root);
            }
            case MESSAGES, SHAREGPT -> {
                if (!root.has("messages")) {
                    throw notIn(format, whatItHas(root));
                }
                if (format == RecordFormat.MESSAGES) {
                    refuseTopLevel(root, "images", "<image>", format);
                    refuseTopLevel(root, "videos", "<video>", format);
                }
                yield readMessages(root, format);
            }
        };
    }

    /**
     * A messages record gives images and videos as content parts: a non-empty top-level list for
     * placeholders is the ShareGPT layout.
     */
    private static void refuseTopLevel(
            JsonNode root, String field, String placeholder, RecordFormat format)
            throws RejectedRecordException {
        JsonNode list = root.get(field);
        if (list != null && !list.isNull() && !(list.isArray() && list.isEmpty())) {
            throw notIn(
                    format,
                    "it has a top-level '"
                            + field
                            + "' for "
                            + placeholder
                            + " placeholders (the "
                            + RecordFormat.SHAREGPT.key()
                            + " format); messages give "
                            + field
                            + " as content parts");
        }
    }

    /** Reads a LLaVA record. */
    private static ConversationBuilder readLlava(JsonNode root) throws RejectedRecordException {
        if (root.has("image") && root.has("images")) {
            throw invalid("record has both 'image' and 'images'");
        }
        if (root.has("video") && root.has("videos")) {
            throw invalid("record has both 'video' and 'videos'");
        }
        List<ImageRef> images = topLevelImages(root, root.has("image") ? "image" : "images");
        List<VideoRef> videos = topLevelVideos(root, root.has("video") ? "video" : "videos");
        JsonNode turns = requireArray(root, "conversations");
        ConversationBuilder builder =
                new ConversationBuilder(
                        images,
                        videos,
                        images.isEmpty() && !videos.isEmpty() && !hasVideoPlaceholder(turns));
        for (int i = 0; i < turns.size(); i++) {
            String where = "conversations[" + i + "] (turn " + (i + 1) + ")";
            JsonNode turn = requireObject(turns.get(i), where);
            builder.beginTurn(role(turn, "from", where));
            builder.addTextWithPlaceholders(requireText(turn, "value", where));
        }
        return builder;
    }

    /**
     * Reads a messages-style or LLaMA-Factory/ShareGPT record; with {@code format} {@link
     * RecordFormat#SHAREGPT}, only string content.
     */
    private static ConversationBuilder readMessages(JsonNode root, RecordFormat format)
            throws RejectedRecordException {
        ConversationBuilder builder =
                new ConversationBuilder(
                        topLevelImages(root, "images"), topLevelVideos(root, "videos"), false);
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
                if (format == RecordFormat.SHAREGPT) {
                    throw notIn(
                            format,
                            where
                                    + ": 'content' is a list of parts (the "
                                    + RecordFormat.MESSAGES.key()
                                    + " format); ShareGPT content is a string with <image>"
                                    + " placeholders");
                }
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

    /** What names a record's layout, for a record not in its source's format. */
    private static String whatItHas(JsonNode root) {
        if (root.has("conversations")) {
            return "it has 'conversations', not 'messages' (the "
                    + RecordFormat.LLAVA.key()
                    + " format)";
        }
        if (root.has("messages")) {
            return "it has 'messages', not 'conversations' (the "
                    + RecordFormat.MESSAGES.key()
                    + " or "
                    + RecordFormat.SHAREGPT.key()
                    + " format)";
        }
        return "it has neither 'conversations' nor 'messages'";
    }

    private static RejectedRecordException notIn(RecordFormat format, String found) {
        return invalid("not a " + format.key() + " record (the format of its source): " + found);
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

    /**
     * A top-level video list: a string or an array whose entries are video paths or, an array in
     * place of a path, a video given as frame images ({@link #frames}).
     */
    private static List<VideoRef> topLevelVideos(JsonNode root, String field)
            throws RejectedRecordException {
        JsonNode node = root.get(field);
        List<VideoRef> videos = new ArrayList<>();
        if (node == null || node.isNull()) {
            return videos;
        }
        if (node.isTextual()) {
            videos.add(
                    new VideoRef(
                            ImagePaths.requireSafeVideo(node.textValue(), "'" + field + "'"),
                            0,
                            0,
                            0));
        } else if (node.isArray()) {
            for (int i = 0; i < node.size(); i++) {
                String where = "'" + field + "'[" + i + "]";
                JsonNode entry = node.get(i);
                if (entry.isArray()) {
                    videos.add(VideoRef.ofFrames(frames(entry, where), 0, 0, 0));
                    continue;
                }
                if (!entry.isTextual()) {
                    throw invalid(where + " must be a string path");
                }
                videos.add(
                        new VideoRef(
                                ImagePaths.requireSafeVideo(entry.textValue(), where), 0, 0, 0));
            }
        } else {
            throw invalid("'" + field + "' must be a string or an array of string paths");
        }
        return videos;
    }

    /**
     * The frame paths of a video given as a list of frame images, in order; {@code where} names the
     * list's place in the record (e.g. {@code 'videos'[1]}).
     *
     * @throws RejectedRecordException {@link RejectReason#INVALID_RECORD} for an empty list or an
     *     entry that is not a string ({@code 'videos'[1][3] must be a string path to a frame
     *     image}), and what {@link ImagePaths#requireSafe} throws for a frame path
     */
    static String[] frames(JsonNode list, String where) throws RejectedRecordException {
        if (list.isEmpty()) {
            throw invalid(where + ": a video given as a list of frame images has no frames");
        }
        String[] frames = new String[list.size()];
        for (int f = 0; f < frames.length; f++) {
            String at = where + "[" + f + "]";
            JsonNode entry = list.get(f);
            if (!entry.isTextual()) {
                throw invalid(
                        at
                                + " must be a string path to a frame image (the video is given as"
                                + " a list of frame images), got "
                                + (entry.isNull()
                                        ? "null"
                                        : entry.getNodeType()
                                                .name()
                                                .toLowerCase(java.util.Locale.ROOT)));
            }
            frames[f] = ImagePaths.requireSafe(entry.textValue(), at);
        }
        return frames;
    }

    /** Whether any turn's text has a {@code <video>} placeholder. */
    private static boolean hasVideoPlaceholder(JsonNode turns) {
        for (JsonNode turn : turns) {
            JsonNode value = turn.get("value");
            if (value != null
                    && value.isTextual()
                    && value.textValue().contains(ConversationBuilder.VIDEO_PLACEHOLDER)) {
                return true;
            }
        }
        return false;
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
