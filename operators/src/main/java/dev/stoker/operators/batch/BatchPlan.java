package dev.stoker.operators.batch;

import java.io.Serializable;

/**
 * The fixed mapping from a sample's position to (step, rank, slot), over one or more epochs.
 *
 * <p>With {@code N} records per epoch (over all sources of the mixture), world size {@code W} and
 * micro-batch size {@code B}, an epoch has {@code S = ceil(N / (W*B))} steps so that every rank
 * gets the same number of steps, and {@code S*W*B} slots. The run's slots are numbered {@code 0 ..
 * epochs*S*W*B - 1}: slot index {@code i} lies in epoch {@code i / (S*W*B)} at position {@code i %
 * (S*W*B)} of that epoch's sample order ({@link MixtureOrder}), in step {@code i / (W*B)} (steps
 * count on across epochs), rank {@code (i / B) % W}, slot {@code i % B}. Positions {@code >= N} of
 * an epoch are padding slots: they hold no record and are back-filled like rejected ones.
 *
 * <p>A plan may start at a later step {@code T} ({@code stoker.mixture.start-step}: a new stage of
 * the run, e.g. the next curriculum stage's mixture, after the steps an earlier plan produced). Its
 * epochs then start at step {@code T}: slot {@code i >= T*W*B} lies in epoch {@code (i - T*W*B) /
 * (S*W*B)} at position {@code (i - T*W*B) % (S*W*B)}, and the run has {@code T + epochs*S} steps;
 * steps and ranks are numbered as before. Slots before {@code T*W*B} are not this plan's.
 */
public final class BatchPlan implements Serializable {
    private static final long serialVersionUID = 3L;

    private final long numRecords;
    private final int worldSize;
    private final int microBatchSize;
    private final int epochs;
    private final long startStep;

    /**
     * A plan that starts at step 0.
     *
     * @throws IllegalArgumentException if a size is not positive or {@code numRecords} is negative
     */
    public BatchPlan(long numRecords, int worldSize, int microBatchSize, int epochs) {
        this(numRecords, worldSize, microBatchSize, epochs, 0);
    }

    /**
     * A plan whose first epoch starts at step {@code startStep}.
     *
     * @throws IllegalArgumentException if a size is not positive, or {@code numRecords} or {@code
     *     startStep} is negative
     */
    public BatchPlan(
            long numRecords, int worldSize, int microBatchSize, int epochs, long startStep) {
        if (numRecords < 0 || worldSize < 1 || microBatchSize < 1 || epochs < 1 || startStep < 0) {
            throw new IllegalArgumentException(
                    "need numRecords >= 0, worldSize >= 1, microBatchSize >= 1, epochs >= 1,"
                            + " startStep >= 0; got "
                            + numRecords
                            + ", "
                            + worldSize
                            + ", "
                            + microBatchSize
                            + ", "
                            + epochs
                            + ", "
                            + startStep);
        }
        this.numRecords = numRecords;
        this.worldSize = worldSize;
        this.microBatchSize = microBatchSize;
        this.epochs = epochs;
        this.startStep = startStep;
    }

    /** Records per epoch, {@code N}. */
    public long numRecords() {
        return numRecords;
    }

    public int worldSize() {
        return worldSize;
    }

    public int microBatchSize() {
        return microBatchSize;
    }

    public int epochs() {
        return epochs;
    }

    /** The step this plan's first epoch starts at, {@code T} (0 unless a later stage). */
    public long startStep() {
        return startStep;
    }

    /** Samples per step over all ranks: {@code W * B}. */
    public long globalBatchSize() {
        return (long) worldSize * microBatchSize;
    }

    /** Steps per epoch: {@code ceil(N / (W*B))}. */
    public long stepsPerEpoch() {
        return (numRecords + globalBatchSize() - 1) / globalBatchSize();
    }

    /** Steps of the whole run: {@code startStep() + epochs * stepsPerEpoch()}. */
    public long numSteps() {
        return startStep + epochs * stepsPerEpoch();
    }

    /** Slots per epoch: {@code stepsPerEpoch() * W * B}. */
    public long slotsPerEpoch() {
        return stepsPerEpoch() * globalBatchSize();
    }

    public long stepOf(long slotIndex) {
        return slotIndex / globalBatchSize();
    }

    public int rankOf(long slotIndex) {
        return (int) ((slotIndex / microBatchSize) % worldSize);
    }

    /** Slot within the rank's micro-batch, {@code 0 .. B-1}. */
    public int slotOf(long slotIndex) {
        return (int) (slotIndex % microBatchSize);
    }

    /** The epoch of slot {@code slotIndex}, at or after {@code startStep() * W * B}. */
    public int epochOf(long slotIndex) {
        return (int) ((slotIndex - firstSlot()) / slotsPerEpoch());
    }

    /** Position of the slot in its epoch's sample order. */
    public long positionOf(long slotIndex) {
        return (slotIndex - firstSlot()) % slotsPerEpoch();
    }

    /** Whether the slot lies past the epoch's last record and holds no record. */
    public boolean isPadding(long slotIndex) {
        return positionOf(slotIndex) >= numRecords;
    }

    /** Slot index of slot 0 of batch (step, rank). */
    public long firstIndex(long step, int rank) {
        return step * globalBatchSize() + (long) rank * microBatchSize;
    }

    /** Records (non-padding slots) of this plan in steps {@code firstStep .. numSteps()-1}. */
    public long recordsFrom(long firstStep) {
        long from = Math.max(startStep, firstStep) * globalBatchSize();
        long total = 0;
        for (int e = 0; e < epochs; e++) {
            long start = firstSlot() + e * slotsPerEpoch();
            long end = start + numRecords;
            total += Math.max(0, end - Math.max(start, from));
        }
        return total;
    }

    private long firstSlot() {
        return startStep * globalBatchSize();
    }

    /** Padding slots per epoch: {@code slotsPerEpoch() - N}. */
    public long paddingSlotsPerEpoch() {
        return slotsPerEpoch() - numRecords;
    }

    @Override
    public String toString() {
        return numRecords
                + " records x "
                + epochs
                + " epoch(s) -> "
                + numSteps()
                + " steps of "
                + worldSize
                + " ranks x "
                + microBatchSize
                + " samples"
                + (startStep == 0 ? "" : ", its epochs starting at step " + startStep);
    }
}
