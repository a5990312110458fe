package dev.stoker.operators.batch;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

class MixtureOrderTest {

    @Test
    void aSeededPermutationIsABijectionThatDependsOnItsKey() {
        for (long n : new long[] {0, 1, 2, 3, 5, 16, 17, 100, 1000, 4097}) {
            long[] a = positions(new SeededPermutation(n, 7), n);
            assertThat(Arrays.stream(a).distinct().count()).isEqualTo(n);
            assertThat(Arrays.stream(a).allMatch(v -> v >= 0 && v < n)).isTrue();
            assertThat(positions(new SeededPermutation(n, 7), n)).isEqualTo(a);
            if (n >= 16) {
                assertThat(positions(new SeededPermutation(n, 8), n)).isNotEqualTo(a);
            }
        }
        // records from the whole range get mixed, not only neighbours
        long[] a = positions(new SeededPermutation(1000, 7), 1000);
        long farMoves = 0;
        for (int p = 0; p < a.length; p++) {
            if (Math.abs(a[p] - p) > 100) {
                farMoves++;
            }
        }
        assertThat(farMoves).isGreaterThan(500);
        assertThatThrownBy(() -> new SeededPermutation(5, 1).apply(5))
                .isInstanceOf(IndexOutOfBoundsException.class);
    }

    @Test
    void eachEpochTakesExactlyEachSourcesCount() {
        // weighted: 3:1:1 of 1000 per epoch over sources of very different sizes
        long[] counts = MixtureOrder.countsFromWeights(1000, new double[] {3, 1, 1});
        assertThat(counts).containsExactly(600, 200, 200);
        MixtureOrder order =
                new MixtureOrder(
                        List.of("chat", "ocr", "charts"),
                        new long[] {5000, 50, 700},
                        counts,
                        true,
                        11);
        for (int epoch = 0; epoch < 4; epoch++) {
            assertThat(perSource(order, epoch)).containsExactly(600L, 200L, 200L);
        }
    }

    @Test
    void weightsSplitATotalExactlyByLargestRemainder() {
        assertThat(MixtureOrder.countsFromWeights(10, new double[] {1, 1, 1}))
                .containsExactly(4, 3, 3);
        // quotas 3.5, 1.75, 1.75: floors 3, 1, 1, the two left over to the largest remainders
        assertThat(MixtureOrder.countsFromWeights(7, new double[] {0.5, 0.25, 0.25}))
                .containsExactly(3, 2, 2);
        long[] big = MixtureOrder.countsFromWeights(20_000_000, new double[] {0.1, 0.2, 0.3, 0.4});
        assertThat(big).containsExactly(2_000_000, 4_000_000, 6_000_000, 8_000_000);
        double[] many = new double[40];
        Arrays.fill(many, 1.0 / 3);
        assertThat(Arrays.stream(MixtureOrder.countsFromWeights(1_000_001, many)).sum())
                .isEqualTo(1_000_001);
        assertThatThrownBy(() -> MixtureOrder.countsFromWeights(10, new double[] {1, 0}))
                .isInstanceOf(IllegalArgumentException.class);
    }

    @Test
    void aDownSampledSourceUsesEveryRecordOnceBeforeAnyRepeats() {
        // 10 records, 3 per epoch: epochs 0-2 take 9 distinct records, epoch 3 the tenth and then
        // starts the next cycle, whose 10 records (epochs 3-6) are again all distinct
        MixtureOrder order =
                new MixtureOrder(
                        List.of("big", "small"), new long[] {10, 4}, new long[] {3, 4}, true, 5);
        List<Long> stream = new ArrayList<>();
        for (int epoch = 0; epoch < 7; epoch++) {
            List<Long> taken = recordsOf(order, epoch, 0);
            assertThat(taken).hasSize(3);
            stream.addAll(taken.stream().sorted().toList()); // order within an epoch is shuffled
        }
        assertThat(new HashSet<>(stream.subList(0, 9))).hasSize(9);
        Set<Long> cycle0 = new HashSet<>(stream.subList(0, 9));
        // the tenth record of cycle 0 is in epoch 3; the other two of epoch 3 start cycle 1
        List<Long> epoch3 = recordsOf(order, 3, 0);
        assertThat(epoch3.stream().filter(r -> !cycle0.contains(r)).count())
                .isGreaterThanOrEqualTo(1);
        Set<Long> all = new HashSet<>(stream);
        assertThat(all).hasSize(10);
        // a fresh slice each epoch, not the same three records
        assertThat(new HashSet<>(recordsOf(order, 0, 0)))
                .isNotEqualTo(new HashSet<>(recordsOf(order, 1, 0)));
    }

    @Test
    void anUpSampledSourceRepeatsEachRecordOncePerCycle() {
        // 4 records at 10 per epoch: each record 2 or 3 times an epoch, 5 times over two epochs
        MixtureOrder order =
                new MixtureOrder(
                        List.of("tiny", "rest"),
                        new long[] {4, 100},
                        new long[] {10, 100},
                        true,
                        3);
        Map<Long, Integer> seen = new HashMap<>();
        for (int epoch = 0; epoch < 2; epoch++) {
            Map<Long, Integer> inEpoch = new HashMap<>();
            for (long r : recordsOf(order, epoch, 0)) {
                inEpoch.merge(r, 1, Integer::sum);
                seen.merge(r, 1, Integer::sum);
            }
            assertThat(inEpoch.values()).allMatch(c -> c == 2 || c == 3);
        }
        assertThat(seen).hasSize(4).allSatisfy((r, c) -> assertThat(c).isEqualTo(5));
        // the source of 100 at count 100 reads each record once per epoch
        assertThat(new HashSet<>(recordsOf(order, 0, 1))).hasSize(100);
    }

    @Test
    void sourcesAreInterleavedThroughTheEpoch() {
        MixtureOrder order =
                new MixtureOrder(
                        List.of("a", "b"), new long[] {500, 500}, new long[] {500, 500}, true, 1);
        long fromA = 0;
        for (long p = 0; p < 100; p++) {
            if (order.pick(0, p).source == 0) {
                fromA++;
            }
        }
        assertThat(fromA).isBetween(30L, 70L);
    }

    @Test
    void theOrderIsAPureFunctionOfSourcesSeedAndEpoch() {
        MixtureOrder a = threeSources(true, 9);
        MixtureOrder b = threeSources(true, 9);
        MixtureOrder otherSeed = threeSources(true, 10);
        List<String> first = picks(a, 1);
        assertThat(picks(b, 1)).isEqualTo(first);
        assertThat(picks(a, 2)).isNotEqualTo(first);
        assertThat(picks(otherSeed, 1)).isNotEqualTo(first);
    }

    @Test
    void withoutShuffleSourcesFollowEachOtherInRecordOrder() {
        MixtureOrder order =
                new MixtureOrder(List.of("a", "b"), new long[] {3, 5}, new long[] {2, 3}, false, 1);
        assertThat(picks(order, 0)).containsExactly("0:0", "0:1", "1:0", "1:1", "1:2");
        assertThat(picks(order, 1)).containsExactly("0:2", "0:0", "1:3", "1:4", "1:0");
    }

    @Test
    void badArgumentsAreRejected() {
        assertThatThrownBy(
                        () ->
                                new MixtureOrder(
                                        List.of("a"), new long[] {0}, new long[] {1}, true, 1))
                .hasMessageContaining("source 'a'");
        assertThatThrownBy(() -> new MixtureOrder(List.of(), new long[0], new long[0], true, 1))
                .isInstanceOf(IllegalArgumentException.class);
        MixtureOrder order = threeSources(true, 1);
        assertThatThrownBy(() -> order.pick(0, order.recordsPerEpoch()))
                .isInstanceOf(IndexOutOfBoundsException.class);
    }

    private static MixtureOrder threeSources(boolean shuffle, long seed) {
        return new MixtureOrder(
                List.of("a", "b", "c"),
                new long[] {30, 7, 100},
                new long[] {20, 14, 16},
                shuffle,
                seed);
    }

    private static long[] positions(SeededPermutation perm, long n) {
        long[] out = new long[(int) n];
        for (int p = 0; p < n; p++) {
            out[p] = perm.apply(p);
        }
        return out;
    }

    private static long[] perSource(MixtureOrder order, int epoch) {
        long[] counts = new long[order.numSources()];
        for (long p = 0; p < order.recordsPerEpoch(); p++) {
            counts[order.pick(epoch, p).source]++;
        }
        return counts;
    }

    private static List<Long> recordsOf(MixtureOrder order, int epoch, int source) {
        List<Long> out = new ArrayList<>();
        for (long p = 0; p < order.recordsPerEpoch(); p++) {
            MixtureOrder.Pick pick = order.pick(epoch, p);
            if (pick.source == source) {
                out.add(pick.record);
            }
        }
        return out;
    }

    private static List<String> picks(MixtureOrder order, int epoch) {
        List<String> out = new ArrayList<>();
        for (long p = 0; p < order.recordsPerEpoch(); p++) {
            MixtureOrder.Pick pick = order.pick(epoch, p);
            out.add(pick.source + ":" + pick.record);
        }
        return out;
    }
}
