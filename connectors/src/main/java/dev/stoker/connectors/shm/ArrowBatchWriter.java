package dev.stoker.connectors.shm;

import dev.stoker.operators.batch.Backfill;
import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.metrics.MetricNames;
import dev.stoker.operators.model.SlotResult;
import dev.stoker.operators.model.TokenizedSample;
import java.io.IOException;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
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
 * never written anywhere but the batch file. Metrics: those of {@link RankPublisher} (back-filled
 * rows among them: {@code backfilledSamples}), and {@code slotsStaged}, {@code
 * slotsSkippedAlreadyConsumed}.
 */
final class ArrowBatchWriter implements SinkWriter<SlotResult> {
    private final BatchPlan plan;
    private final RankPublisher publisher;
    private final SlotStager stager;
    private final Counter slotsStaged;
    private final Counter slotsSkipped;

    /** Slots this writer instance received, by slot index, until their batch is written. */
    private final Map<Long, SlotResult> waiting = new HashMap<>();

    /** The slot indices of {@link #waiting} not staged as files yet. */
    private final Set<Long> unstaged = new HashSet<>();

    ArrowBatchWriter(
            BatchPlan plan, RankPublisher publisher, SlotStager stager, MetricGroup metrics) {
        this.plan = plan;
        this.publisher = publisher;
        this.stager = stager;
        this.slotsStaged = metrics.counter(MetricNames.Sink.SLOTS_STAGED);
        this.slotsSkipped = metrics.counter(MetricNames.Sink.SLOTS_SKIPPED_ALREADY_CONSUMED);
    }

    @Override
    public void write(SlotResult slot, Context context) throws IOException {
        long step = plan.stepOf(slot.sampleIndex);
        int rank = plan.rankOf(slot.sampleIndex);
        if (publisher.consumed(step, rank)) {
            slotsSkipped.inc(); // replayed after a restore: the trainer already has this batch
            return;
        }
        waiting.put(slot.sampleIndex, slot);
        unstaged.add(slot.sampleIndex);
        TokenizedSample[] slots = completeBatch(step, rank);
        if (slots == null) {
            return;
        }
        publisher.publish(Backfill.fill(step, rank, slots));
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
        publisher.close();
    }
}
