package dev.stoker.operators.tokenize;

/** What {@link SampleTokenizer} does with a sample longer than its maximum sequence length. */
public enum SequenceLengthPolicy {
    /** Dead-letter the sample with {@code SEQUENCE_TOO_LONG}; its slot is back-filled. */
    DROP,
    /**
     * Cut the sequence at the limit (the text of the last turns), never inside an image block: a
     * cut that falls in one moves before its {@code <|vision_start|>}, and that image and every
     * later one leave the sample. Dead-lettered like {@link #DROP} when no trained token remains.
     */
    TRUNCATE
}
