package dev.stoker.operators.accounting;

import dev.stoker.operators.model.SlotResult;
import dev.stoker.operators.model.TokenizedSample;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;

/**
 * Counts each finished sample and turns it into the slot it fills in the batch plan.
 *
 * <p>Metrics and accumulators (see {@link Accounting}), in total and per mixture source: {@code
 * samplesEmitted}, {@code tokensEmitted} (the samples' tokens before padding) and {@code
 * imagesEmitted}.
 */
public final class SampleAccounting extends RichMapFunction<TokenizedSample, SlotResult> {
    private static final long serialVersionUID = 1L;

    private transient Accounting.Count samples;
    private transient Accounting.Count tokens;
    private transient Accounting.Count images;

    @Override
    public void open(OpenContext openContext) {
        samples = new Accounting.Count(getRuntimeContext(), Accounting.SAMPLES_EMITTED);
        tokens = new Accounting.Count(getRuntimeContext(), Accounting.TOKENS_EMITTED);
        images = new Accounting.Count(getRuntimeContext(), Accounting.IMAGES_EMITTED);
    }

    @Override
    public SlotResult map(TokenizedSample sample) {
        String source = sample.ref.source;
        samples.add(source, 1);
        tokens.add(source, sample.inputIds == null ? 0 : sample.inputIds.length);
        images.add(source, sample.imageGridThw == null ? 0 : sample.imageGridThw.length / 3);
        return SlotResult.of(sample);
    }
}
