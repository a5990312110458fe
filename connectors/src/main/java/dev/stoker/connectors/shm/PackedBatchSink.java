package dev.stoker.connectors.shm;

import dev.stoker.connectors.feedback.NodeAcks;
import dev.stoker.connectors.protocol.Manifest;
import dev.stoker.connectors.protocol.PixelDtype;
import dev.stoker.connectors.protocol.ShmLayout;
import dev.stoker.operators.image.QwenVisionConfig;
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
    private static final long serialVersionUID = 1L;

    private final ShmLayout layout;
    private final Manifest manifest;
    private final long firstStep;
    private final QwenVisionConfig vision;
    private final long padTokenId;
    private final PixelDtype pixelDtype;
    private final int maxTokens;
    private final NodeAcks acks;

    /**
     * @param layout this generation's directory layout
     * @param manifest the manifest to publish (names the generation)
     * @param firstStep the first step of this generation
     * @param vision the vision settings the images were resized with
     * @param padTokenId token id used to pad {@code input_ids}
     * @param pixelDtype element type of the {@code pixel_values} column
     * @param maxTokens tokens per packed row, at least 1
     * @param acks where subtask {@code k} serves the acks of this sink's node, or {@code null}
     */
    public PackedBatchSink(
            ShmLayout layout,
            Manifest manifest,
            long firstStep,
            QwenVisionConfig vision,
            long padTokenId,
            PixelDtype pixelDtype,
            int maxTokens,
            NodeAcks acks) {
        if (maxTokens < 1) {
            throw new IllegalArgumentException("maxTokens must be at least 1, got " + maxTokens);
        }
        this.layout = layout;
        this.manifest = manifest;
        this.firstStep = firstStep;
        this.vision = vision;
        this.padTokenId = padTokenId;
        this.pixelDtype = pixelDtype;
        this.maxTokens = maxTokens;
        this.acks = acks;
    }

    @Override
    public SinkWriter<TrainingBatch> createWriter(WriterInitContext context) throws IOException {
        RankPublisher publisher =
                ArrowBatchSink.openPublisher(
                        context,
                        layout,
                        manifest,
                        firstStep,
                        acks,
                        new ArrowBatchEncoder(vision, padTokenId, pixelDtype, maxTokens));
        Counter skipped = context.metricGroup().counter("batchesSkippedAlreadyConsumed");
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
