package dev.stoker.operators.batch;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;

/**
 * Which record of which source fills each position of an epoch: the sample order of a mixture of
 * sources, a pure function of (the sources' record counts, their per-epoch counts, seed, epoch).
 *
 * <p>Source {@code s} has {@code N_s} records and contributes exactly {@code C_s} of each epoch's
 * {@code T = sum(C_s)} positions (not "on average"). Its {@code k}-th contribution of epoch {@code
 * e} ({@code 0 <= k < C_s}) is its record {@code perm_c(g mod N_s)}, where {@code g = e * C_s + k}
 * counts the source's samples since the start of the run and {@code c = g / N_s} is the cycle: a
 * source read in full once per cycle. So a down-sampled source ({@code C_s < N_s}) takes a new
 * slice of its records each epoch and uses every record once before any repeats; an up-sampled one
 * ({@code C_s > N_s}) repeats each record once per cycle. With shuffling, {@code perm_c} is a
 * {@link SeededPermutation} keyed by (seed, the source's name, {@code c}), and the positions of an
 * epoch are interleaved by another keyed by (seed, epoch): position {@code p} holds the {@code
 * k}-th contribution of the source {@code s} with {@code prefix_s <= q < prefix_(s+1)}, {@code q =
 * perm_e(p)}, {@code k = q - prefix_s}. Without shuffling both permutations are the identity: an
 * epoch is source 0's contributions in record order, then source 1's, and so on.
 *
 * <p>Memory: a few numbers per source, none per record.
 */
public final class MixtureOrder implements Serializable {
    private static final long serialVersionUID = 1L;

    /** One position's record: the source's index and the record's index in that source. */
    public static final class Pick {
        public final int source;
        public final long record;

        Pick(int source, long record) {
            this.source = source;
            this.record = record;
        }

        @Override
        public String toString() {
            return "source " + source + " record " + record;
        }
    }

    private final String[] names;
    private final long[] records;
    private final long[] counts;
    private final long[] prefix;
    private final long[] nameKeys;
    private final boolean shuffle;
    private final long seed;

    /**
     * @param names the sources' names (key their shuffles: renaming a source reshuffles it)
     * @param records {@code N_s}, records of each source, each {@code >= 1}
     * @param counts {@code C_s}, records each source contributes per epoch, each {@code >= 1}
     * @param shuffle whether to shuffle; {@code false} keeps each source's record order
     * @param seed the run's shuffle seed
     * @throws IllegalArgumentException if the arrays differ in length, are empty, or hold a count
     *     below 1
     */
    public MixtureOrder(
            List<String> names, long[] records, long[] counts, boolean shuffle, long seed) {
        if (names.isEmpty() || names.size() != records.length || records.length != counts.length) {
            throw new IllegalArgumentException(
                    "need one name, record count and per-epoch count per source; got "
                            + names.size()
                            + ", "
                            + records.length
                            + ", "
                            + counts.length);
        }
        this.names = names.toArray(new String[0]);
        this.records = records.clone();
        this.counts = counts.clone();
        this.prefix = new long[counts.length + 1];
        this.nameKeys = new long[counts.length];
        for (int s = 0; s < counts.length; s++) {
            if (records[s] < 1 || counts[s] < 1) {
                throw new IllegalArgumentException(
                        "source '"
                                + names.get(s)
                                + "' needs >= 1 record and >= 1 per epoch; got "
                                + records[s]
                                + " and "
                                + counts[s]);
            }
            prefix[s + 1] = Math.addExact(prefix[s], counts[s]);
            nameKeys[s] = nameKey(names.get(s));
        }
        this.shuffle = shuffle;
        this.seed = seed;
    }

    /**
     * Per-epoch counts that split {@code total} in proportion to {@code weights} exactly: each
     * source gets the floor of its quota {@code total * w_s / sum(w)}, and the records left over go
     * one each to the largest remainders (ties: the earlier source). The counts sum to {@code
     * total}.
     *
     * @throws IllegalArgumentException if {@code total} is negative or a weight is not finite and
     *     positive
     */
    public static long[] countsFromWeights(long total, double[] weights) {
        if (total < 0) {
            throw new IllegalArgumentException("total must be >= 0, got " + total);
        }
        double sum = 0;
        for (double w : weights) {
            if (!(w > 0) || Double.isInfinite(w)) {
                throw new IllegalArgumentException("weights must be finite and > 0: " + w);
            }
            sum += w;
        }
        long[] counts = new long[weights.length];
        double[] remainder = new double[weights.length];
        long given = 0;
        for (int s = 0; s < weights.length; s++) {
            double quota = total * (weights[s] / sum);
            counts[s] = Math.min(total, (long) Math.floor(quota));
            remainder[s] = quota - counts[s];
            given += counts[s];
        }
        Integer[] byRemainder = new Integer[weights.length];
        for (int s = 0; s < weights.length; s++) {
            byRemainder[s] = s;
        }
        Arrays.sort(byRemainder, (a, b) -> Double.compare(remainder[b], remainder[a]));
        for (int i = 0; given < total; i = (i + 1) % weights.length) {
            counts[byRemainder[i]]++;
            given++;
        }
        for (int i = weights.length - 1;
                given > total;
                i = (i + weights.length - 1) % weights.length) {
            // floating point put a floor above its quota: take it back from the smallest remainder
            if (counts[byRemainder[i]] > 0) {
                counts[byRemainder[i]]--;
                given--;
            }
        }
        return counts;
    }

    /** {@code T}: positions (records) per epoch, the sum of the per-epoch counts. */
    public long recordsPerEpoch() {
        return prefix[prefix.length - 1];
    }

    public int numSources() {
        return names.length;
    }

    public String name(int source) {
        return names[source];
    }

    /** {@code N_s}: the records source {@code source} has. */
    public long records(int source) {
        return records[source];
    }

    /** {@code C_s}: the records source {@code source} contributes to every epoch. */
    public long countPerEpoch(int source) {
        return counts[source];
    }

    public boolean shuffle() {
        return shuffle;
    }

    public long seed() {
        return seed;
    }

    /**
     * The record at {@code position} of epoch {@code epoch}.
     *
     * @throws IndexOutOfBoundsException if {@code position} is not in {@code [0,
     *     recordsPerEpoch())} or {@code epoch} is negative
     */
    public Pick pick(int epoch, long position) {
        long total = recordsPerEpoch();
        if (position < 0 || position >= total || epoch < 0) {
            throw new IndexOutOfBoundsException(
                    "epoch " + epoch + " position " + position + " of " + total);
        }
        long q =
                shuffle
                        ? new SeededPermutation(total, key(seed, 0x6D69786564L, epoch))
                                .apply(position)
                        : position;
        int s = Arrays.binarySearch(prefix, q);
        s = s >= 0 ? s : -s - 2; // the last prefix <= q (counts are >= 1: no equal neighbours)
        long k = q - prefix[s];
        long g = Math.addExact(Math.multiplyExact((long) epoch, counts[s]), k);
        long cycle = g / records[s];
        long inCycle = g % records[s];
        long record =
                shuffle
                        ? new SeededPermutation(records[s], key(seed, nameKeys[s], cycle))
                                .apply(inCycle)
                        : inCycle;
        return new Pick(s, record);
    }

    private static long key(long seed, long stream, long index) {
        return SeededPermutation.mix(
                SeededPermutation.mix(seed ^ SeededPermutation.mix(stream)) + index);
    }

    /** A stable 64-bit key of a source's name (FNV-1a over its UTF-8 bytes). */
    private static long nameKey(String name) {
        long h = 0xCBF29CE484222325L;
        for (byte b : name.getBytes(StandardCharsets.UTF_8)) {
            h = (h ^ (b & 0xFF)) * 0x100000001B3L;
        }
        return h;
    }
}
