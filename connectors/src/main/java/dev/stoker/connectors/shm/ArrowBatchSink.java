package dev.stoker.connectors.shm;

import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.model.TrainingBatch;
import java.io.IOException;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;

/**
 * Flink Sink V2 that writes each {@link TrainingBatch} as an Arrow IPC file into a node-local
 * directory (normally under {@code /dev/shm}), published atomically by rename, following {@code
 * docs/batch-protocol.md}.
 *
 * <p>Delivery: at-least-once; a batch rewritten after a failover replaces the identical file of the
 * same name. Each writer subtask writes the batches of the ranks routed to it.
 */
public final class ArrowBatchSink implements Sink<TrainingBatch> {
    private static final long serialVersionUID = 1L;

    private final String jobDir;
    private final String jobName;
    private final BatchPlan plan;
    private final int patchDim;
    private final long padTokenId;

    /**
     * @param jobDir directory of this job's batches, e.g. {@code /dev/shm/stoker/<job-name>}
     * @param jobName the job name recorded in the manifest
     * @param plan the batch plan (world size, micro-batch size, number of steps)
     * @param patchDim floats per {@code pixel_values} row
     * @param padTokenId token id used to pad {@code input_ids}
     */
    public ArrowBatchSink(
            String jobDir, String jobName, BatchPlan plan, int patchDim, long padTokenId) {
        this.jobDir = jobDir;
        this.jobName = jobName;
        this.plan = plan;
        this.patchDim = patchDim;
        this.padTokenId = padTokenId;
    }

    @Override
    public SinkWriter<TrainingBatch> createWriter(WriterInitContext context) throws IOException {
        Manifest manifest = new Manifest(jobName, plan, patchDim);
        return new ArrowBatchWriter(
                new ShmLayout(jobDir),
                manifest,
                new ArrowBatchEncoder(patchDim, padTokenId),
                context.metricGroup());
    }
}
