package dev.stoker.connectors.source;

import dev.stoker.connectors.feedback.AckFeed;
import dev.stoker.operators.metrics.MetricNames;
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
 * Hands out one {@link StepSplit} per global step, lowest step first, to the readers that ask.
 * Steps a failed reader had not finished come back through {@link #addSplitsBack} and are handed
 * out again before newer ones, so the output never depends on which reader reads what.
 *
 * <p>Each reader holds {@value #SPLITS_HELD} splits: it asks for that many when it starts (less the
 * splits it was restored with) and for one more per finished split, so a reader's requests that
 * found no step left tell how many of its splits it has finished. The end of the input is signalled
 * to the readers only once every reader holds none: until then a finished reader stays up (idle),
 * takes steps a failed reader gives back, and takes part in savepoints while the others wait at the
 * prefetch gate.
 *
 * <p>The enumerator is the {@link PrefetchGate}: it polls the gate's {@link AckFeed} every {@link
 * AckFeed#pollPeriodMs} ms (on its worker thread, through {@link SplitEnumeratorContext#callAsync})
 * and hands out a step only when it is within the bound; a request beyond it waits until an ack
 * opens the gate. Metrics (enumerator group): {@code prefetchAllowedStep}, the highest step the
 * gate allows now, {@code ackedStep}, the lowest step acknowledged by every rank, and the standard
 * {@code unassignedSplits}: the steps the gate allows that no reader holds yet. Their records are
 * spread over the readers ({@link Backlog} events), each of which reports its share in its {@code
 * pendingRecords}.
 */
final class StepEnumerator implements SplitEnumerator<StepSplit, StepEnumeratorState> {
    /**
     * Splits a reader holds: the one being read and the next, whose records are then ready when the
     * first is done. With one, each step waited for a request's round trip to the enumerator and
     * the task idled meanwhile. The prefetch gate decides when a step is handed out.
     */
    static final int SPLITS_HELD = 2;

    private static final Logger LOG = LoggerFactory.getLogger(StepEnumerator.class);

    private final SplitEnumeratorContext<StepSplit> context;
    private final PrefetchGate gate;
    private final AckFeed feed;
    private final String generation;
    private final long endStep;
    private final long recordsPerStep;
    private final SortedSet<Long> returned;

    /** The reader that got the last step: ties go to the readers after it. */
    private int lastAssigned = -1;

    /** Per reader, its requests that found no step left (or none the gate allowed). */
    private final Map<Integer, Integer> unanswered = new HashMap<>();

    private long nextStep;

    /** The highest step the gate allows, from the last poll. */
    private long allowedStep;

    /** The lowest step every rank has acknowledged, from the last poll. */
    private long ackedStep;

    /** Per reader, the {@link Backlog} share last sent to it. */
    private final Map<Integer, Long> backlogSent = new HashMap<>();

    StepEnumerator(
            SplitEnumeratorContext<StepSplit> context,
            PrefetchGate gate,
            long nextStep,
            long endStep,
            long recordsPerStep,
            SortedSet<Long> returned) {
        this.context = context;
        this.gate = gate;
        this.feed = gate.isBounded() ? gate.openFeed() : null;
        this.generation = gate.generation();
        this.allowedStep = gate.initialAllowedStep();
        this.ackedStep = gate.firstStep() - 1;
        this.nextStep = nextStep;
        this.endStep = endStep;
        this.recordsPerStep = recordsPerStep;
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
        context.metricGroup().gauge(MetricNames.Source.PREFETCH_ALLOWED_STEP, () -> allowedStep);
        context.metricGroup().gauge(MetricNames.Source.ACKED_STEP, () -> ackedStep);
        context.metricGroup().setUnassignedSplitsGauge(this::unassignedAllowedSteps);
        if (gate.isBounded()) {
            context.callAsync(feed::poll, this::onAcks, 0, feed.pollPeriodMs());
        }
    }

    /** A poll's result, on the enumerator's thread: widen the gate and answer waiting readers. */
    private void onAcks(long[] consumed, Throwable error) {
        if (error != null) {
            LOG.warn("Polling the acks failed; the gate stays where it was", error);
            return;
        }
        long min = Long.MAX_VALUE;
        for (long step : consumed) {
            min = Math.min(min, step);
        }
        ackedStep = Math.max(ackedStep, min);
        long allowed = gate.highestAllowedStep(consumed);
        if (allowed > allowedStep) {
            allowedStep = allowed;
            answer();
        }
    }

    /** The steps the gate allows that no reader holds yet. */
    private long unassignedAllowedSteps() {
        long last = Math.min(allowedStep, endStep - 1);
        return Math.max(0, last - nextStep + 1) + returned.headSet(last + 1).size();
    }

    /**
     * Sends each registered reader whose share changed its share of the records of {@link
     * #unassignedAllowedSteps}: an even split, the remainder to the lowest subtasks.
     */
    private void sendBacklog() {
        long records = unassignedAllowedSteps() * recordsPerStep;
        int readers = context.currentParallelism();
        for (int reader : context.registeredReaders().keySet()) {
            long share = records / readers + (reader < records % readers ? 1 : 0);
            Long sent = backlogSent.put(reader, share);
            if (sent == null || sent != share) {
                context.sendEventToSourceReader(reader, new Backlog(share));
            }
        }
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

    /**
     * Hands the steps the gate allows to the readers that asked, the one holding the fewest splits
     * first (ties in turn), or signals the end once no step is left and no reader holds a split.
     * While the gate opens one step at a time (the trainer is the bottleneck), the steps so
     * alternate over the readers, and over the parallel chains after them, instead of all going to
     * one. Then tells the readers their shares of what the gate allows and is left unassigned.
     */
    private void answer() {
        assign();
        sendBacklog();
    }

    private void assign() {
        while (true) {
            long step = returned.isEmpty() ? nextStep : returned.first();
            if (step >= endStep || step > allowedStep) {
                break;
            }
            int reader = neediestReader();
            if (reader < 0) {
                break;
            }
            if (returned.isEmpty()) {
                nextStep++;
            } else {
                returned.remove(step);
            }
            context.assignSplit(new StepSplit(generation, step, 0), reader);
            unanswered.merge(reader, -1, Integer::sum);
            lastAssigned = reader;
        }
        if (!returned.isEmpty() || nextStep < endStep) {
            return;
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

    /**
     * The registered reader with the most unanswered requests (ties: the first after the last one
     * served). A failed reader stays out until it registers again: an ack poll can open the gate
     * after a reader failed and before its splits came back, and a split cannot be assigned to it.
     */
    private int neediestReader() {
        int readers = context.currentParallelism();
        Map<Integer, ?> registered = context.registeredReaders();
        int best = -1;
        int most = 0;
        for (int i = 1; i <= readers; i++) {
            int reader = Math.floorMod(lastAssigned + i, readers);
            int waiting = registered.containsKey(reader) ? unanswered.getOrDefault(reader, 0) : 0;
            if (waiting > most) {
                best = reader;
                most = waiting;
            }
        }
        return best;
    }

    @Override
    public void addReader(int subtaskId) {
        // Readers ask for splits themselves; a (re)started one learns its share of the backlog.
        backlogSent.remove(subtaskId);
        sendBacklog();
    }

    @Override
    public StepEnumeratorState snapshotState(long checkpointId) {
        return new StepEnumeratorState(generation, nextStep, returned);
    }

    @Override
    public void close() {
        if (feed != null) {
            feed.close();
        }
    }
}
