package dev.stoker.operators.model;

/**
 * What fills one slot of the batch plan: the sample for record {@code sampleIndex}, or nothing (the
 * record was dead-lettered, or the slot lies past the end of the dataset in the last step).
 */
public class SlotResult {
    public long sampleIndex;

    /** The sample, or {@code null} for an empty slot. */
    public TokenizedSample sample;

    public SlotResult() {}

    public SlotResult(long sampleIndex, TokenizedSample sample) {
        this.sampleIndex = sampleIndex;
        this.sample = sample;
    }

    /** An empty slot. */
    public static SlotResult empty(long sampleIndex) {
        return new SlotResult(sampleIndex, null);
    }

    /** The slot filled by {@code sample}. */
    public static SlotResult of(TokenizedSample sample) {
        return new SlotResult(sample.ref.sampleIndex, sample);
    }
}
