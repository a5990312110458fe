package dev.stoker.operators.parse;

import dev.stoker.operators.model.ChatMessage;
import dev.stoker.operators.model.ContentPart;
import dev.stoker.operators.model.ImageRef;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SftRecord;
import java.util.ArrayList;
import java.util.List;

/**
 * Accumulates turns and images of one record in order of occurrence.
 *
 * <p>Two image sources exist: {@code <image>} placeholders in string content, which take the
 * record's top-level image list in order (LLaVA, LLaMA-Factory/ShareGPT), and explicit image parts
 * of messages-style content lists, which carry their own path. Both end up as image parts whose
 * {@link ContentPart#imageIndex} points into one image array ordered by occurrence.
 */
final class ConversationBuilder {
    /** The LLaVA / LLaMA-Factory image placeholder; matched case-sensitively, as those tools do. */
    static final String PLACEHOLDER = "<image>";

    private final List<ImageRef> placeholderImages;
    private final List<ChatMessage> messages = new ArrayList<>();
    private final List<ImageRef> images = new ArrayList<>();
    private List<ContentPart> parts;
    private String role;
    private int placeholders;

    /**
     * @param placeholderImages the record's top-level images, consumed by {@code <image>}
     *     placeholders
     */
    ConversationBuilder(List<ImageRef> placeholderImages) {
        this.placeholderImages = placeholderImages;
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

    /** Adds text in which each {@code <image>} is a placeholder for the next top-level image. */
    void addTextWithPlaceholders(String text) {
        int from = 0;
        int at;
        while ((at = text.indexOf(PLACEHOLDER, from)) >= 0) {
            addText(text.substring(from, at));
            if (placeholders < placeholderImages.size()) {
                addImage(placeholderImages.get(placeholders));
            }
            placeholders++;
            from = at + PLACEHOLDER.length();
        }
        addText(text.substring(from));
    }

    /** Adds an explicit image part. */
    void addImage(ImageRef image) {
        parts.add(ContentPart.image(images.size()));
        images.add(image);
    }

    /** Builds the record from the turns added so far. */
    SftRecord build(RecordRef ref) {
        finishTurn();
        return new SftRecord(
                ref, messages.toArray(new ChatMessage[0]), images.toArray(new ImageRef[0]));
    }

    /**
     * Checks that every top-level image got exactly one placeholder.
     *
     * @throws RejectedRecordException {@link RejectReason#PLACEHOLDER_MISMATCH} when the number of
     *     {@code <image>} placeholders differs from the number of top-level images
     */
    void checkPlaceholders() throws RejectedRecordException {
        if (placeholders != placeholderImages.size()) {
            throw new RejectedRecordException(
                    RejectReason.PLACEHOLDER_MISMATCH,
                    placeholders
                            + " placeholders vs "
                            + placeholderImages.size()
                            + " images"
                            + " (each "
                            + PLACEHOLDER
                            + " in the text needs exactly one entry in the image list)");
        }
    }

    private void finishTurn() {
        if (role != null) {
            messages.add(new ChatMessage(role, parts.toArray(new ContentPart[0])));
            role = null;
        }
    }
}
