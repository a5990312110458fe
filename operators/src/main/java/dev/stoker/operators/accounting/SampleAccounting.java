package dev.stoker.operators.accounting;

import dev.stoker.operators.model.SlotResult;
import dev.stoker.operators.model.TokenizedSample;
import org.apache.flink.api.common.accumulators.LongCounter;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.metrics.Counter;

/**
 * Counts each finished sample and turns it into the slot it fills in the batch plan.
 *
 * <p>Metric and accumulator: {@code samplesEmitted} (see {@link Accounting}).
 */
public final class SampleAccounting extends RichMapFunction<TokenizedSample, SlotResult> {
    private static final long serialVersionUID = 1L;

    private transient Counter emitted;
    private transient LongCounter emittedAccumulator;

    @Override
    public void open(OpenContext openContext) {
        emitted = getRuntimeContext().getMetricGroup().counter(Accounting.SAMPLES_EMITTED);
        emittedAccumulator =
                Accounting.accumulator(getRuntimeContext(), Accounting.SAMPLES_EMITTED);
    }

    @Override
    public SlotResult map(TokenizedSample sample) {
        emitted.inc();
        emittedAccumulator.add(1);
        return SlotResult.of(sample);
    }
}
