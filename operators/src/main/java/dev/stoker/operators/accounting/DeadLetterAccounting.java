package dev.stoker.operators.accounting;

import dev.stoker.operators.metrics.MetricNames;
import dev.stoker.operators.model.DeadLetter;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.SlotResult;
import java.util.EnumMap;
import java.util.HashMap;
import java.util.Map;
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
 * deadLettersByReason.<REASON>} counters, each also per mixture source ({@code
 * source.<name>.deadLetters}, {@code source.<name>.deadLettersByReason.<REASON>}).
 */
public final class DeadLetterAccounting extends RichMapFunction<DeadLetter, SlotResult> {
    private static final long serialVersionUID = 1L;
    private static final Logger LOG = LoggerFactory.getLogger(DeadLetterAccounting.class);

    private transient Accounting.Count total;
    private transient Map<RejectReason, Counter> perReason;
    private transient Map<String, Map<RejectReason, Counter>> perSourceAndReason;

    @Override
    public void open(OpenContext openContext) {
        total = new Accounting.Count(getRuntimeContext(), Accounting.DEAD_LETTERS);
        perReason = reasonCounters(getRuntimeContext().getMetricGroup());
        perSourceAndReason = new HashMap<>();
    }

    private static Map<RejectReason, Counter> reasonCounters(MetricGroup group) {
        Map<RejectReason, Counter> counters = new EnumMap<>(RejectReason.class);
        MetricGroup reasons = group.addGroup(MetricNames.DeadLetters.BY_REASON_GROUP);
        for (RejectReason r : RejectReason.values()) {
            counters.put(r, reasons.counter(r.name()));
        }
        return counters;
    }

    @Override
    public SlotResult map(DeadLetter dl) {
        total.add(dl.ref.source, 1);
        perReason.get(dl.reason).inc();
        if (dl.ref.source != null) {
            perSourceAndReason
                    .computeIfAbsent(
                            dl.ref.source,
                            s ->
                                    reasonCounters(
                                            Accounting.sourceGroup(
                                                    getRuntimeContext().getMetricGroup(), s)))
                    .get(dl.reason)
                    .inc();
        }
        LOG.warn("Dead letter: {}", dl);
        return SlotResult.empty(dl.ref.sampleIndex);
    }
}
