package dev.stoker.operators.batch;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.HashSet;
import java.util.Set;
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
}
