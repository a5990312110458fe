package dev.stoker.connectors.shm;

import dev.stoker.operators.metrics.MetricNames;
import dev.stoker.operators.model.TrainingBatch;
import java.io.IOException;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.metrics.Counter;

/**
 * Flink Sink V2 that writes packed batches, already complete ({@code
 * dev.stoker.operators.pack.PackStepFunction} assembles them), as Arrow IPC files into this
 * generation's node-local directory, following {@code docs/batch-protocol.md}.
 *
 * <p>Input must be keyed by DP rank. Nothing waits here, so nothing is staged: the packing operator
 * upstream holds incomplete steps in its state. Delivery, acks and metrics are those of {@link
 * ArrowBatchSink} ({@link RankPublisher}), plus {@code batchesSkippedAlreadyConsumed}.
 */
public final class PackedBatchSink implements Sink<TrainingBatch> {
    private static final long serialVersionUID = 2L;

    private final BatchOutput output;
    private final int maxTokens;

    /**
     * @param output where and how the batch files are written
     * @param maxTokens tokens per packed row, at least 1
     * @throws IllegalArgumentException if {@code maxTokens} is below 1
     */
    public PackedBatchSink(BatchOutput output, int maxTokens) {
        if (maxTokens < 1) {
            throw new IllegalArgumentException("maxTokens must be at least 1, got " + maxTokens);
        }
        this.output = output;
        this.maxTokens = maxTokens;
    }

    @Override
    public SinkWriter<TrainingBatch> createWriter(WriterInitContext context) throws IOException {
        RankPublisher publisher = output.open(context, maxTokens);
        Counter skipped =
                context.metricGroup().counter(MetricNames.Sink.BATCHES_SKIPPED_ALREADY_CONSUMED);
        return new SinkWriter<>() {
            @Override
            public void write(TrainingBatch batch, Context ctx) throws IOException {
                if (publisher.consumed(batch.step, batch.rank)) {
                    skipped.inc(); // replayed after a restore: the trainer already has it
                    return;
                }
                publisher.publish(batch);
            }

            @Override
            public void flush(boolean endOfInput) {}

            @Override
            public void close() {
                publisher.close();
            }
        };
    }
}
