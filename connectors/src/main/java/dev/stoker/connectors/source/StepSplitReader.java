package dev.stoker.connectors.source;

import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.batch.MixtureOrder;
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
 * JsonlLine#padding padding marker}. Which record of which source fills a slot is the {@link
 * MixtureOrder}'s pick at the slot's epoch and position.
 */
final class StepSplitReader implements SplitReader<JsonlLine, StepSplit> {
    private final BatchPlan plan;
    private final MixtureOrder order;
    private final RecordLineReader lines;

    /** The splits held, lowest step first. */
    private final Queue<StepSplit> splits =
            new PriorityQueue<>(Comparator.comparingLong((StepSplit s) -> s.step));

    StepSplitReader(BatchPlan plan, MixtureOrder order, RecordLineReader lines) {
        this.plan = plan;
        this.order = order;
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
            if (plan.isPadding(slot)) {
                records.add(JsonlLine.padding(slot));
            } else {
                MixtureOrder.Pick pick = order.pick(plan.epochOf(slot), plan.positionOf(slot));
                records.add(lines.read(pick.source, pick.record, slot));
            }
        }
        return new RecordsBySplits<>(Map.of(split.splitId(), records), Set.of(split.splitId()));
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
