package dev.stoker.connectors.shm;

import dev.stoker.connectors.feedback.AckServer;
import dev.stoker.connectors.protocol.Ack;
import dev.stoker.connectors.protocol.ShmLayout;
import dev.stoker.operators.metrics.MetricNames;
import dev.stoker.operators.model.TrainingBatch;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.stream.Stream;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MetricGroup;

/**
 * What both sink writers share: publishing a complete batch file for (step, rank), the ranks'
 * acknowledged steps, and the per-rank metrics.
 *
 * <p>Metrics per rank: {@code batchesWritten}, {@code batchesAhead} (batch files written and not
 * yet consumed, counted on disk) and the trainer's feedback ({@link TrainerFeedbackMetrics});
 * overall: {@code batchBytesWritten} and, in total and per mixture source, {@code paddingTokens}
 * and {@code backfilledSamples} ({@link BatchAccounting}).
 */
final class RankPublisher implements AutoCloseable {
    private static final long ACK_REFRESH_MS = 50;

    private final ShmLayout layout;
    private final long firstStep;
    private final BatchFileWriter files;
    private final ArrowMemoryPool memory = new ArrowMemoryPool();
    private final BufferAllocator allocator =
            new RootAllocator(
                    RootAllocator.configBuilder().allocationManagerFactory(memory).build());
    private final MetricGroup metrics;
    private final Counter bytesWritten;
    private final BatchAccounting accounting;
    private final Map<Integer, Counter> batchesWritten = new HashMap<>();

    /** Serves this node's acks to the source's gate on another host, or {@code null}. */
    private final AckServer ackServer;

    /** Per rank: the reader's last acknowledged step as last read, and when (ms). */
    private final Map<Integer, long[]> consumedCache = new HashMap<>();

    RankPublisher(
            ShmLayout layout,
            long firstStep,
            BatchFileWriter files,
            MetricGroup metrics,
            AckServer ackServer) {
        this.layout = layout;
        this.firstStep = firstStep;
        this.files = files;
        this.metrics = metrics;
        this.ackServer = ackServer;
        this.bytesWritten = metrics.counter(MetricNames.Sink.BATCH_BYTES_WRITTEN);
        this.accounting = new BatchAccounting(metrics);
    }

    /**
     * Whether the reader of {@code rank} already acknowledged {@code step}. The first call for a
     * rank clears what a crashed attempt half-wrote in its directories (this writer alone writes
     * them) and registers its metrics.
     */
    boolean consumed(long step, int rank) {
        written(rank);
        return step <= consumedStep(rank, false);
    }

    /**
     * Writes the batch file of (batch.step, batch.rank), then removes it again if the reader
     * acknowledged the step meanwhile (it was written before a restore and read).
     */
    void publish(TrainingBatch batch) throws IOException {
        Counter written = written(batch.rank);
        bytesWritten.inc(files.write(batch, allocator));
        accounting.count(batch);
        if (batch.step <= consumedStep(batch.rank, true)) {
            Files.deleteIfExists(layout.batchFile(batch.step, batch.rank));
        }
        written.inc();
    }

    private Counter written(int rank) {
        return batchesWritten.computeIfAbsent(rank, this::registerRank);
    }

    private Counter registerRank(int rank) {
        try {
            Generations.removeTemporaryFiles(layout.rankDir(rank));
            Generations.removeTemporaryFiles(layout.stagingDir(rank));
        } catch (IOException e) {
            throw new IllegalStateException("Cannot clean " + layout.rankDir(rank), e);
        }
        MetricGroup group = metrics.addGroup(MetricNames.Sink.RANK_GROUP, String.valueOf(rank));
        // counted on disk, so the gauge stays right across failovers and rescaling
        group.gauge(MetricNames.Sink.BATCHES_AHEAD, () -> publishedBatches(layout.rankDir(rank)));
        TrainerFeedbackMetrics.register(group, layout.ackFile(rank));
        return group.counter(MetricNames.Sink.BATCHES_WRITTEN);
    }

    /**
     * The rank's last acknowledged step. Acknowledgements only grow, so between reads of {@code
     * ack.json} (at most every {@value #ACK_REFRESH_MS} ms unless {@code fresh}) the cached value
     * is a safe lower bound; the check after publishing reads fresh.
     */
    private long consumedStep(int rank, boolean fresh) {
        long now = System.currentTimeMillis();
        long[] cached = consumedCache.computeIfAbsent(rank, r -> new long[] {firstStep - 1, 0});
        if (fresh || now - cached[1] >= ACK_REFRESH_MS) {
            cached[0] = Math.max(cached[0], Ack.consumedStep(layout, rank, firstStep));
            cached[1] = now;
        }
        return cached[0];
    }

    /** Batch files published in {@code rankDir} and not yet consumed (the reader unlinks them). */
    private static long publishedBatches(Path rankDir) {
        try (Stream<Path> files = Files.list(rankDir)) {
            return files.filter(p -> ShmLayout.isBatchFile(p.getFileName().toString())).count();
        } catch (IOException | UncheckedIOException e) {
            return 0;
        }
    }

    @Override
    public void close() {
        if (ackServer != null) {
            ackServer.close();
        }
        allocator.close();
        memory.close();
    }
}
