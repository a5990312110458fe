package dev.stoker.operators.tokenize;

import java.util.Arrays;

/** A growable array of primitive longs (token ids, labels) without boxing. */
final class LongSequence {
    private long[] values = new long[256];
    private int size;

    int size() {
        return size;
    }

    void add(long value) {
        ensure(1);
        values[size++] = value;
    }

    void addAll(long[] more) {
        ensure(more.length);
        System.arraycopy(more, 0, values, size, more.length);
        size += more.length;
    }

    void addRepeated(long value, int count) {
        ensure(count);
        Arrays.fill(values, size, size + count, value);
        size += count;
    }

    /** Appends {@code other}'s values at positions {@code [from, to)}. */
    void addRange(LongSequence other, int from, int to) {
        ensure(to - from);
        System.arraycopy(other.values, from, values, size, to - from);
        size += to - from;
    }

    long[] toArray() {
        return Arrays.copyOf(values, size);
    }

    private void ensure(int extra) {
        if (size + extra > values.length) {
            values = Arrays.copyOf(values, Math.max(values.length * 2, size + extra));
        }
    }
}
