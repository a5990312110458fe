package dev.stoker.operators.batch;

import java.io.Serializable;

/**
 * The fixed mapping from a record's sample index to (step, rank, slot).
 *
 * <p>With world size {@code W} and micro-batch size {@code B}, record {@code i} goes to step {@code
 * i / (W*B)}, rank {@code (i / B) % W}, slot {@code i % B}. The epoch has {@code ceil(N / (W*B))}
 * steps so that every rank gets the same number of steps; slots at or past {@code N} (only in the
 * last step) are padding slots that stay empty.
 */
public final class BatchPlan implements Serializable {
    private static final long serialVersionUID = 1L;

    private final long numRecords;
    private final int worldSize;
    private final int microBatchSize;

    /**
     * @throws IllegalArgumentException if a size is not positive or {@code numRecords} is negative
     */
    public BatchPlan(long numRecords, int worldSize, int microBatchSize) {
        if (numRecords < 0 || worldSize < 1 || microBatchSize < 1) {
            throw new IllegalArgumentException(
                    "need numRecords >= 0, worldSize >= 1, microBatchSize >= 1; got "
                            + numRecords
                            + ", "
                            + worldSize
                            + ", "
                            + microBatchSize);
        }
        this.numRecords = numRecords;
        this.worldSize = worldSize;
        this.microBatchSize = microBatchSize;
    }

    public long numRecords() {
        return numRecords;
    }

    public int worldSize() {
        return worldSize;
    }

    public int microBatchSize() {
        return microBatchSize;
    }

    /** Samples per step over all ranks: {@code W * B}. */
    public long globalBatchSize() {
        return (long) worldSize * microBatchSize;
    }

    /** Steps in the epoch: {@code ceil(N / (W*B))}. */
    public long numSteps() {
        return (numRecords + globalBatchSize() - 1) / globalBatchSize();
    }

    public long stepOf(long sampleIndex) {
        return sampleIndex / globalBatchSize();
    }

    public int rankOf(long sampleIndex) {
        return (int) ((sampleIndex / microBatchSize) % worldSize);
    }

    /** Sample index of slot 0 of batch (step, rank). */
    public long firstIndex(long step, int rank) {
        return step * globalBatchSize() + (long) rank * microBatchSize;
    }

    /**
     * Number of padding slots: {@code numSteps * W * B - N}; their indices are {@code N, N+1, ...}.
     */
    public long numPaddingSlots() {
        return numSteps() * globalBatchSize() - numRecords;
    }
}
