package dev.stoker.operators.batch;

import java.util.Random;

/**
 * The order in which one epoch visits the dataset's records: a seeded shuffle over all records (not
 * only within a file), or the listing order when shuffling is off.
 *
 * <p>The permutation is a Fisher-Yates shuffle driven by {@link java.util.Random} (whose algorithm
 * the Java specification fixes) seeded with {@code seed * 1_000_003 + epoch}, so it is the same on
 * every JVM and does not depend on parallelism or timing. Memory: one {@code int} per record.
 */
public final class SampleOrder {
    private final int[] recordAt;

    private SampleOrder(int[] recordAt) {
        this.recordAt = recordAt;
    }

    /**
     * @param numRecords records in the dataset (at most {@link Integer#MAX_VALUE})
     * @param shuffle whether to shuffle; {@code false} keeps the listing order
     * @param seed the run's shuffle seed
     * @param epoch 0-based epoch
     * @throws IllegalArgumentException if {@code numRecords} is negative or too large
     */
    public static SampleOrder of(long numRecords, boolean shuffle, long seed, int epoch) {
        if (numRecords < 0 || numRecords > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("numRecords out of range: " + numRecords);
        }
        int n = (int) numRecords;
        int[] order = new int[n];
        for (int i = 0; i < n; i++) {
            order[i] = i;
        }
        if (shuffle) {
            Random random = new Random(seed * 1_000_003L + epoch);
            for (int i = n - 1; i > 0; i--) {
                int j = random.nextInt(i + 1);
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
        }
        return new SampleOrder(order);
    }

    /** Index (in listing order) of the record at {@code position} of the epoch. */
    public int recordAt(long position) {
        return recordAt[(int) position];
    }

    public int size() {
        return recordAt.length;
    }
}
