package dev.stoker.connectors.shm;

import dev.stoker.connectors.feedback.AckServer;
import dev.stoker.connectors.protocol.Ack;
import dev.stoker.connectors.protocol.ShmLayout;
import dev.stoker.operators.batch.Backfill;
import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.model.SlotResult;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.stream.Stream;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MetricGroup;

/**
 * Collects slots until all {@code B} slots of batch (step, rank) are there, back-fills the empty
 * ones ({@link Backfill}), writes the batch file and drops the slots.
 *
 * <p>Slots wait in memory. Before each checkpoint barrier ({@link #flush}) every waiting slot not
 * yet staged is staged as a file ({@link SlotStager}), so a restore finds every slot that arrived
 * before its checkpoint on disk while Flink's state holds none of them; slots that arrived after it
 * are sent again by the restored source. A slot whose batch completes between two checkpoints is
 * never written anywhere but the batch file. Metrics per rank: {@code batchesWritten}, {@code
 * batchesAhead} (batch files written and not yet consumed, counted on disk); overall: {@code
 * batchBytesWritten}, {@code slotsStaged}, {@code slotsBackfilled}, {@code
 * slotsSkippedAlreadyConsumed}; and the trainer's feedback ({@link TrainerFeedbackMetrics}).
 */
final class ArrowBatchWriter implements SinkWriter<SlotResult> {
    private static final long ACK_REFRESH_MS = 50;

    private final ShmLayout layout;
    private final BatchPlan plan;
    private final long firstStep;
    private final BatchFileWriter files;
    private final SlotStager stager;
    private final ArrowMemoryPool memory = new ArrowMemoryPool();
    private final BufferAllocator allocator =
            new RootAllocator(
                    RootAllocator.configBuilder().allocationManagerFactory(memory).build());
    private final MetricGroup metrics;
    private final Counter bytesWritten;
    private final Counter slotsStaged;
    private final Counter slotsBackfilled;
    private final Counter slotsSkipped;
    private final Map<Integer, Counter> batchesWritten = new HashMap<>();

    /** Serves this node's acks to the source's gate on another host, or {@code null}. */
    private final AckServer ackServer;

    /** Slots this writer instance received, by slot index, until their batch is written. */
    private final Map<Long, SlotResult> waiting = new HashMap<>();

    /** The slot indices of {@link #waiting} not staged as files yet. */
    private final Set<Long> unstaged = new HashSet<>();

    /** Per rank: the reader's last acknowledged step as last read, and when (ms). */
    private final Map<Integer, long[]> consumedCache = new HashMap<>();

    ArrowBatchWriter(
            ShmLayout layout,
            BatchPlan plan,
            long firstStep,
            BatchFileWriter files,
            SlotStager stager,
            MetricGroup metrics,
            AckServer ackServer) {
        this.layout = layout;
        this.ackServer = ackServer;
        this.plan = plan;
        this.firstStep = firstStep;
        this.files = files;
        this.stager = stager;
        this.metrics = metrics;
        this.bytesWritten = metrics.counter("batchBytesWritten");
        this.slotsStaged = metrics.counter("slotsStaged");
        this.slotsBackfilled = metrics.counter("slotsBackfilled");
        this.slotsSkipped = metrics.counter("slotsSkippedAlreadyConsumed");
    }

    @Override
    public void write(SlotResult slot, Context context) throws IOException {
        long step = plan.stepOf(slot.sampleIndex);
        int rank = plan.rankOf(slot.sampleIndex);
        Counter written = batchesWritten.computeIfAbsent(rank, this::registerRank);
        if (step <= consumedStep(rank, false)) {
            slotsSkipped.inc(); // replayed after a restore: the trainer already has this batch
            return;
        }
        waiting.put(slot.sampleIndex, slot);
        unstaged.add(slot.sampleIndex);
        TokenizedSample[] slots = completeBatch(step, rank);
        if (slots == null) {
            return;
        }
        TrainingBatch batch = Backfill.fill(step, rank, slots);
        bytesWritten.inc(files.write(batch, allocator));
        if (step <= consumedStep(rank, true)) {
            // the reader acknowledged this step (written before a restore) while we rewrote it
            Files.deleteIfExists(layout.batchFile(step, rank));
        }
        slotsBackfilled.inc(batch.backfilledSlots.length);
        written.inc();
        long first = plan.firstIndex(step, rank);
        for (int k = 0; k < plan.microBatchSize(); k++) {
            waiting.remove(first + k);
            unstaged.remove(first + k);
            // staged at a checkpoint, by an earlier attempt, or not at all
            stager.remove(step, rank, k);
        }
    }

    /** The batch's slots ({@code null} = empty) if every slot is resolved, else {@code null}. */
    private TokenizedSample[] completeBatch(long step, int rank) throws IOException {
        long first = plan.firstIndex(step, rank);
        int b = plan.microBatchSize();
        for (int k = 0; k < b; k++) {
            if (!waiting.containsKey(first + k) && !stager.isStaged(step, rank, k)) {
                return null;
            }
        }
        TokenizedSample[] slots = new TokenizedSample[b];
        for (int k = 0; k < b; k++) {
            SlotResult here = waiting.get(first + k);
            // a slot staged before a restore is read back from its file
            slots[k] = here != null ? here.sample : stager.read(step, rank, k).sample;
        }
        return slots;
    }

    private Counter registerRank(int rank) {
        try {
            // this writer alone writes the rank's files: clear what a crashed attempt half-wrote
            Generations.removeTemporaryFiles(layout.rankDir(rank));
            Generations.removeTemporaryFiles(layout.stagingDir(rank));
        } catch (IOException e) {
            throw new IllegalStateException("Cannot clean " + layout.rankDir(rank), e);
        }
        MetricGroup group = metrics.addGroup("rank", String.valueOf(rank));
        // counted on disk, so the gauge stays right across failovers and rescaling
        group.gauge("batchesAhead", () -> publishedBatches(layout.rankDir(rank)));
        TrainerFeedbackMetrics.register(group, layout.ackFile(rank));
        return group.counter("batchesWritten");
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

    /**
     * Stages the waiting slots that are not files yet. Flink calls this before each checkpoint
     * barrier leaves the writer, and at the end of the input (every batch is complete then).
     *
     * @throws IOException if a slot cannot be written to shared memory (the checkpoint fails)
     */
    @Override
    public void flush(boolean endOfInput) throws IOException {
        for (long index : unstaged) {
            stager.stage(
                    plan.stepOf(index), plan.rankOf(index), plan.slotOf(index), waiting.get(index));
            slotsStaged.inc();
        }
        unstaged.clear();
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
