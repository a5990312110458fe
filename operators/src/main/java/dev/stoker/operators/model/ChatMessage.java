package dev.stoker.operators.model;

/**
 * One turn of a conversation: a role ({@code system}, {@code user} or {@code assistant}) and its
 * content parts.
 */
public class ChatMessage {
    public static final String SYSTEM = "system";
    public static final String USER = "user";
    public static final String ASSISTANT = "assistant";

    /**
     * {@link #SYSTEM}, {@link #USER} or {@link #ASSISTANT} (LLaVA's human/gpt are mapped by the
     * parser).
     */
    public String role;

    /** Content parts in order; never {@code null}. */
    public ContentPart[] content;

    public ChatMessage() {}

    public ChatMessage(String role, ContentPart... content) {
        this.role = role;
        this.content = content;
    }
}
