package dev.stoker.connectors.source;

import java.util.List;
import java.util.SortedSet;
import java.util.TreeSet;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Hands out one {@link StepSplit} per global step, lowest step first, to whichever reader asks.
 * Steps a failed reader had not finished come back through {@link #addSplitsBack} and are handed
 * out again before newer ones, so the output never depends on which reader reads what.
 */
final class StepEnumerator implements SplitEnumerator<StepSplit, StepEnumeratorState> {
    private static final Logger LOG = LoggerFactory.getLogger(StepEnumerator.class);

    private final SplitEnumeratorContext<StepSplit> context;
    private final String generation;
    private final long endStep;
    private final SortedSet<Long> returned;
    private long nextStep;

    StepEnumerator(
            SplitEnumeratorContext<StepSplit> context,
            String generation,
            long nextStep,
            long endStep,
            SortedSet<Long> returned) {
        this.context = context;
        this.generation = generation;
        this.nextStep = nextStep;
        this.endStep = endStep;
        this.returned = new TreeSet<>(returned);
    }

    @Override
    public void start() {
        LOG.info(
                "Generation {}: steps {} .. {} to produce ({} handed back)",
                generation,
                nextStep,
                endStep - 1,
                returned.size());
    }

    @Override
    public void handleSplitRequest(int subtaskId, String requesterHostname) {
        Long step = null;
        if (!returned.isEmpty()) {
            step = returned.first();
            returned.remove(step);
        } else if (nextStep < endStep) {
            step = nextStep++;
        }
        if (step == null) {
            context.signalNoMoreSplits(subtaskId);
        } else {
            context.assignSplit(new StepSplit(generation, step, 0), subtaskId);
        }
    }

    @Override
    public void addSplitsBack(List<StepSplit> splits, int subtaskId) {
        // A returned split restarts at its first record: the reader's progress in it was not
        // checkpointed together with this assignment.
        for (StepSplit split : splits) {
            returned.add(split.step);
        }
    }

    @Override
    public void addReader(int subtaskId) {
        // Readers ask for splits themselves.
    }

    @Override
    public StepEnumeratorState snapshotState(long checkpointId) {
        return new StepEnumeratorState(generation, nextStep, returned);
    }

    @Override
    public void close() {}
}
