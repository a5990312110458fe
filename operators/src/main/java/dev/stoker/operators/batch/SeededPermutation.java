package dev.stoker.operators.batch;

/**
 * A seeded pseudo-random permutation of {@code [0, n)} that needs no memory per element: {@link
 * #apply} maps a position to an element in constant time.
 *
 * <p>Construction: a balanced Feistel network of {@value #ROUNDS} rounds over the smallest even
 * number of bits {@code 2h} with {@code 2^(2h) >= n}, whose round function is the SplitMix64
 * finaliser of the right half mixed with a per-round key derived from {@code key}; positions that
 * land outside {@code [0, n)} are encrypted again until they land inside (cycle walking, fewer than
 * 4 steps on average since {@code 2^(2h) < 4n}). The mapping is a pure function of {@code (n,
 * key)}: the same on every JVM, independent of parallelism and timing.
 */
public final class SeededPermutation {
    private static final int ROUNDS = 6;
    private static final long GOLDEN = 0x9E3779B97F4A7C15L;

    private final long n;
    private final int halfBits;
    private final long halfMask;
    private final long[] roundKeys = new long[ROUNDS];

    /**
     * @param n the number of elements, {@code >= 0}
     * @param key the seed of this permutation
     * @throws IllegalArgumentException if {@code n} is negative
     */
    public SeededPermutation(long n, long key) {
        if (n < 0) {
            throw new IllegalArgumentException("n must be >= 0, got " + n);
        }
        this.n = n;
        int bits = n <= 1 ? 1 : 64 - Long.numberOfLeadingZeros(n - 1);
        this.halfBits = (bits + 1) / 2;
        this.halfMask = (1L << halfBits) - 1;
        for (int r = 0; r < ROUNDS; r++) {
            roundKeys[r] = mix(key + (r + 1) * GOLDEN);
        }
    }

    /**
     * The element at {@code position}.
     *
     * @throws IndexOutOfBoundsException if {@code position} is not in {@code [0, n)}
     */
    public long apply(long position) {
        if (position < 0 || position >= n) {
            throw new IndexOutOfBoundsException("position " + position + " of " + n);
        }
        long y = position;
        do {
            y = encrypt(y);
        } while (y >= n);
        return y;
    }

    private long encrypt(long value) {
        long left = value >>> halfBits;
        long right = value & halfMask;
        for (long roundKey : roundKeys) {
            long next = left ^ (mix(right ^ roundKey) & halfMask);
            left = right;
            right = next;
        }
        return (left << halfBits) | right;
    }

    /** The SplitMix64 finaliser: a bijective 64-bit mix. */
    static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }
}
