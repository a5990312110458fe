package dev.stoker.connectors.shm;

import dev.stoker.connectors.feedback.AckServer;
import dev.stoker.connectors.feedback.NodeAcks;
import dev.stoker.connectors.protocol.Manifest;
import dev.stoker.connectors.protocol.PixelDtype;
import dev.stoker.connectors.protocol.ShmLayout;
import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.image.QwenVisionConfig;
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
 * given its node's {@link NodeAcks}, from an {@link AckServer} each subtask runs. Delivery to the
 * trainer: exactly once per step and rank; a batch rewritten after a failover replaces the
 * identical file, and steps the reader already acknowledged are not written again.
 */
public final class ArrowBatchSink implements Sink<SlotResult> {
    private static final long serialVersionUID = 5L;

    private final ShmLayout layout;
    private final Manifest manifest;
    private final BatchPlan plan;
    private final long firstStep;
    private final QwenVisionConfig vision;
    private final long padTokenId;
    private final PixelDtype pixelDtype;
    private final NodeAcks acks;

    /**
     * @param layout this generation's directory layout
     * @param manifest the manifest to publish (names the generation)
     * @param plan the batch plan (world size, micro-batch size, steps)
     * @param firstStep the first step of this generation
     * @param vision the vision settings the images were resized with; the sink normalises and
     *     patchifies with them
     * @param padTokenId token id used to pad {@code input_ids}
     * @param pixelDtype element type of the {@code pixel_values} column
     * @param acks where subtask {@code k} serves the acks of this sink's node ({@code port + k}),
     *     or {@code null} to serve none (the gate reads the files itself)
     */
    public ArrowBatchSink(
            ShmLayout layout,
            Manifest manifest,
            BatchPlan plan,
            long firstStep,
            QwenVisionConfig vision,
            long padTokenId,
            PixelDtype pixelDtype,
            NodeAcks acks) {
        this.layout = layout;
        this.manifest = manifest;
        this.plan = plan;
        this.firstStep = firstStep;
        this.vision = vision;
        this.padTokenId = padTokenId;
        this.pixelDtype = pixelDtype;
        this.acks = acks;
    }

    @Override
    public SinkWriter<SlotResult> createWriter(WriterInitContext context) throws IOException {
        RankPublisher publisher =
                openPublisher(
                        context,
                        layout,
                        manifest,
                        firstStep,
                        acks,
                        new ArrowBatchEncoder(vision, padTokenId, pixelDtype));
        return new ArrowBatchWriter(plan, publisher, new SlotStager(layout), context.metricGroup());
    }

    /**
     * What a sink writer of either sink starts with: the generation's directory (subtask 0 removes
     * other generations), the manifest, this subtask's ack server when {@code acks} is set.
     */
    static RankPublisher openPublisher(
            WriterInitContext context,
            ShmLayout layout,
            Manifest manifest,
            long firstStep,
            NodeAcks acks,
            ArrowBatchEncoder encoder)
            throws IOException {
        ShmLayout.createPrivateDirectories(layout.generationDir());
        if (context.getTaskInfo().getIndexOfThisSubtask() == 0) {
            Generations.removeOtherGenerations(layout);
        }
        manifest.writeTo(layout);
        AckServer server =
                acks == null
                        ? null
                        : AckServer.start(
                                acks.host(),
                                acks.port() + context.getTaskInfo().getIndexOfThisSubtask(),
                                layout,
                                acks.globalRanks(),
                                firstStep);
        return new RankPublisher(
                layout,
                firstStep,
                new BatchFileWriter(layout, encoder),
                context.metricGroup(),
                server);
    }
}
