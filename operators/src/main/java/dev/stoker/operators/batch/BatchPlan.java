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
 *
 * <p>A stage may also start part-way through the mixture's sample order ({@code
 * stoker.mixture.start-position} {@code Q}: the data-parallel world size or micro-batch size
 * changed at a resume, and the new plan goes on where the trainer stopped). The records of the
 * order are numbered across epochs, record {@code q} being position {@code q % N} of epoch {@code q
 * / N}; {@code Q} of them came before step {@code T}. The stage's first epoch is then epoch {@code
 * e0 = Q / N} from position {@code p0 = Q % N}: its {@code N - p0} records fill {@code ceil((N -
 * p0) / (W*B))} steps from {@code T} (padding slots after them), and every later epoch has {@code
 * S} steps as above. {@link #positionAt} gives the {@code Q} of the next stage.
 */
public final class BatchPlan implements Serializable {
    private static final long serialVersionUID = 4L;

    private final long numRecords;
    private final int worldSize;
    private final int microBatchSize;
    private final int epochs;
    private final long startStep;
    private final long startPosition;

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
        this(numRecords, worldSize, microBatchSize, epochs, startStep, 0);
    }

    /**
     * A plan that starts at step {@code startStep} with record {@code startPosition} of the
     * mixture's sample order (numbered across epochs: {@code epoch * numRecords + position}).
     *
     * @throws IllegalArgumentException if a size is not positive, {@code numRecords} or {@code
     *     startStep} is negative, or {@code startPosition} is not in {@code 0 .. epochs *
     *     numRecords}
     */
    public BatchPlan(
            long numRecords,
            int worldSize,
            int microBatchSize,
            int epochs,
            long startStep,
            long startPosition) {
        if (numRecords < 0
                || worldSize < 1
                || microBatchSize < 1
                || epochs < 1
                || startStep < 0
                || startPosition < 0
                || startPosition > epochs * numRecords) {
            throw new IllegalArgumentException(
                    "need numRecords >= 0, worldSize >= 1, microBatchSize >= 1, epochs >= 1,"
                            + " startStep >= 0, 0 <= startPosition <= epochs * numRecords; got "
                            + numRecords
                            + ", "
                            + worldSize
                            + ", "
                            + microBatchSize
                            + ", "
                            + epochs
                            + ", "
                            + startStep
                            + ", "
                            + startPosition);
        }
        this.numRecords = numRecords;
        this.worldSize = worldSize;
        this.microBatchSize = microBatchSize;
        this.epochs = epochs;
        this.startStep = startStep;
        this.startPosition = startPosition;
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

    /**
     * Records of the mixture's sample order that came before this plan's first step, {@code Q}
     * (numbered across epochs; 0 unless the stage continues an earlier one part-way).
     */
    public long startPosition() {
        return startPosition;
    }

    /** The epoch this plan's first step is in, {@code e0 = Q / N} (0 when {@code N = 0}). */
    public int firstEpoch() {
        return numRecords == 0 ? 0 : (int) (startPosition / numRecords);
    }

    /** The position in {@link #firstEpoch()} this plan's first step starts at, {@code Q % N}. */
    public long firstEpochPosition() {
        return numRecords == 0 ? 0 : startPosition % numRecords;
    }

    /** Samples per step over all ranks: {@code W * B}. */
    public long globalBatchSize() {
        return (long) worldSize * microBatchSize;
    }

    /** Steps per epoch: {@code ceil(N / (W*B))}. */
    public long stepsPerEpoch() {
        return (numRecords + globalBatchSize() - 1) / globalBatchSize();
    }

    /**
     * Steps of the whole run: {@code startStep() + epochs * stepsPerEpoch()} for a plan from
     * position 0; from position {@code Q}, {@code T + ceil((N - p0) / (W*B)) + (epochs - e0 - 1) *
     * stepsPerEpoch()} (just {@code T} when {@code Q} is past the last epoch).
     */
    public long numSteps() {
        return startStep + slotsFromStart() / globalBatchSize();
    }

    /** Slots of this plan from its start step to its end. */
    private long slotsFromStart() {
        if (firstEpoch() >= epochs) {
            return 0;
        }
        return headSlots() + (epochs - firstEpoch() - 1) * slotsPerEpoch();
    }

    /** Slots of the first epoch from the start step: {@code ceil((N - p0) / (W*B)) * W*B}. */
    private long headSlots() {
        long left = numRecords - firstEpochPosition();
        return (left + globalBatchSize() - 1) / globalBatchSize() * globalBatchSize();
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
        long r = slotIndex - firstSlot();
        long head = headSlots();
        return r < head ? firstEpoch() : firstEpoch() + 1 + (int) ((r - head) / slotsPerEpoch());
    }

    /** Position of the slot in its epoch's sample order. */
    public long positionOf(long slotIndex) {
        long r = slotIndex - firstSlot();
        long head = headSlots();
        return r < head ? firstEpochPosition() + r : (r - head) % slotsPerEpoch();
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
        long start = firstSlot();
        long end = start + numRecords - firstEpochPosition();
        for (int e = firstEpoch(); e < epochs; e++) {
            total += Math.max(0, end - Math.max(start, from));
            start = e == firstEpoch() ? firstSlot() + headSlots() : start + slotsPerEpoch();
            end = start + numRecords;
        }
        return total;
    }

    /**
     * The records of the mixture's sample order (numbered across epochs, as {@link
     * #startPosition()}) that come before step {@code step}: {@code Q} plus this plan's records in
     * steps {@code startStep() .. step - 1}. After step {@code S} a trainer has consumed {@code
     * positionAt(S + 1)} records; a plan of another world size or micro-batch size that goes on
     * from step {@code S + 1} starts at that position.
     *
     * @throws IllegalArgumentException if {@code step} is before {@link #startStep()}
     */
    public long positionAt(long step) {
        if (step < startStep) {
            throw new IllegalArgumentException(
                    "step " + step + " is before this plan's start step " + startStep);
        }
        return startPosition + recordsFrom(startStep) - recordsFrom(step);
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
                + (startStep == 0 ? "" : ", its epochs starting at step " + startStep)
                + (startPosition == 0
                        ? ""
                        : " at epoch "
                                + firstEpoch()
                                + " position "
                                + firstEpochPosition()
                                + " (mixture position "
                                + startPosition
                                + ")");
    }
}
