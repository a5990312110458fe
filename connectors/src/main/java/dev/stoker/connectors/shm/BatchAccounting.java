package dev.stoker.connectors.shm;

import dev.stoker.operators.accounting.Accounting;
import dev.stoker.operators.model.TrainingBatch;
import org.apache.flink.metrics.MetricGroup;

/**
 * The sink's accounting counts of the batches it writes, in total and per mixture source ({@link
 * Accounting}): {@code paddingTokens} (tokens) and {@code backfilledSamples} (samples). Metrics
 * only: a sink writer cannot add accumulators.
 */
final class BatchAccounting {
    private final Accounting.Count paddingTokens;
    private final Accounting.Count backfilledSamples;

    BatchAccounting(MetricGroup metrics) {
        this.paddingTokens = new Accounting.Count(metrics, Accounting.PADDING_TOKENS);
        this.backfilledSamples = new Accounting.Count(metrics, Accounting.BACKFILLED_SAMPLES);
    }

    /**
     * Counts a batch as {@link ArrowBatchEncoder} lays it out: each row's padding, {@code L} minus
     * its tokens, for the source of its last sample (an unpacked row's only one; a packed row's
     * padding tail follows its last sample), and each back-filled row or sample for the source of
     * the sample it copies.
     */
    void count(TrainingBatch batch) {
        int[][] rows = ArrowBatchEncoder.rows(batch);
        int seqLen = ArrowBatchEncoder.seqLen(batch, rows);
        for (int[] row : rows) {
            String source = batch.samples[row[row.length - 1]].ref.source;
            paddingTokens.add(source, seqLen - ArrowBatchEncoder.rowTokens(batch, row));
        }
        for (int k : batch.backfilledSlots) {
            backfilledSamples.add(batch.samples[k].ref.source, 1);
        }
    }
}
