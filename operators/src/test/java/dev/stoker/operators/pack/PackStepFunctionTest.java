package dev.stoker.operators.pack;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.offset;

import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.SlotResult;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TokenizedSampleTypeInfo;
import dev.stoker.operators.model.TrainingBatch;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.typeutils.ObjectArrayTypeInfo;
import org.apache.flink.api.java.typeutils.PojoTypeInfo;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.Gauge;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.jobgraph.OperatorID;
import org.apache.flink.runtime.metrics.groups.InternalOperatorMetricGroup;
import org.apache.flink.runtime.metrics.util.InterceptingOperatorMetricGroup;
import org.apache.flink.runtime.metrics.util.InterceptingTaskMetricGroup;
import org.apache.flink.runtime.operators.testutils.MockEnvironmentBuilder;
import org.apache.flink.streaming.api.operators.KeyedProcessOperator;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.util.KeyedOneInputStreamOperatorTestHarness;
import org.junit.jupiter.api.Test;

/**
 * The step-keyed packing operator emits a step's W batches once its W*B slots are in, keeps nothing
 * after, a snapshot taken mid-step restores to the same batches, and its metrics describe the last
 * step packed.
 */
class PackStepFunctionTest {
    // 6 records, W=2, B=2: step 0 = slots 0-3, step 1 = slots 4-7 (6 and 7 padding)
    private static final BatchPlan PLAN = new BatchPlan(6, 2, 2, 1);

    private static SlotResult filled(long index, int tokens) {
        return SlotResult.of(
                new TokenizedSample(
                        new RecordRef("file:/d.jsonl", index + 1, index, null),
                        new long[tokens],
                        new long[tokens],
                        new byte[0],
                        new long[0]));
    }

    private static KeyedOneInputStreamOperatorTestHarness<Long, SlotResult, TrainingBatch> harness()
            throws Exception {
        KeyedOneInputStreamOperatorTestHarness<Long, SlotResult, TrainingBatch> h =
                new KeyedOneInputStreamOperatorTestHarness<>(
                        new KeyedProcessOperator<>(new PackStepFunction(PLAN, 100)),
                        slot -> PLAN.stepOf(slot.sampleIndex),
                        Types.LONG);
        return h;
    }

    private static List<TrainingBatch> batches(
            KeyedOneInputStreamOperatorTestHarness<Long, SlotResult, TrainingBatch> h) {
        List<TrainingBatch> out = new ArrayList<>();
        for (Object o : h.getOutput()) {
            if (o instanceof StreamRecord<?> r) {
                out.add((TrainingBatch) r.getValue());
            }
        }
        return out;
    }

    private static List<Long> indices(TrainingBatch b) {
        List<Long> out = new ArrayList<>();
        for (TokenizedSample s : b.samples) {
            out.add(s.ref.sampleIndex);
        }
        return out;
    }

    @Test
    void aStepIsPackedWhenItsLastSlotArrivesWhateverTheOrderAndItsStateIsCleared()
            throws Exception {
        try (var h = harness()) {
            h.open();
            h.processElement(filled(5, 40), 0);
            h.processElement(filled(2, 30), 0);
            h.processElement(filled(0, 50), 0);
            h.processElement(SlotResult.empty(1), 0); // dead-lettered
            h.processElement(filled(3, 10), 0);
            List<TrainingBatch> out = batches(h);
            assertThat(out).hasSize(2);
            // 50 -> rank 0, 30 -> rank 1, 10 -> rank 1 (30 < 50): 50 vs 40 tokens
            assertThat(indices(out.get(0))).containsExactly(0L);
            assertThat(indices(out.get(1))).containsExactly(2L, 3L);
            assertThat(out.get(1).rowOf).containsExactly(0, 0);
            // step 1 waits for 3 more slots: its slot list and count
            assertThat(h.numKeyedStateEntries()).isEqualTo(2);
            h.processElement(filled(4, 20), 0);
            h.processElement(SlotResult.empty(6), 0);
            h.processElement(SlotResult.empty(7), 0);
            out = batches(h);
            assertThat(out).hasSize(4);
            assertThat(indices(out.get(2))).containsExactly(5L);
            assertThat(indices(out.get(3))).containsExactly(4L);
            assertThat(h.numKeyedStateEntries()).isZero();
        }
    }

    @Test
    void packedBatchesTravelAsPojosWithTheSamplesBulkSerializer() {
        TypeInformation<TrainingBatch> type = TypeInformation.of(TrainingBatch.class);
        assertThat(type).isInstanceOf(PojoTypeInfo.class);
        TypeInformation<?> samples =
                ((PojoTypeInfo<TrainingBatch>) type)
                        .getTypeAt(((PojoTypeInfo<TrainingBatch>) type).getFieldIndex("samples"));
        assertThat(samples).isInstanceOf(ObjectArrayTypeInfo.class);
        assertThat(((ObjectArrayTypeInfo<?, ?>) samples).getComponentInfo())
                .isInstanceOf(TokenizedSampleTypeInfo.class);
    }

    @Test
    void aSnapshotMidStepRestoresTheSlotsThatArrivedBeforeIt() throws Exception {
        OperatorSubtaskState snapshot;
        try (var h = harness()) {
            h.open();
            h.processElement(filled(0, 50), 0);
            h.processElement(filled(2, 30), 0);
            snapshot = h.snapshot(1, 1);
            h.processElement(filled(1, 5), 0); // after the checkpoint: sent again after restore
        }
        try (var h = harness()) {
            h.initializeState(snapshot);
            h.open();
            h.processElement(filled(1, 5), 0);
            h.processElement(filled(3, 10), 0);
            List<TrainingBatch> out = batches(h);
            assertThat(out).hasSize(2);
            assertThat(indices(out.get(0))).containsExactly(0L);
            assertThat(indices(out.get(1))).containsExactly(2L, 3L, 1L);
        }
    }

    @Test
    void theMetricsGiveTheLastStepsPaddingTokensPerRowAndRankImbalance() throws Exception {
        InterceptingOperatorMetricGroup metrics = new InterceptingOperatorMetricGroup();
        InterceptingTaskMetricGroup task =
                new InterceptingTaskMetricGroup() {
                    @Override
                    public InternalOperatorMetricGroup getOrAddOperator(
                            OperatorID id, String name, Map<String, String> variables) {
                        return metrics;
                    }
                };
        try (var h =
                new KeyedOneInputStreamOperatorTestHarness<>(
                        new KeyedProcessOperator<>(new PackStepFunction(PLAN, 60)),
                        (SlotResult slot) -> PLAN.stepOf(slot.sampleIndex),
                        Types.LONG,
                        new MockEnvironmentBuilder().setMetricGroup(task).build())) {
            h.open();
            h.processElement(filled(0, 50), 0);
            h.processElement(filled(2, 45), 0);
            h.processElement(filled(3, 40), 0);
            h.processElement(SlotResult.empty(1), 0);
            // rank 0: [50] in one row; rank 1: 45 then 40 (fewest tokens), rows of at most 60:
            // two rows, padded to 45. Tokens 135 in 50 + 2 * 45 = 140 positions, 3 rows.
            assertThat(batches(h)).hasSize(2);
            assertThat(gauge(metrics, "packingPaddingRatio")).isCloseTo(5.0 / 140, offset(1e-12));
            assertThat(gauge(metrics, "packedTokensPerRow")).isCloseTo(45.0, offset(1e-12));
            // the busiest rank's 85 tokens over the mean 67.5, minus 1; no images
            assertThat(gauge(metrics, "rankTokenImbalance"))
                    .isCloseTo(85.0 / 67.5 - 1, offset(1e-12));
            assertThat(gauge(metrics, "rankPatchImbalance")).isZero();
            assertThat(((Counter) metrics.get("stepsPacked")).getCount()).isEqualTo(1);
            assertThat(((Counter) metrics.get("samplesPacked")).getCount()).isEqualTo(3);
        }
    }

    private static double gauge(InterceptingOperatorMetricGroup metrics, String name) {
        return (Double) ((Gauge<?>) metrics.get(name)).getValue();
    }
}
