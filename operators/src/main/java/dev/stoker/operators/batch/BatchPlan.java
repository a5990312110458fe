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
 */
public final class BatchPlan implements Serializable {
    private static final long serialVersionUID = 2L;

    private final long numRecords;
    private final int worldSize;
    private final int microBatchSize;
    private final int epochs;

    /**
     * @throws IllegalArgumentException if a size is not positive or {@code numRecords} is negative
     */
    public BatchPlan(long numRecords, int worldSize, int microBatchSize, int epochs) {
        if (numRecords < 0 || worldSize < 1 || microBatchSize < 1 || epochs < 1) {
            throw new IllegalArgumentException(
                    "need numRecords >= 0, worldSize >= 1, microBatchSize >= 1, epochs >= 1; got "
                            + numRecords
                            + ", "
                            + worldSize
                            + ", "
                            + microBatchSize
                            + ", "
                            + epochs);
        }
        this.numRecords = numRecords;
        this.worldSize = worldSize;
        this.microBatchSize = microBatchSize;
        this.epochs = epochs;
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

    /** Samples per step over all ranks: {@code W * B}. */
    public long globalBatchSize() {
        return (long) worldSize * microBatchSize;
    }

    /** Steps per epoch: {@code ceil(N / (W*B))}. */
    public long stepsPerEpoch() {
        return (numRecords + globalBatchSize() - 1) / globalBatchSize();
    }

    /** Steps of the whole run: {@code epochs * stepsPerEpoch()}. */
    public long numSteps() {
        return epochs * stepsPerEpoch();
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

    public int epochOf(long slotIndex) {
        return (int) (slotIndex / slotsPerEpoch());
    }

    /** Position of the slot in its epoch's sample order. */
    public long positionOf(long slotIndex) {
        return slotIndex % slotsPerEpoch();
    }

    /** Whether the slot lies past the epoch's last record and holds no record. */
    public boolean isPadding(long slotIndex) {
        return positionOf(slotIndex) >= numRecords;
    }

    /** Slot index of slot 0 of batch (step, rank). */
    public long firstIndex(long step, int rank) {
        return step * globalBatchSize() + (long) rank * microBatchSize;
    }

    /** Records (non-padding slots) in steps {@code firstStep .. numSteps()-1}. */
    public long recordsFrom(long firstStep) {
        long from = Math.max(0, firstStep) * globalBatchSize();
        long total = 0;
        for (int e = 0; e < epochs; e++) {
            long start = e * slotsPerEpoch();
            long end = start + numRecords;
            total += Math.max(0, end - Math.max(start, from));
        }
        return total;
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
                + " samples";
    }
}
