package dev.stoker.connectors.shm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.operators.model.TrainingBatch;
import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowFileWriter;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MetricGroup;

/**
 * Writes each batch to {@code rank-<r>/.step-<s>.arrow.tmp} and renames it to {@code
 * step-<s>.arrow}. Exposes per rank {@code batchesWritten} and {@code batchesAhead} (written minus
 * acknowledged by the reader through {@code ack.json}), and the trainer's feedback ({@link
 * TrainerFeedbackMetrics}).
 */
final class ArrowBatchWriter implements SinkWriter<TrainingBatch> {
    private static final ObjectMapper JSON = new ObjectMapper();

    private final ShmLayout layout;
    private final ArrowBatchEncoder encoder;
    private final BufferAllocator allocator = new RootAllocator();
    private final MetricGroup metrics;
    private final Counter bytesWritten;
    private final Map<Integer, RankProgress> ranks = new HashMap<>();

    ArrowBatchWriter(
            ShmLayout layout, Manifest manifest, ArrowBatchEncoder encoder, MetricGroup metrics)
            throws IOException {
        this.layout = layout;
        this.encoder = encoder;
        this.metrics = metrics;
        this.bytesWritten = metrics.counter("batchBytesWritten");
        ShmLayout.createPrivateDirectories(layout.jobDir());
        manifest.writeTo(layout);
    }

    @Override
    public void write(TrainingBatch batch, Context context) throws IOException {
        RankProgress progress = ranks.computeIfAbsent(batch.rank, this::registerRank);
        Path tmp = layout.tempBatchFile(batch.step, batch.rank);
        try (VectorSchemaRoot root = encoder.encode(batch, allocator);
                FileChannel channel =
                        FileChannel.open(
                                tmp,
                                EnumSet.of(
                                        StandardOpenOption.CREATE,
                                        StandardOpenOption.TRUNCATE_EXISTING,
                                        StandardOpenOption.WRITE),
                                ShmLayout.FILE_PERMISSIONS);
                ArrowFileWriter writer = new ArrowFileWriter(root, null, channel)) {
            writer.start();
            writer.writeBatch();
            writer.end();
            bytesWritten.inc(channel.size());
        }
        ShmLayout.publish(tmp, layout.batchFile(batch.step, batch.rank));
        progress.written.inc();
    }

    private RankProgress registerRank(int rank) {
        try {
            ShmLayout.createPrivateDirectories(layout.rankDir(rank));
        } catch (IOException e) {
            throw new IllegalStateException("Cannot create " + layout.rankDir(rank), e);
        }
        MetricGroup group = metrics.addGroup("rank", String.valueOf(rank));
        RankProgress progress = new RankProgress(group.counter("batchesWritten"));
        group.gauge("batchesAhead", () -> progress.written.getCount() - 1 - consumedStep(rank));
        TrainerFeedbackMetrics.register(group, layout.ackFile(rank));
        return progress;
    }

    /** Last step the rank's reader acknowledged, or -1. */
    private long consumedStep(int rank) {
        Path ack = layout.ackFile(rank);
        try {
            JsonNode node = JSON.readTree(Files.readAllBytes(ack));
            return node.path("consumed_step").asLong(-1);
        } catch (IOException e) {
            return -1;
        }
    }

    @Override
    public void flush(boolean endOfInput) {
        // Every batch is published (renamed) inside write(); nothing is buffered.
    }

    @Override
    public void close() {
        allocator.close();
    }

    private static final class RankProgress {
        final Counter written;

        RankProgress(Counter written) {
            this.written = written;
        }
    }
}
