package dev.stoker.operators.accounting;

import org.apache.flink.api.common.accumulators.LongCounter;
import org.apache.flink.api.common.functions.RuntimeContext;

/**
 * Names of the per-epoch accounting counters. Each is both a Flink metric (live, per subtask) and a
 * Flink accumulator (summed over subtasks by the JobManager, shown in the web UI's job accumulators
 * and returned with the job result), so that the invariant {@code samplesEmitted + deadLetters =
 * recordsRead} can be checked for the whole job.
 */
public final class Accounting {
    /** Records (non-blank JSONL lines) read by the source and seen by the parser. */
    public static final String RECORDS_READ = "recordsRead";

    /** Samples written into batches. */
    public static final String SAMPLES_EMITTED = "samplesEmitted";

    /** Records rejected with a reason (all stages). */
    public static final String DEAD_LETTERS = "deadLetters";

    private Accounting() {}

    /** Registers and returns the accumulator {@code name} of this subtask. */
    public static LongCounter accumulator(RuntimeContext context, String name) {
        LongCounter counter = new LongCounter();
        context.addAccumulator(name, counter);
        return counter;
    }
}
