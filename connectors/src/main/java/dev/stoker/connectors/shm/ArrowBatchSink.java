package dev.stoker.connectors.shm;

import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.model.SlotResult;
import java.io.IOException;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;

/**
 * Flink Sink V2 that assembles slot results into micro-batches and writes each as an Arrow IPC file
 * into this generation's node-local directory (normally under {@code /dev/shm}), following {@code
 * docs/batch-protocol.md}.
 *
 * <p>Input must be keyed by DP rank, so all slots of a batch reach the same writer. Samples that
 * wait for the rest of their batch are staged in files next to the batches, not in Flink state. The
 * writer never blocks: the prefetch bound is enforced upstream by the source's prefetch gate, which
 * reads the acks of this node's ranks either from the same {@code /dev/shm} or, when the sink is
 * given its node's {@code NodeAcks}, from an {@code AckServer} each subtask runs ({@link
 * BatchOutput}). Delivery to the trainer: exactly once per step and rank; a batch rewritten after a
 * failover replaces the identical file, and steps the reader already acknowledged are not written
 * again.
 */
public final class ArrowBatchSink implements Sink<SlotResult> {
    private static final long serialVersionUID = 6L;

    private final BatchOutput output;
    private final BatchPlan plan;

    /**
     * @param output where and how the batch files are written
     * @param plan the batch plan (world size, micro-batch size, steps)
     */
    public ArrowBatchSink(BatchOutput output, BatchPlan plan) {
        this.output = output;
        this.plan = plan;
    }

    @Override
    public SinkWriter<SlotResult> createWriter(WriterInitContext context) throws IOException {
        return new ArrowBatchWriter(
                plan,
                output.open(context, 0),
                new SlotStager(output.layout()),
                context.metricGroup());
    }
}
