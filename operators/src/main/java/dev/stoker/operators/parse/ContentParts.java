package dev.stoker.operators.parse;

import com.fasterxml.jackson.databind.JsonNode;
import dev.stoker.operators.model.ImageRef;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.VideoRef;
import java.util.List;

/**
 * Reads one messages-style content part: {@code {type: text, text}}, {@code {type: image, image:
 * path, min_pixels?, max_pixels?}}, {@code {type: image_url, image_url: {url}}} or {@code {type:
 * video, video: path or [frame paths], fps?, min_pixels?, max_pixels?}} (as qwen-vl-utils 0.0.14's
 * {@code fetch_video} and the Qwen2-VL chat template accept them; a part without {@code type} is
 * recognised by its key). A video part's {@code min_pixels}/{@code max_pixels} bound each frame. A
 * video given as a list of frame images ({@link RecordFormats#frames}) uses every frame, in order;
 * its {@code sample_fps} (qwen-vl-utils 0.0.14's key for a frame list) or {@code fps} (the rate
 * transformers takes from {@code video_metadata}) is the rate the frames were taken at; both, with
 * two values, are refused. A video file's {@code sample_fps} is ignored, as qwen-vl-utils ignores
 * it.
 *
 * <p>Refused with a reason ({@link RejectReason#INVALID_RECORD}) rather than ignored, since they
 * change which frames or pixels the model sees: the other qwen-vl-utils video keys ({@link
 * #UNSUPPORTED_VIDEO_KEYS}).
 */
final class ContentParts {
    /** qwen-vl-utils video-part keys not read yet. */
    static final List<String> UNSUPPORTED_VIDEO_KEYS =
            List.of(
                    "nframes",
                    "min_frames",
                    "max_frames",
                    "total_pixels",
                    "video_start",
                    "video_end",
                    "resized_height",
                    "resized_width");

    private ContentParts() {}

    static void add(ConversationBuilder builder, JsonNode part, String where)
            throws RejectedRecordException {
        switch (typeOf(part, where)) {
            case "text" -> builder.addText(RecordFormats.requireText(part, "text", where));
            case "image" -> builder.addImage(image(part, source(part.get("image")), where));
            case "image_url" -> {
                JsonNode url = part.get("image_url");
                builder.addImage(
                        image(
                                part,
                                source(url != null && url.isObject() ? url.get("url") : url),
                                where));
            }
            case "video" -> builder.addVideo(video(part, where));
            default ->
                    throw RecordFormats.invalid(
                            where
                                    + ": unsupported content part type '"
                                    + part.get("type").asText()
                                    + "'");
        }
    }

    private static String typeOf(JsonNode part, String where) throws RejectedRecordException {
        JsonNode type = part.get("type");
        if (type != null && type.isTextual()) {
            return type.textValue();
        }
        for (String key : new String[] {"text", "image", "image_url", "video"}) {
            if (part.has(key)) {
                return key;
            }
        }
        throw RecordFormats.invalid(where + ": content part has no 'type'");
    }

    private static String source(JsonNode node) {
        return node != null && node.isTextual() && !node.textValue().isBlank()
                ? node.textValue()
                : null;
    }

    private static ImageRef image(JsonNode part, String path, String where)
            throws RejectedRecordException {
        if (path == null) {
            throw new RejectedRecordException(
                    RejectReason.PLACEHOLDER_MISMATCH,
                    where
                            + ": image part without source (no non-empty path in 'image' or 'image_url')");
        }
        long minPixels = pixels(part, "min_pixels", where);
        long maxPixels = pixels(part, "max_pixels", where);
        if (minPixels > 0 && maxPixels > 0 && minPixels > maxPixels) {
            throw RecordFormats.invalid(
                    where + ": min_pixels " + minPixels + " > max_pixels " + maxPixels);
        }
        return new ImageRef(ImagePaths.requireSafe(path, where), minPixels, maxPixels);
    }

    private static VideoRef video(JsonNode part, String where) throws RejectedRecordException {
        JsonNode node = part.get("video");
        String[] frames =
                node != null && node.isArray()
                        ? RecordFormats.frames(node, where + " 'video'")
                        : null;
        String path = source(node);
        if (frames == null && path == null) {
            throw new RejectedRecordException(
                    RejectReason.PLACEHOLDER_MISMATCH,
                    where + ": video part without source (no non-empty path in 'video')");
        }
        for (String key : UNSUPPORTED_VIDEO_KEYS) {
            if (part.has(key)) {
                throw RecordFormats.invalid(
                        where
                                + ": the video part's '"
                                + key
                                + "' is not supported (supported: fps, sample_fps for frame images,"
                                + " min_pixels, max_pixels)");
            }
        }
        double fps = rate(part, "fps", where);
        if (frames != null) {
            // qwen-vl-utils takes a frame list's rate from 'sample_fps' (default 2.0, which
            // Stoker does not assume: transformers' 24 applies, docs/parity.md)
            double sampleFps = rate(part, "sample_fps", where);
            if (sampleFps > 0 && fps > 0 && sampleFps != fps) {
                throw RecordFormats.invalid(
                        where
                                + ": 'fps' "
                                + fps
                                + " and 'sample_fps' "
                                + sampleFps
                                + " give the frames two rates");
            }
            fps = sampleFps > 0 ? sampleFps : fps;
        }
        long minPixels = pixels(part, "min_pixels", where);
        long maxPixels = pixels(part, "max_pixels", where);
        if (minPixels > 0 && maxPixels > 0 && minPixels > maxPixels) {
            throw RecordFormats.invalid(
                    where + ": min_pixels " + minPixels + " > max_pixels " + maxPixels);
        }
        if (frames != null) {
            return VideoRef.ofFrames(frames, fps, minPixels, maxPixels);
        }
        return new VideoRef(ImagePaths.requireSafeVideo(path, where), fps, minPixels, maxPixels);
    }

    /** A positive frame rate under {@code key}, 0 when absent or null. */
    private static double rate(JsonNode part, String key, String where)
            throws RejectedRecordException {
        JsonNode rate = part.get(key);
        if (rate == null || rate.isNull()) {
            return 0;
        }
        if (!rate.isNumber() || !(rate.doubleValue() > 0) || rate.doubleValue() > 1e6) {
            throw RecordFormats.invalid(
                    where + ": '" + key + "' must be a positive number, got " + rate);
        }
        return rate.doubleValue();
    }

    private static long pixels(JsonNode part, String field, String where)
            throws RejectedRecordException {
        JsonNode value = part.get(field);
        if (value == null || value.isNull()) {
            return 0;
        }
        if (!value.isIntegralNumber() || !value.canConvertToLong() || value.longValue() <= 0) {
            throw RecordFormats.invalid(
                    where + ": '" + field + "' must be a positive integer, got " + value);
        }
        return value.longValue();
    }
}
