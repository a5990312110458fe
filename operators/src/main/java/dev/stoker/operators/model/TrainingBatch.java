package dev.stoker.operators.model;

/**
 * The micro-batch of one DP rank for one step: the surviving samples of its slots, in slot order.
 * Written by the sink as one Arrow IPC file (see {@code docs/batch-protocol.md}).
 */
public class TrainingBatch {
    /** 0-based step of the epoch. */
    public long step;

    /** 0-based DP rank. */
    public int rank;

    /** Number of slots (the micro-batch size); {@code samples.length <= slots}. */
    public int slots;

    /** Samples in slot order; fewer than {@link #slots} when records were dead-lettered. */
    public TokenizedSample[] samples;

    public TrainingBatch() {}

    public TrainingBatch(long step, int rank, int slots, TokenizedSample[] samples) {
        this.step = step;
        this.rank = rank;
        this.slots = slots;
        this.samples = samples;
    }
}
