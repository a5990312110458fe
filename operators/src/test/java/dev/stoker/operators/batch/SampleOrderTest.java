package dev.stoker.operators.batch;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.HashSet;
import java.util.Set;
import org.junit.jupiter.api.Test;

class SampleOrderTest {

    private static int[] positions(SampleOrder order) {
        int[] out = new int[order.size()];
        for (int p = 0; p < out.length; p++) {
            out[p] = order.recordAt(p);
        }
        return out;
    }

    @Test
    void shuffleIsAPermutationThatDependsOnSeedAndEpochOnly() {
        int[] a = positions(SampleOrder.of(1000, true, 7, 0));
        Set<Integer> seen = new HashSet<>();
        for (int r : a) {
            seen.add(r);
        }
        assertThat(seen).hasSize(1000).allMatch(r -> r >= 0 && r < 1000);
        assertThat(positions(SampleOrder.of(1000, true, 7, 0))).isEqualTo(a);
        assertThat(positions(SampleOrder.of(1000, true, 7, 1))).isNotEqualTo(a);
        assertThat(positions(SampleOrder.of(1000, true, 8, 0))).isNotEqualTo(a);
        // records from the whole dataset get mixed, not only neighbours
        long farMoves = 0;
        for (int p = 0; p < a.length; p++) {
            if (Math.abs(a[p] - p) > 100) {
                farMoves++;
            }
        }
        assertThat(farMoves).isGreaterThan(500);
    }

    @Test
    void withoutShuffleKeepsListingOrder() {
        assertThat(positions(SampleOrder.of(5, false, 7, 3))).containsExactly(0, 1, 2, 3, 4);
        assertThat(SampleOrder.of(0, true, 1, 0).size()).isZero();
    }
}
