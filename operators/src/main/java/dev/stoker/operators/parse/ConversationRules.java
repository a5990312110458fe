package dev.stoker.operators.parse;

import dev.stoker.operators.model.ChatMessage;
import dev.stoker.operators.model.ContentPart;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SftRecord;

/**
 * Structural rules a normalised conversation must satisfy before it can become a training sample.
 *
 * <ul>
 *   <li>at least one message; an optional system message only as the first turn; then user and
 *       assistant turns alternate, starting with user and ending with assistant (a trailing user
 *       turn is not dropped: the record is rejected);
 *   <li>no assistant turn is empty or whitespace-only (it would have no trainable answer tokens);
 *   <li>images and videos occur only in user turns.
 * </ul>
 *
 * <p>Text may contain the strings of special tokens ({@code <|im_end|>}, {@code <|image_pad|>},
 * ...): the tokenizer encodes message text as text, so they cannot become control or image tokens
 * ({@code QwenChatTemplate}).
 */
final class ConversationRules {
    private ConversationRules() {}

    /**
     * Checks all rules.
     *
     * @throws RejectedRecordException {@link RejectReason#INVALID_RECORD} for missing turns, roles
     *     out of order and empty answers; {@link RejectReason#PLACEHOLDER_MISMATCH} for images and
     *     videos outside user turns
     */
    static void check(SftRecord record) throws RejectedRecordException {
        ChatMessage[] messages = record.messages;
        if (messages.length == 0) {
            throw invalid("conversation has no messages");
        }
        for (int i = 0; i < messages.length; i++) {
            checkTurn(messages[i], i + 1);
        }
        int start = ChatMessage.SYSTEM.equals(messages[0].role) ? 1 : 0;
        for (int i = start; i < messages.length; i++) {
            String expected = (i - start) % 2 == 0 ? ChatMessage.USER : ChatMessage.ASSISTANT;
            if (!expected.equals(messages[i].role)) {
                throw invalid(
                        "roles out of order: turn "
                                + (i + 1)
                                + " is "
                                + messages[i].role
                                + " but "
                                + expected
                                + " was expected (optional system first, then user/assistant alternating)");
            }
        }
        String lastRole = messages[messages.length - 1].role;
        if (messages.length == start) {
            throw invalid("conversation has no assistant turn (no trainable assistant tokens)");
        }
        if (!ChatMessage.ASSISTANT.equals(lastRole)) {
            throw invalid(
                    "conversation ends with "
                            + lastRole
                            + " turn "
                            + messages.length
                            + " that has no assistant answer");
        }
    }

    private static void checkTurn(ChatMessage message, int turn) throws RejectedRecordException {
        StringBuilder text = new StringBuilder();
        for (ContentPart part : message.content) {
            if (part.isImage() || part.isVideo()) {
                if (!ChatMessage.USER.equals(message.role)) {
                    throw new RejectedRecordException(
                            RejectReason.PLACEHOLDER_MISMATCH,
                            part.type
                                    + " in "
                                    + message.role
                                    + " turn "
                                    + turn
                                    + " ("
                                    + part.type
                                    + "s are only allowed in user turns)");
                }
                continue;
            }
            text.append(part.text);
        }
        if (ChatMessage.ASSISTANT.equals(message.role) && text.toString().isBlank()) {
            throw invalid(
                    "assistant turn "
                            + turn
                            + " is empty or whitespace-only (no trainable assistant tokens)");
        }
    }

    private static RejectedRecordException invalid(String message) {
        return new RejectedRecordException(RejectReason.INVALID_RECORD, message);
    }
}
