package dev.stoker.operators.accounting;

import dev.stoker.operators.model.DeadLetter;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.SlotResult;
import java.util.EnumMap;
import java.util.Map;
import org.apache.flink.api.common.accumulators.LongCounter;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MetricGroup;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Counts and logs each dead letter and turns it into the empty slot it leaves in the batch plan.
 *
 * <p>Metrics: {@code deadLetters} (all; also an accumulator, see {@link Accounting}) and {@code
 * deadLettersByReason.<REASON>} counters.
 */
public final class DeadLetterAccounting extends RichMapFunction<DeadLetter, SlotResult> {
    private static final long serialVersionUID = 1L;
    private static final Logger LOG = LoggerFactory.getLogger(DeadLetterAccounting.class);

    private transient Counter total;
    private transient LongCounter totalAccumulator;
    private transient Map<RejectReason, Counter> perReason;

    @Override
    public void open(OpenContext openContext) {
        MetricGroup group = getRuntimeContext().getMetricGroup();
        total = group.counter(Accounting.DEAD_LETTERS);
        totalAccumulator = Accounting.accumulator(getRuntimeContext(), Accounting.DEAD_LETTERS);
        perReason = new EnumMap<>(RejectReason.class);
        MetricGroup reasons = group.addGroup("deadLettersByReason");
        for (RejectReason r : RejectReason.values()) {
            perReason.put(r, reasons.counter(r.name()));
        }
    }

    @Override
    public SlotResult map(DeadLetter dl) {
        total.inc();
        totalAccumulator.add(1);
        perReason.get(dl.reason).inc();
        LOG.warn("Dead letter: {}", dl);
        return SlotResult.empty(dl.ref.sampleIndex);
    }
}
