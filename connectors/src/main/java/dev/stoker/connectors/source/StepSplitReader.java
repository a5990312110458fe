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
 * <p>Every split it holds is within the {@link PrefetchGate}: the enumerator hands out no other.
 * Records come out in slot order, each tagged with its slot index; a padding slot gives a {@link
 * JsonlLine#padding padding marker}.
 */
final class StepSplitReader implements SplitReader<JsonlLine, StepSplit> {
    private final BatchPlan plan;
    private final boolean shuffle;
    private final long seed;
    private final RecordLineReader lines;

    /** The splits held, lowest step first. */
    private final Queue<StepSplit> splits =
            new PriorityQueue<>(Comparator.comparingLong((StepSplit s) -> s.step));

    private int orderEpoch = -1;
    private SampleOrder order;

    StepSplitReader(BatchPlan plan, boolean shuffle, long seed, RecordLineReader lines) {
        this.plan = plan;
        this.shuffle = shuffle;
        this.seed = seed;
        this.lines = lines;
    }

    @Override
    public RecordsWithSplitIds<JsonlLine> fetch() throws IOException {
        StepSplit split = splits.peek();
        if (split == null) {
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

    @Override
    public void handleSplitsChanges(SplitsChange<StepSplit> change) {
        splits.addAll(change.splits());
    }

    @Override
    public void wakeUp() {
        // fetch() never blocks
    }

    @Override
    public void close() {}
}
