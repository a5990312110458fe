package dev.stoker.connectors.source;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
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
 *
 * <p>Each reader holds {@value #SPLITS_HELD} splits: it asks for that many when it starts (less the
 * splits it was restored with) and for one more per finished split, so a reader's requests that
 * found no step left tell how many of its splits it has finished. The end of the input is signalled
 * to the readers only once every reader holds none: until then a finished reader stays up (idle),
 * takes steps a failed reader gives back, and takes part in savepoints while the others wait at the
 * prefetch gate.
 */
final class StepEnumerator implements SplitEnumerator<StepSplit, StepEnumeratorState> {
    /**
     * Splits a reader holds: the one being read and the next, whose records are then ready when the
     * first is done. With one, each step waited for a request's round trip to the enumerator and
     * the task idled meanwhile. The prefetch gate still decides when a held step is read.
     */
    static final int SPLITS_HELD = 2;

    private static final Logger LOG = LoggerFactory.getLogger(StepEnumerator.class);

    private final SplitEnumeratorContext<StepSplit> context;
    private final String generation;
    private final long endStep;
    private final SortedSet<Long> returned;

    /** Per reader, its requests that found no step left. */
    private final Map<Integer, Integer> unanswered = new HashMap<>();

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
        unanswered.merge(subtaskId, 1, Integer::sum);
        answer();
    }

    @Override
    public void addSplitsBack(List<StepSplit> splits, int subtaskId) {
        // A returned split restarts at its first record: the reader's progress in it was not
        // checkpointed together with this assignment. The failed reader asks again when it is back.
        for (StepSplit split : splits) {
            returned.add(split.step);
        }
        unanswered.remove(subtaskId);
        answer();
    }

    /** Hands steps to the readers that asked, or signals the end once no reader holds a split. */
    private void answer() {
        for (Map.Entry<Integer, Integer> e : unanswered.entrySet()) {
            while (e.getValue() > 0 && (!returned.isEmpty() || nextStep < endStep)) {
                long step = returned.isEmpty() ? nextStep++ : returned.first();
                returned.remove(step);
                context.assignSplit(new StepSplit(generation, step, 0), e.getKey());
                e.setValue(e.getValue() - 1);
            }
        }
        int readers = context.currentParallelism();
        for (int subtask = 0; subtask < readers; subtask++) {
            if (unanswered.getOrDefault(subtask, 0) < SPLITS_HELD) {
                return;
            }
        }
        for (int subtask = 0; subtask < readers; subtask++) {
            context.signalNoMoreSplits(subtask);
        }
        unanswered.clear();
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
