package dev.stoker.operators.batch;

import dev.stoker.operators.accounting.Accounting;
import dev.stoker.operators.model.SlotResult;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import java.util.ArrayList;
import java.util.List;
import org.apache.flink.api.common.accumulators.LongCounter;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.metrics.Counter;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

/**
 * Collects slot results per DP rank (the key) and emits batch (step, rank) once all of its {@code
 * B} slots are resolved, with the surviving samples in slot order.
 *
 * <p>Upstream operators may deliver samples in any order; the batch contents depend only on the
 * {@link BatchPlan}. Pending slots live in keyed state (checkpointed) and are cleared when their
 * batch is emitted.
 */
public final class BatchAssembler extends KeyedProcessFunction<Integer, SlotResult, TrainingBatch> {
    private static final long serialVersionUID = 1L;

    private final BatchPlan plan;
    private transient MapState<Long, SlotResult> pendingSlots;
    private transient MapState<Long, Integer> resolvedPerStep;
    private transient Counter batchesAssembled;
    private transient Counter samplesEmitted;
    private transient LongCounter samplesEmittedTotal;

    public BatchAssembler(BatchPlan plan) {
        this.plan = plan;
    }

    /** The key of a slot result: its DP rank. */
    public static Integer rankKey(SlotResult slot, BatchPlan plan) {
        return plan.rankOf(slot.sampleIndex);
    }

    @Override
    public void open(OpenContext openContext) {
        pendingSlots =
                getRuntimeContext()
                        .getMapState(
                                new MapStateDescriptor<>(
                                        "pending-slots",
                                        Types.LONG,
                                        TypeInformation.of(SlotResult.class)));
        resolvedPerStep =
                getRuntimeContext()
                        .getMapState(
                                new MapStateDescriptor<>(
                                        "resolved-per-step", Types.LONG, Types.INT));
        batchesAssembled = getRuntimeContext().getMetricGroup().counter("batchesAssembled");
        samplesEmitted = getRuntimeContext().getMetricGroup().counter(Accounting.SAMPLES_EMITTED);
        samplesEmittedTotal =
                Accounting.accumulator(getRuntimeContext(), Accounting.SAMPLES_EMITTED);
    }

    @Override
    public void processElement(SlotResult slot, Context ctx, Collector<TrainingBatch> out)
            throws Exception {
        long step = plan.stepOf(slot.sampleIndex);
        int rank = ctx.getCurrentKey();
        if (slot.sample != null) {
            pendingSlots.put(slot.sampleIndex, slot);
        }
        Integer resolved = resolvedPerStep.get(step);
        int now = (resolved == null ? 0 : resolved) + 1;
        if (now < plan.microBatchSize()) {
            resolvedPerStep.put(step, now);
            return;
        }
        resolvedPerStep.remove(step);
        long first = plan.firstIndex(step, rank);
        List<TokenizedSample> samples = new ArrayList<>(plan.microBatchSize());
        for (long i = first; i < first + plan.microBatchSize(); i++) {
            SlotResult filled = pendingSlots.get(i);
            if (filled != null) {
                samples.add(filled.sample);
                pendingSlots.remove(i);
            }
        }
        out.collect(
                new TrainingBatch(
                        step,
                        rank,
                        plan.microBatchSize(),
                        samples.toArray(new TokenizedSample[0])));
        batchesAssembled.inc();
        samplesEmitted.inc(samples.size());
        samplesEmittedTotal.add(samples.size());
    }
}
