package dev.stoker.operators.model;

/**
 * The micro-batch of one DP rank for one step, rows in slot order. Written by the sink as one Arrow
 * IPC file (see {@code docs/batch-protocol.md}).
 */
public class TrainingBatch {
    /** 0-based global step (counts on across epochs). */
    public long step;

    /** 0-based DP rank. */
    public int rank;

    /** Number of slots (the micro-batch size). */
    public int slots;

    /**
     * Rows in slot order: {@link #slots} of them, or none when no slot held a sample. Slots listed
     * in {@link #backfilledSlots} hold a copy of another slot's sample.
     */
    public TokenizedSample[] samples;

    /** Slots whose own record was rejected or past the epoch's end, filled with a copy. */
    public int[] backfilledSlots;

    public TrainingBatch() {}

    public TrainingBatch(
            long step, int rank, int slots, TokenizedSample[] samples, int[] backfilledSlots) {
        this.step = step;
        this.rank = rank;
        this.slots = slots;
        this.samples = samples;
        this.backfilledSlots = backfilledSlots;
    }
}
