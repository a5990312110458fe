package dev.stoker.operators.pack;

import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.metrics.MetricNames;
import dev.stoker.operators.model.SlotResult;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import java.util.ArrayList;
import java.util.List;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.Gauge;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

/**
 * Packs each step once all of its {@code W*B} slots have arrived: keyed by step, it keeps the
 * step's slot results in keyed state until the last one (filled, dead-lettered or padding) is
 * there, then emits the step's {@code W} packed batches ({@link StepPacking}), one per rank, and
 * clears the step's state.
 *
 * <p>Exact sizes are known only here, after every image of the step is fetched, resized and
 * tokenized, so this is where packing decides. It stays deterministic and resumable because a
 * step's packing depends only on that step's samples (their sizes and slot indices, never their
 * arrival order), which are pure functions of the plan; slots that arrived before a checkpoint are
 * in its state, later ones are sent again by the restored source, and rescaling moves steps with
 * their key groups. The state holds the samples of steps not yet complete, which the source's
 * prefetch gate bounds.
 *
 * <p>Metrics: {@code stepsPacked}, {@code samplesPacked} (counters); {@code packingPaddingRatio}
 * (padding tokens over all token positions of the batches this subtask packed, rows padded to their
 * batch's longest row), {@code packedTokensPerRow} (mean real tokens per row), and of the last step
 * packed {@code rankTokenImbalance} and {@code rankPatchImbalance} (the busiest rank's tokens, or
 * image patches, over the mean of all ranks, minus 1).
 */
public final class PackStepFunction extends KeyedProcessFunction<Long, SlotResult, TrainingBatch> {
    private static final long serialVersionUID = 1L;

    private final BatchPlan plan;
    private final int maxTokens;

    private transient ListState<SlotResult> slots;
    private transient ValueState<Integer> arrived;
    private transient Counter stepsPacked;
    private transient Counter samplesPacked;
    private transient long tokens;
    private transient long positions;
    private transient long rows;
    private transient double tokenImbalance;
    private transient double patchImbalance;

    /**
     * @param plan the batch plan (world size W, micro-batch size B)
     * @param maxTokens most tokens per packed row
     */
    public PackStepFunction(BatchPlan plan, int maxTokens) {
        this.plan = plan;
        this.maxTokens = maxTokens;
    }

    @Override
    public void open(OpenContext openContext) {
        slots =
                getRuntimeContext()
                        .getListState(
                                new ListStateDescriptor<>(
                                        "step-slots", TypeInformation.of(SlotResult.class)));
        arrived =
                getRuntimeContext()
                        .getState(new ValueStateDescriptor<>("step-slots-arrived", Types.INT));
        MetricGroup group = getRuntimeContext().getMetricGroup();
        stepsPacked = group.counter(MetricNames.Pack.STEPS_PACKED);
        samplesPacked = group.counter(MetricNames.Pack.SAMPLES_PACKED);
        group.gauge(
                MetricNames.Pack.PACKING_PADDING_RATIO,
                (Gauge<Double>) () -> positions == 0 ? 0.0 : 1.0 - (double) tokens / positions);
        group.gauge(
                MetricNames.Pack.PACKED_TOKENS_PER_ROW,
                (Gauge<Double>) () -> rows == 0 ? 0.0 : (double) tokens / rows);
        group.gauge(MetricNames.Pack.RANK_TOKEN_IMBALANCE, (Gauge<Double>) () -> tokenImbalance);
        group.gauge(MetricNames.Pack.RANK_PATCH_IMBALANCE, (Gauge<Double>) () -> patchImbalance);
    }

    @Override
    public void processElement(SlotResult slot, Context ctx, Collector<TrainingBatch> out)
            throws Exception {
        Integer count = arrived.value();
        int n = (count == null ? 0 : count) + 1;
        if (n < plan.globalBatchSize()) {
            slots.add(slot);
            arrived.update(n);
            return;
        }
        List<TokenizedSample> samples = new ArrayList<>();
        for (SlotResult s : slots.get()) {
            if (s.sample != null) {
                samples.add(s.sample);
            }
        }
        if (slot.sample != null) {
            samples.add(slot.sample);
        }
        slots.clear();
        arrived.clear();
        TrainingBatch[] batches =
                StepPacking.pack(
                        ctx.getCurrentKey(),
                        plan.worldSize(),
                        plan.microBatchSize(),
                        maxTokens,
                        samples);
        record(batches);
        samplesPacked.inc(samples.size());
        stepsPacked.inc();
        for (TrainingBatch batch : batches) {
            out.collect(batch);
        }
    }

    private void record(TrainingBatch[] batches) {
        long busiestTokens = 0;
        long busiestPatches = 0;
        long sumTokens = 0;
        long sumPatches = 0;
        for (TrainingBatch b : batches) {
            long batchTokens = 0;
            long batchPatches = 0;
            int[] rowLength = new int[b.samples.length == 0 ? 0 : b.rowOf[b.rowOf.length - 1] + 1];
            for (int k = 0; k < b.samples.length; k++) {
                batchTokens += b.samples[k].inputIds.length;
                batchPatches += StepPacking.patches(b.samples[k]);
                rowLength[b.rowOf[k]] += b.samples[k].inputIds.length;
            }
            int longest = 0;
            for (int length : rowLength) {
                longest = Math.max(longest, length);
            }
            tokens += batchTokens;
            positions += (long) rowLength.length * longest;
            rows += rowLength.length;
            busiestTokens = Math.max(busiestTokens, batchTokens);
            busiestPatches = Math.max(busiestPatches, batchPatches);
            sumTokens += batchTokens;
            sumPatches += batchPatches;
        }
        int w = batches.length;
        tokenImbalance = sumTokens == 0 ? 0.0 : (double) busiestTokens * w / sumTokens - 1.0;
        patchImbalance = sumPatches == 0 ? 0.0 : (double) busiestPatches * w / sumPatches - 1.0;
    }
}
