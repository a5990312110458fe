package dev.stoker.connectors.shm;

import dev.stoker.connectors.feedback.AckServer;
import dev.stoker.connectors.feedback.NodeAcks;
import dev.stoker.connectors.protocol.Manifest;
import dev.stoker.connectors.protocol.PixelDtype;
import dev.stoker.connectors.protocol.ShmLayout;
import dev.stoker.operators.image.QwenVisionConfig;
import dev.stoker.operators.pack.MropePositions;
import java.io.IOException;
import java.io.Serializable;
import org.apache.flink.api.connector.sink2.WriterInitContext;

/**
 * Where and how a node's sink writes its batch files, shared by {@link ArrowBatchSink} (unpacked)
 * and {@link PackedBatchSink}: the generation's layout and manifest, its first step, the encoding
 * settings and the node's ack server.
 */
public final class BatchOutput implements Serializable {
    private static final long serialVersionUID = 1L;

    private final ShmLayout layout;
    private final Manifest manifest;
    private final long firstStep;
    private final QwenVisionConfig vision;
    private final long padTokenId;
    private final PixelDtype pixelDtype;
    private final MropePositions.VideoTime videoTime;
    private final int tokensPerSecond;
    private final NodeAcks acks;

    /**
     * @param layout this generation's directory layout
     * @param manifest the manifest to publish (names the generation)
     * @param firstStep the first step of this generation
     * @param vision the vision settings the images were resized with; the sink normalises and
     *     patchifies with them
     * @param padTokenId token id used to pad {@code input_ids}
     * @param pixelDtype element type of the {@code pixel_values} column
     * @param videoTime the model's temporal placement of videos in a packed row's positions
     * @param tokensPerSecond the model's {@code tokens_per_second} (absolute-time video positions)
     * @param acks where subtask {@code k} serves the acks of this sink's node ({@code port + k}),
     *     or {@code null} to serve none (the gate reads the files itself)
     */
    public BatchOutput(
            ShmLayout layout,
            Manifest manifest,
            long firstStep,
            QwenVisionConfig vision,
            long padTokenId,
            PixelDtype pixelDtype,
            MropePositions.VideoTime videoTime,
            int tokensPerSecond,
            NodeAcks acks) {
        this.layout = layout;
        this.manifest = manifest;
        this.firstStep = firstStep;
        this.vision = vision;
        this.padTokenId = padTokenId;
        this.pixelDtype = pixelDtype;
        this.videoTime = videoTime;
        this.tokensPerSecond = tokensPerSecond;
        this.acks = acks;
    }

    ShmLayout layout() {
        return layout;
    }

    /**
     * What a sink writer starts with: the generation's directory (subtask 0 removes other
     * generations), the manifest, this subtask's ack server when acks are served, and the publisher
     * of its batch files.
     *
     * @param packingMaxTokens tokens per packed row, or 0 for unpacked batches ({@link
     *     ArrowBatchEncoder})
     * @throws IOException if the directories or the manifest cannot be written
     */
    RankPublisher open(WriterInitContext context, int packingMaxTokens) throws IOException {
        ShmLayout.createPrivateDirectories(layout.generationDir());
        int subtask = context.getTaskInfo().getIndexOfThisSubtask();
        if (subtask == 0) {
            Generations.removeOtherGenerations(layout);
        }
        manifest.writeTo(layout);
        AckServer server =
                acks == null
                        ? null
                        : AckServer.start(
                                acks.host(),
                                acks.port() + subtask,
                                layout,
                                acks.globalRanks(),
                                firstStep);
        ArrowBatchEncoder encoder =
                new ArrowBatchEncoder(
                        vision,
                        padTokenId,
                        pixelDtype,
                        packingMaxTokens,
                        videoTime,
                        tokensPerSecond);
        return new RankPublisher(
                layout,
                firstStep,
                new BatchFileWriter(layout, encoder),
                context.metricGroup(),
                server);
    }
}
