package dev.stoker.operators.batch;

import static org.assertj.core.api.Assertions.assertThat;

import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.SlotResult;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.streaming.api.operators.KeyedProcessOperator;
import org.apache.flink.streaming.util.KeyedOneInputStreamOperatorTestHarness;
import org.junit.jupiter.api.Test;

class BatchAssemblerTest {

    private static TokenizedSample sample(long index) {
        return new TokenizedSample(
                new RecordRef("file:/d/train.jsonl", index + 1, index, null),
                new long[] {index},
                new long[] {index},
                new float[0],
                new long[0]);
    }

    private static List<TrainingBatch> run(BatchPlan plan, List<SlotResult> input)
            throws Exception {
        try (KeyedOneInputStreamOperatorTestHarness<Integer, SlotResult, TrainingBatch> harness =
                new KeyedOneInputStreamOperatorTestHarness<>(
                        new KeyedProcessOperator<>(new BatchAssembler(plan)),
                        slot -> BatchAssembler.rankKey(slot, plan),
                        Types.INT)) {
            harness.open();
            long t = 0;
            for (SlotResult slot : input) {
                harness.processElement(slot, t++);
            }
            assertThat(harness.numKeyedStateEntries())
                    .as("state is cleared once every batch is out")
                    .isZero();
            return harness.extractOutputValues();
        }
    }

    private static long[] indices(TrainingBatch b) {
        return Arrays.stream(b.samples).mapToLong(s -> s.ref.sampleIndex).toArray();
    }

    @Test
    void batchesAreInSlotOrderWhateverTheArrivalOrder() throws Exception {
        BatchPlan plan = new BatchPlan(10, 2, 3); // 2 steps, 2 padding slots (10, 11)
        List<SlotResult> input = new ArrayList<>();
        for (long i = 0; i < 10; i++) {
            input.add(
                    i == 4
                            ? SlotResult.empty(i)
                            : SlotResult.of(sample(i))); // record 4 was dead-lettered
        }
        input.add(SlotResult.empty(10));
        input.add(SlotResult.empty(11));
        Collections.shuffle(input, new Random(7));

        List<TrainingBatch> out = run(plan, input);

        assertThat(out).hasSize(4);
        out.sort(
                (a, b) ->
                        a.step != b.step
                                ? Long.compare(a.step, b.step)
                                : Integer.compare(a.rank, b.rank));
        assertThat(indices(out.get(0))).containsExactly(0, 1, 2);
        assertThat(indices(out.get(1))).containsExactly(3, 5); // slot of record 4 stays empty
        assertThat(indices(out.get(2))).containsExactly(6, 7, 8);
        assertThat(indices(out.get(3))).containsExactly(9);
        assertThat(out).allSatisfy(b -> assertThat(b.slots).isEqualTo(3));
        assertThat(out.get(3).step).isEqualTo(1);
        assertThat(out.get(3).rank).isEqualTo(1);
    }

    @Test
    void aBatchIsEmittedOnlyWhenAllItsSlotsAreResolved() throws Exception {
        BatchPlan plan = new BatchPlan(4, 1, 2);
        List<TrainingBatch> out =
                run(
                        plan,
                        List.of(
                                SlotResult.of(sample(1)),
                                SlotResult.of(sample(2)),
                                SlotResult.of(sample(0)),
                                SlotResult.empty(3)));
        assertThat(out).extracting(b -> b.step).containsExactly(0L, 1L);
        assertThat(indices(out.get(1))).containsExactly(2);
    }
}
