package dev.stoker.operators.batch;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;

class BatchPlanTest {

    @Test
    void mapsIndicesRankMajorWithinAStep() {
        BatchPlan plan = new BatchPlan(10, 2, 3, 1); // 6 samples per step
        assertThat(plan.numSteps()).isEqualTo(2);
        // step 0: rank 0 slots 0..2 = indices 0..2, rank 1 = 3..5; step 1: rank 0 = 6..8, rank 1 =
        // 9..11
        assertThat(plan.stepOf(5)).isZero();
        assertThat(plan.rankOf(5)).isEqualTo(1);
        assertThat(plan.slotOf(5)).isEqualTo(2);
        assertThat(plan.stepOf(6)).isEqualTo(1);
        assertThat(plan.rankOf(8)).isZero();
        assertThat(plan.rankOf(9)).isEqualTo(1);
        assertThat(plan.firstIndex(1, 1)).isEqualTo(9);
        assertThat(plan.paddingSlotsPerEpoch()).isEqualTo(2); // indices 10 and 11
        assertThat(plan.isPadding(9)).isFalse();
        assertThat(plan.isPadding(10)).isTrue();
        assertThat(plan.isPadding(11)).isTrue();
    }

    @Test
    void epochsContinueTheStepCountAndRestartPositions() {
        BatchPlan plan = new BatchPlan(10, 2, 3, 3);
        assertThat(plan.stepsPerEpoch()).isEqualTo(2);
        assertThat(plan.numSteps()).isEqualTo(6);
        assertThat(plan.slotsPerEpoch()).isEqualTo(12);
        long firstOfEpoch2 = 2 * plan.slotsPerEpoch();
        assertThat(plan.epochOf(firstOfEpoch2 - 1)).isEqualTo(1);
        assertThat(plan.epochOf(firstOfEpoch2)).isEqualTo(2);
        assertThat(plan.positionOf(firstOfEpoch2 + 4)).isEqualTo(4);
        assertThat(plan.stepOf(firstOfEpoch2)).isEqualTo(4);
        assertThat(plan.isPadding(firstOfEpoch2 + 10)).isTrue();
        assertThat(plan.isPadding(firstOfEpoch2 + 9)).isFalse();
        assertThat(plan.recordsFrom(0)).isEqualTo(30);
        assertThat(plan.recordsFrom(1)).isEqualTo(4 + 10 + 10); // step 1 holds records 6..9
        assertThat(plan.recordsFrom(2)).isEqualTo(20);
        assertThat(plan.recordsFrom(6)).isZero();
    }

    @Test
    void aLaterStagesEpochsStartAtItsStartStep() {
        BatchPlan fresh = new BatchPlan(10, 2, 3, 2);
        BatchPlan stage = new BatchPlan(10, 2, 3, 2, 5); // 6 samples per step, from step 5
        assertThat(stage.startStep()).isEqualTo(5);
        assertThat(stage.stepsPerEpoch()).isEqualTo(2);
        assertThat(stage.numSteps()).isEqualTo(5 + 4);
        long shift = 5 * 6;
        for (long i = 0; i < fresh.numSteps() * 6; i++) {
            assertThat(stage.epochOf(i + shift)).isEqualTo(fresh.epochOf(i));
            assertThat(stage.positionOf(i + shift)).isEqualTo(fresh.positionOf(i));
            assertThat(stage.isPadding(i + shift)).isEqualTo(fresh.isPadding(i));
            assertThat(stage.stepOf(i + shift)).isEqualTo(fresh.stepOf(i) + 5);
            assertThat(stage.rankOf(i + shift)).isEqualTo(fresh.rankOf(i));
        }
        assertThat(stage.recordsFrom(0)).isEqualTo(20);
        assertThat(stage.recordsFrom(5)).isEqualTo(20);
        assertThat(stage.recordsFrom(6)).isEqualTo(fresh.recordsFrom(1));
        assertThat(stage.recordsFrom(8)).isEqualTo(fresh.recordsFrom(3));
        assertThatThrownBy(() -> new BatchPlan(10, 2, 3, 1, -1))
                .isInstanceOf(IllegalArgumentException.class);
    }

    @Test
    void everySlotOfEveryBatchIsCoveredExactlyOnce() {
        BatchPlan plan = new BatchPlan(23, 3, 4, 2);
        Set<Long> seen = new HashSet<>();
        for (long step = 0; step < plan.numSteps(); step++) {
            for (int rank = 0; rank < plan.worldSize(); rank++) {
                for (int slot = 0; slot < plan.microBatchSize(); slot++) {
                    long i = plan.firstIndex(step, rank) + slot;
                    assertThat(plan.stepOf(i)).isEqualTo(step);
                    assertThat(plan.rankOf(i)).isEqualTo(rank);
                    assertThat(plan.slotOf(i)).isEqualTo(slot);
                    assertThat(seen.add(i)).isTrue();
                }
            }
        }
        assertThat(seen).hasSize((int) (2 * (plan.numRecords() + plan.paddingSlotsPerEpoch())));
    }

    @Test
    void exactMultipleHasNoPadding() {
        assertThat(new BatchPlan(12, 2, 3, 1).paddingSlotsPerEpoch()).isZero();
        assertThat(new BatchPlan(0, 2, 3, 1).numSteps()).isZero();
    }

    @Test
    void rejectsNonPositiveSizes() {
        assertThatThrownBy(() -> new BatchPlan(10, 0, 3, 1))
                .isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> new BatchPlan(10, 2, 0, 1))
                .isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> new BatchPlan(10, 2, 3, 0))
                .isInstanceOf(IllegalArgumentException.class);
    }

    /**
     * A resume with another world size and micro-batch size (W=4 B=2, then W=2 B=4, then W=3 B=3)
     * reads every record of every epoch exactly once and in the order of the mixture: the (epoch,
     * position) pairs of the three plans' non-padding slots, each from its start step, follow one
     * another as {@code 0 .. epochs * N - 1}.
     */
    @Test
    void aStageOfAnotherWorldSizeGoesOnAtTheNextUnconsumedPosition() {
        for (long n : new long[] {1, 7, 23, 24, 40}) {
            for (long cut1 = 0; cut1 < 12; cut1++) {
                for (long cut2 = cut1 + 1; cut2 < cut1 + 8; cut2++) {
                    BatchPlan a = new BatchPlan(n, 4, 2, 3);
                    long s1 = Math.min(cut1, a.numSteps());
                    BatchPlan b = new BatchPlan(n, 2, 4, 3, s1, a.positionAt(s1));
                    long s2 = Math.max(s1, Math.min(cut2, b.numSteps()));
                    BatchPlan c = new BatchPlan(n, 3, 3, 3, s2, b.positionAt(s2));
                    List<Long> order = new ArrayList<>();
                    collect(a, 0, s1, order);
                    collect(b, s1, s2, order);
                    collect(c, s2, c.numSteps(), order);
                    assertThat(order)
                            .as("N=%d, W=4 to step %d, W=2 to step %d, then W=3", n, s1, s2)
                            .isEqualTo(LongStream.range(0, 3 * n).boxed().toList());
                    assertThat(b.recordsFrom(s1) + a.positionAt(s1)).isEqualTo(3 * n);
                    assertThat(c.positionAt(c.numSteps())).isEqualTo(3 * n);
                }
            }
        }
    }

    @Test
    void aStageFromMidEpochHasAShortFirstEpochThenFullOnes() {
        BatchPlan plan = new BatchPlan(10, 2, 2, 2, 3, 7); // epoch 0 from position 7, 4 per step
        assertThat(plan.firstEpoch()).isZero();
        assertThat(plan.firstEpochPosition()).isEqualTo(7);
        assertThat(plan.numSteps()).isEqualTo(3 + 1 + 3); // 3 records in one step, then 10 in 3
        long first = 3 * 4;
        assertThat(plan.positionOf(first)).isEqualTo(7);
        assertThat(plan.isPadding(first + 2)).isFalse();
        assertThat(plan.isPadding(first + 3)).isTrue(); // position 10
        assertThat(plan.epochOf(first + 4)).isEqualTo(1);
        assertThat(plan.positionOf(first + 4)).isZero();
        assertThat(plan.recordsFrom(0)).isEqualTo(13);
        assertThat(plan.recordsFrom(4)).isEqualTo(10);
        assertThat(plan.positionAt(3)).isEqualTo(7);
        assertThat(plan.positionAt(4)).isEqualTo(10);
        assertThat(plan.positionAt(5)).isEqualTo(14);
        assertThat(plan.toString()).contains("at epoch 0 position 7");
        BatchPlan done = new BatchPlan(10, 2, 2, 2, 9, 20);
        assertThat(done.numSteps()).isEqualTo(9);
        assertThat(done.recordsFrom(0)).isZero();
        assertThatThrownBy(() -> new BatchPlan(10, 2, 2, 2, 9, 21))
                .isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> plan.positionAt(2)).isInstanceOf(IllegalArgumentException.class);
    }

    /**
     * Appends {@code epoch * N + position} of each non-padding slot of steps {@code from .. to-1}.
     */
    private static void collect(BatchPlan plan, long from, long to, List<Long> out) {
        for (long i = from * plan.globalBatchSize(); i < to * plan.globalBatchSize(); i++) {
            if (!plan.isPadding(i)) {
                out.add(plan.epochOf(i) * plan.numRecords() + plan.positionOf(i));
            }
        }
    }
}
