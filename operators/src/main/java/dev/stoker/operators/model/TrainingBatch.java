package dev.stoker.operators.model;

/**
 * The micro-batch of one DP rank for one step. Unpacked: one sample per row, rows in slot order.
 * Packed ({@link #rowOf} set, {@code dev.stoker.operators.pack.StepPacking}): the samples the
 * step's balance gave this rank, several per row. Written by the sink as one Arrow IPC file (see
 * {@code docs/batch-protocol.md}).
 */
public class TrainingBatch {
    /** 0-based global step (counts on across epochs). */
    public long step;

    /** 0-based DP rank. */
    public int rank;

    /** Number of slots (the micro-batch size). */
    public int slots;

    /**
     * Unpacked: rows in slot order, {@link #slots} of them, or none when no slot held a sample.
     * Packed: the samples row by row, in each row's order. Positions listed in {@link
     * #backfilledSlots} hold a copy of another sample.
     */
    public TokenizedSample[] samples;

    /**
     * Unpacked: slots whose own record was rejected or past the epoch's end, filled with a copy.
     * Packed: positions in {@link #samples} holding a copy of a sample of another rank, given to a
     * rank the step left without one.
     */
    public int[] backfilledSlots;

    /**
     * Packed batches only: the row of each of {@link #samples} (same length, non-decreasing, rows
     * {@code 0 .. R-1}); {@code null} for an unpacked batch, whose sample {@code k} is row {@code
     * k}.
     */
    public int[] rowOf;

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
