package dev.stoker.operators.parse;

import dev.stoker.operators.model.ChatMessage;
import dev.stoker.operators.model.ContentPart;
import dev.stoker.operators.model.ImageRef;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.VideoRef;
import java.util.ArrayList;
import java.util.List;

/**
 * Accumulates turns, images and videos of one record in order of occurrence.
 *
 * <p>Two sources of each exist: {@code <image>} and {@code <video>} placeholders in string content,
 * which take the record's top-level image and video lists in order (LLaVA, LLaMA-Factory/ShareGPT),
 * and explicit image and video parts of messages-style content lists, which carry their own path.
 * Both end up as image (video) parts whose {@link ContentPart#imageIndex} ({@link
 * ContentPart#videoIndex}) points into one image (video) array ordered by occurrence.
 */
final class ConversationBuilder {
    /** The LLaVA / LLaMA-Factory image placeholder; matched case-sensitively, as those tools do. */
    static final String PLACEHOLDER = "<image>";

    /** The LLaVA / LLaMA-Factory video placeholder; matched case-sensitively, as those tools do. */
    static final String VIDEO_PLACEHOLDER = "<video>";

    private final List<ImageRef> placeholderImages;
    private final List<VideoRef> placeholderVideos;
    private final boolean imagePlaceholderIsVideo;
    private final List<ChatMessage> messages = new ArrayList<>();
    private final List<ImageRef> images = new ArrayList<>();
    private final List<VideoRef> videos = new ArrayList<>();
    private List<ContentPart> parts;
    private String role;
    private int placeholders;
    private int videoPlaceholders;

    /**
     * @param placeholderImages the record's top-level images, consumed by {@code <image>}
     *     placeholders
     * @param placeholderVideos the record's top-level videos, consumed by {@code <video>}
     *     placeholders
     * @param imagePlaceholderIsVideo whether {@code <image>} stands for the next top-level video
     *     instead (LLaVA-NeXT's video records, which have a {@code video} and no image)
     */
    ConversationBuilder(
            List<ImageRef> placeholderImages,
            List<VideoRef> placeholderVideos,
            boolean imagePlaceholderIsVideo) {
        this.placeholderImages = placeholderImages;
        this.placeholderVideos = placeholderVideos;
        this.imagePlaceholderIsVideo = imagePlaceholderIsVideo;
    }

    /** Starts a new turn with a normalised role. */
    void beginTurn(String normalisedRole) {
        finishTurn();
        role = normalisedRole;
        parts = new ArrayList<>();
    }

    /** Adds literal text (no placeholder handling); empty text is dropped. */
    void addText(String text) {
        if (!text.isEmpty()) {
            parts.add(ContentPart.text(text));
        }
    }

    /**
     * Adds text in which each {@code <image>} is a placeholder for the next top-level image and
     * each {@code <video>} one for the next top-level video.
     */
    void addTextWithPlaceholders(String text) {
        int from = 0;
        while (true) {
            int image = text.indexOf(PLACEHOLDER, from);
            int video = text.indexOf(VIDEO_PLACEHOLDER, from);
            if (image < 0 && video < 0) {
                break;
            }
            boolean isImage = image >= 0 && (video < 0 || image < video);
            int at = isImage ? image : video;
            addText(text.substring(from, at));
            if (isImage && !imagePlaceholderIsVideo) {
                if (placeholders < placeholderImages.size()) {
                    addImage(placeholderImages.get(placeholders));
                }
                placeholders++;
            } else {
                if (videoPlaceholders < placeholderVideos.size()) {
                    addVideo(placeholderVideos.get(videoPlaceholders));
                }
                videoPlaceholders++;
            }
            from = at + (isImage ? PLACEHOLDER.length() : VIDEO_PLACEHOLDER.length());
        }
        addText(text.substring(from));
    }

    /** Adds an explicit image part. */
    void addImage(ImageRef image) {
        parts.add(ContentPart.image(images.size()));
        images.add(image);
    }

    /** Adds an explicit video part. */
    void addVideo(VideoRef video) {
        parts.add(ContentPart.video(videos.size()));
        videos.add(video);
    }

    /** Builds the record from the turns added so far. */
    SftRecord build(RecordRef ref) {
        finishTurn();
        SftRecord record =
                new SftRecord(
                        ref, messages.toArray(new ChatMessage[0]), images.toArray(new ImageRef[0]));
        record.videos = videos.toArray(new VideoRef[0]);
        return record;
    }

    /**
     * Checks that every top-level image and video got exactly one placeholder.
     *
     * @throws RejectedRecordException {@link RejectReason#PLACEHOLDER_MISMATCH} when the number of
     *     {@code <image>} ({@code <video>}) placeholders differs from the number of top-level
     *     images (videos)
     */
    void checkPlaceholders() throws RejectedRecordException {
        if (placeholders != placeholderImages.size()) {
            throw mismatch(placeholders, placeholderImages.size(), "images", PLACEHOLDER, "image");
        }
        if (videoPlaceholders != placeholderVideos.size()) {
            String token =
                    imagePlaceholderIsVideo
                            ? PLACEHOLDER + " (standing for the video: the record has no image)"
                            : VIDEO_PLACEHOLDER;
            throw mismatch(videoPlaceholders, placeholderVideos.size(), "videos", token, "video");
        }
    }

    private static RejectedRecordException mismatch(
            int placeholders, int entries, String what, String token, String list) {
        return new RejectedRecordException(
                RejectReason.PLACEHOLDER_MISMATCH,
                placeholders
                        + " placeholders vs "
                        + entries
                        + " "
                        + what
                        + " (each "
                        + token
                        + " in the text needs exactly one entry in the "
                        + list
                        + " list)");
    }

    private void finishTurn() {
        if (role != null) {
            messages.add(new ChatMessage(role, parts.toArray(new ContentPart[0])));
            role = null;
        }
    }
}
