package dev.stoker.connectors.source;

import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.batch.SampleOrder;
import dev.stoker.operators.model.JsonlLine;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.PriorityQueue;
import java.util.Queue;
import java.util.Set;
import org.apache.flink.connector.base.source.reader.RecordsBySplits;
import org.apache.flink.connector.base.source.reader.RecordsWithSplitIds;
import org.apache.flink.connector.base.source.reader.splitreader.SplitReader;
import org.apache.flink.connector.base.source.reader.splitreader.SplitsChange;

/**
 * Reads the records of one {@link StepSplit} at a time, the lowest step it holds first, on the
 * source's fetcher thread.
 *
 * <p>Before a step's records are read, the {@link PrefetchGate} must allow the step; while it does
 * not, {@link #fetch()} waits on the fetcher thread (polling the readers' acks), never on the task
 * thread, so checkpoints pass. Records come out in slot order, each tagged with its slot index; a
 * padding slot gives a {@link JsonlLine#padding padding marker}.
 */
final class StepSplitReader implements SplitReader<JsonlLine, StepSplit> {
    private static final long GATE_POLL_MS = 20;
    private static final long MAX_WAIT_PER_FETCH_MS = 500;

    private final BatchPlan plan;
    private final boolean shuffle;
    private final long seed;
    private final PrefetchGate gate;
    private final RecordLineReader lines;

    /**
     * The splits held, lowest step first: the lowest step held by any reader is always within the
     * gate, so reading in step order cannot wait on a later step while an earlier one is held.
     */
    private final Queue<StepSplit> splits =
            new PriorityQueue<>(Comparator.comparingLong((StepSplit s) -> s.step));

    private final Object wakeLock = new Object();
    private boolean wokenUp;
    private int orderEpoch = -1;
    private SampleOrder order;

    StepSplitReader(
            BatchPlan plan, boolean shuffle, long seed, PrefetchGate gate, RecordLineReader lines) {
        this.plan = plan;
        this.shuffle = shuffle;
        this.seed = seed;
        this.gate = gate;
        this.lines = lines;
    }

    @Override
    public RecordsWithSplitIds<JsonlLine> fetch() throws IOException {
        StepSplit split = splits.peek();
        if (split == null || !awaitGate(split.step)) {
            return new RecordsBySplits<>(Collections.emptyMap(), Collections.emptySet());
        }
        splits.remove();
        List<JsonlLine> records = new ArrayList<>();
        long first = split.step * plan.globalBatchSize();
        for (long slot = first + split.elementsEmitted;
                slot < first + plan.globalBatchSize();
                slot++) {
            records.add(
                    plan.isPadding(slot)
                            ? JsonlLine.padding(slot)
                            : lines.read(orderOf(slot).recordAt(plan.positionOf(slot)), slot));
        }
        return new RecordsBySplits<>(Map.of(split.splitId(), records), Set.of(split.splitId()));
    }

    private SampleOrder orderOf(long slot) {
        int epoch = plan.epochOf(slot);
        if (epoch != orderEpoch) {
            order = SampleOrder.of(plan.numRecords(), shuffle, seed, epoch);
            orderEpoch = epoch;
        }
        return order;
    }

    /** Waits until the gate allows {@code step}; false if woken up or still closed for a while. */
    private boolean awaitGate(long step) {
        long deadline = System.currentTimeMillis() + MAX_WAIT_PER_FETCH_MS;
        synchronized (wakeLock) {
            while (!gate.allows(step)) {
                long left = deadline - System.currentTimeMillis();
                if (wokenUp || left <= 0) {
                    wokenUp = false;
                    return false;
                }
                try {
                    wakeLock.wait(Math.min(GATE_POLL_MS, left));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return false;
                }
            }
            wokenUp = false;
            return true;
        }
    }

    @Override
    public void handleSplitsChanges(SplitsChange<StepSplit> change) {
        splits.addAll(change.splits());
    }

    @Override
    public void wakeUp() {
        synchronized (wakeLock) {
            wokenUp = true;
            wakeLock.notifyAll();
        }
    }

    @Override
    public void close() {}
}
