package dev.stoker.operators.parse;

import java.util.Arrays;
import java.util.stream.Collectors;

/**
 * The record layout a source's records are read as (a mixture source's {@code format}): {@link
 * #AUTO} tells the layouts apart per record by their keys; the others read every record as that one
 * layout and reject a record in another ({@link RecordFormats}).
 */
public enum RecordFormat {
    /** Per record: {@code conversations} is LLaVA, {@code messages} is messages or ShareGPT. */
    AUTO("auto"),
    /**
     * LLaVA: {@code conversations} of {@code {from, value}}, top-level {@code image(s)}, {@code
     * video(s)}.
     */
    LLAVA("llava"),
    /**
     * Messages (OpenAI/Qwen): {@code messages} whose content is a list of parts (or a plain string
     * for a turn without images or videos); no top-level {@code images} or {@code videos}.
     */
    MESSAGES("messages"),
    /**
     * LLaMA-Factory/ShareGPT: {@code messages} whose content is a string with {@code <image>} and
     * {@code <video>} placeholders, plus top-level {@code images} and {@code videos} arrays.
     */
    SHAREGPT("sharegpt");

    private final String key;

    RecordFormat(String key) {
        this.key = key;
    }

    /** The name a mixture spec gives it. */
    public String key() {
        return key;
    }

    /**
     * The format named {@code key}.
     *
     * @throws IllegalArgumentException naming the valid keys when {@code key} is none of them
     */
    public static RecordFormat fromKey(String key) {
        for (RecordFormat format : values()) {
            if (format.key.equals(key)) {
                return format;
            }
        }
        throw new IllegalArgumentException(
                "must be one of "
                        + Arrays.stream(values())
                                .map(RecordFormat::key)
                                .collect(Collectors.joining(", "))
                        + ", got '"
                        + key
                        + "'");
    }
}
