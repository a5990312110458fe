package dev.stoker.connectors.source;

import static org.assertj.core.api.Assertions.assertThat;

import dev.stoker.connectors.feedback.AckFeed;
import java.util.List;
import java.util.TreeSet;
import org.apache.flink.connector.testutils.source.reader.TestingSplitEnumeratorContext;
import org.junit.jupiter.api.Test;

class StepEnumeratorTest {
    private static final long RECORDS_PER_STEP = 4;
    private final TestingSplitEnumeratorContext<StepSplit> context =
            new TestingSplitEnumeratorContext<>(2);

    /**
     * Acks a test sets: what the trainers have consumed, per rank. Static, since the enumerator
     * polls its own copy of the feed.
     */
    private static final class SetAcks implements AckFeed {
        static long[] consumed;
        static int polls;

        @Override
        public long[] poll() {
            polls++;
            return consumed.clone();
        }

        @Override
        public long pollPeriodMs() {
            return 20;
        }

        @Override
        public void close() {}
    }

    private final SetAcks acks = new SetAcks();

    StepEnumeratorTest() {
        SetAcks.consumed = new long[] {-1, -1};
        SetAcks.polls = 0;
    }

    private StepEnumerator enumerator(long endStep) {
        return enumerator(endStep, 0);
    }

    private StepEnumerator enumerator(long endStep, int depth) {
        context.registerReader(0, "localhost");
        context.registerReader(1, "localhost");
        StepEnumerator e =
                new StepEnumerator(
                        context,
                        new PrefetchGate(acks, "g1", depth, 0),
                        0,
                        endStep,
                        RECORDS_PER_STEP,
                        new TreeSet<>());
        e.start();
        return e;
    }

    /** One round of the enumerator's ack poll and its handler. */
    private void pollAcks() {
        context.triggerAllActions(); // the periodic poll, then its handler
    }

    /** {@code times} split requests from {@code reader}. */
    private static void ask(StepEnumerator e, int reader, int times) {
        for (int i = 0; i < times; i++) {
            e.handleSplitRequest(reader, "localhost");
        }
    }

    private List<Long> steps(int reader) {
        var state = context.getSplitAssignments().get(reader);
        return state == null
                ? List.of()
                : state.getAssignedSplits().stream().map(s -> s.step).toList();
    }

    private boolean ended(int reader) {
        var state = context.getSplitAssignments().get(reader);
        return state != null && state.hasReceivedNoMoreSplitsSignal();
    }

    @Test
    void handsOutStepsLowestFirstToWhoeverAsks() {
        StepEnumerator e = enumerator(10);
        for (int i = 0; i < StepEnumerator.SPLITS_HELD; i++) {
            ask(e, 0, 1);
            ask(e, 1, 1);
        }
        assertThat(steps(0)).containsExactly(0L, 2L);
        assertThat(steps(1)).containsExactly(1L, 3L);
    }

    @Test
    void endIsSignalledOnlyWhenNoReaderHoldsASplit() {
        StepEnumerator e = enumerator(3);
        ask(e, 0, 2);
        ask(e, 1, 2); // no step left for the second: reader 1 holds step 2
        // reader 0 finishes steps 0 and 1 and asks twice: it holds nothing, reader 1 still does
        ask(e, 0, 2);
        assertThat(steps(0)).containsExactly(0L, 1L);
        assertThat(steps(1)).containsExactly(2L);
        assertThat(ended(0)).as("reader 0 stays up while reader 1 holds step 2").isFalse();
        // reader 1 finishes step 2
        ask(e, 1, 1);
        assertThat(ended(0)).isTrue();
        assertThat(ended(1)).isTrue();
    }

    @Test
    void handsOutOnlyStepsWithinTheBoundAndOpensWithTheAcks() {
        StepEnumerator e = enumerator(10, 2);
        ask(e, 0, 2);
        ask(e, 1, 2);
        // nothing acknowledged: steps 0 .. depth - 1 only
        assertThat(steps(0)).containsExactly(0L, 1L);
        assertThat(steps(1)).isEmpty();
        pollAcks();
        assertThat(steps(1)).as("no ack yet").isEmpty();
        // rank 0 consumed step 0, rank 1 nothing: the slowest rank bounds the gate
        SetAcks.consumed = new long[] {0, -1};
        pollAcks();
        assertThat(steps(1)).isEmpty();
        SetAcks.consumed = new long[] {3, 0};
        pollAcks();
        assertThat(steps(1)).containsExactly(2L);
        // reader 0 finishes its two steps: it gets none beyond min(consumed) + depth = 2
        ask(e, 0, 2);
        assertThat(steps(0)).containsExactly(0L, 1L);
        assertThat(ended(0)).as("steps are left: the end is not signalled").isFalse();
        SetAcks.consumed = new long[] {5, 5};
        pollAcks();
        // the reader holding fewer splits first, ties in turn: 3 to reader 0 (it holds none)
        assertThat(steps(0)).containsExactly(0L, 1L, 3L, 5L);
        assertThat(steps(1)).containsExactly(2L, 4L);
        assertThat(SetAcks.polls).isEqualTo(4);
    }

    @Test
    void aGateOpeningOneStepAtATimeAlternatesTheReaders() {
        StepEnumerator e = enumerator(20, 1);
        ask(e, 0, 2);
        ask(e, 1, 2);
        assertThat(steps(0)).containsExactly(0L);
        ask(e, 0, 1); // reader 0 read step 0 and asks for another: both hold none
        for (long consumed = 0; consumed < 6; consumed++) {
            SetAcks.consumed = new long[] {consumed, consumed};
            pollAcks();
            // the reader that got the step finishes it and asks for another
            int got = steps(0).contains(consumed + 1) ? 0 : 1;
            ask(e, got, 1);
        }
        assertThat(steps(0)).containsExactly(0L, 2L, 4L, 6L);
        assertThat(steps(1)).containsExactly(1L, 3L, 5L);
    }

    @Test
    void aGateOpeningWhileAReaderIsNotRegisteredGivesItNothing() {
        context.registerReader(0, "localhost");
        StepEnumerator e =
                new StepEnumerator(
                        context,
                        new PrefetchGate(acks, "g1", 1, 0),
                        0,
                        10,
                        RECORDS_PER_STEP,
                        new TreeSet<>());
        e.start();
        // reader 1's requests arrive, but it is not registered (it failed, or is restarting)
        ask(e, 1, 2);
        SetAcks.consumed = new long[] {0, 0};
        pollAcks();
        assertThat(steps(1)).isEmpty();
        ask(e, 0, 2);
        assertThat(steps(0)).containsExactly(0L, 1L);
        context.registerReader(1, "localhost");
        SetAcks.consumed = new long[] {1, 1};
        pollAcks();
        assertThat(steps(1)).containsExactly(2L);
    }

    /** The {@link Backlog} shares sent to {@code reader}, in order. */
    private List<Long> backlogs(int reader) {
        return context.getSentEvents().getOrDefault(reader, List.of()).stream()
                .map(event -> ((Backlog) event).records)
                .toList();
    }

    /**
     * The readers' {@code pendingRecords} shares: the records of the steps the gate allows and no
     * reader holds, split evenly, sent when they change, and again to a reader that registers
     * (anew). Steps given back by a failed reader count again; the end of the run caps the gate.
     */
    @Test
    void readersLearnTheirShareOfTheAllowedStepsNoReaderHolds() {
        StepEnumerator e = enumerator(6, 3);
        e.addReader(1); // the last of the two registers
        // steps 0 .. 2 allowed, none held: 12 records
        assertThat(backlogs(0)).containsExactly(6L);
        assertThat(backlogs(1)).containsExactly(6L);
        ask(e, 0, 2); // steps 0, then 1 to reader 0: step 2 left
        assertThat(backlogs(0)).containsExactly(6L, 4L, 2L);
        assertThat(backlogs(1)).containsExactly(6L, 4L, 2L);
        ask(e, 1, 1); // step 2 to reader 1: none left
        assertThat(backlogs(0)).containsExactly(6L, 4L, 2L, 0L);
        SetAcks.consumed = new long[] {1, 1}; // the gate allows steps 3 and 4 too
        pollAcks();
        assertThat(backlogs(0)).containsExactly(6L, 4L, 2L, 0L, 4L);
        ask(e, 1, 1); // step 3 to reader 1: step 4 left
        assertThat(backlogs(0)).containsExactly(6L, 4L, 2L, 0L, 4L, 2L);
        assertThat(backlogs(1)).containsExactly(6L, 4L, 2L, 0L, 4L, 2L);
        // reader 1 fails holding steps 2 and 3: they count again, with step 4 12 records
        e.addSplitsBack(List.of(new StepSplit("g1", 2, 0), new StepSplit("g1", 3, 0)), 1);
        assertThat(backlogs(0)).endsWith(2L, 6L);
        e.addReader(1); // it comes back: it hears its share again
        assertThat(backlogs(1)).endsWith(2L, 6L, 6L);
        SetAcks.consumed = new long[] {9, 9}; // beyond the end: steps 2 .. 5 are left
        pollAcks();
        assertThat(backlogs(0)).endsWith(6L, 8L);
        assertThat(backlogs(1)).endsWith(6L, 8L);
    }

    @Test
    void anUnboundedGateNeverPolls() {
        StepEnumerator e = enumerator(10, 0);
        ask(e, 0, 2);
        pollAcks();
        assertThat(steps(0)).containsExactly(0L, 1L);
        assertThat(SetAcks.polls).isZero();
    }

    @Test
    void stepsOfAFailedReaderGoToAWaitingReaderFirst() {
        StepEnumerator e = enumerator(4);
        ask(e, 0, 2);
        ask(e, 1, 2);
        // reader 0 finishes steps 0 and 1; no step is left for it
        ask(e, 0, 2);
        // reader 1 fails holding steps 2 and 3: reader 0 takes them back, lowest first
        e.addSplitsBack(List.of(new StepSplit("g1", 3, 0), new StepSplit("g1", 2, 1)), 1);
        assertThat(steps(0)).containsExactly(0L, 1L, 2L, 3L);
        assertThat(ended(0)).isFalse();
        // reader 1 comes back and asks for its two splits: none left, but reader 0 holds two
        ask(e, 1, 2);
        assertThat(ended(1)).isFalse();
        ask(e, 0, 2);
        assertThat(ended(0)).isTrue();
        assertThat(ended(1)).isTrue();
    }
}
