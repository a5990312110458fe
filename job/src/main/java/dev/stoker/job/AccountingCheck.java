package dev.stoker.job;

import dev.stoker.operators.accounting.Accounting;
import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.batch.MixtureOrder;
import java.util.StringJoiner;
import org.apache.flink.api.common.JobExecutionResult;

/**
 * Checks the accounting invariant of a finished run from the job's accumulators: {@code
 * samplesEmitted + deadLetters = recordsRead = records of the steps the run produced}, in total and
 * for each mixture source. Valid for a run without failover (Flink keeps the accumulators of the
 * last attempt only).
 */
final class AccountingCheck {
    private AccountingCheck() {}

    /**
     * @return a one-line summary of the counts
     * @throws IllegalStateException naming the counts if the invariant does not hold
     */
    static String verify(JobExecutionResult result, BatchPlan plan, long firstStep) {
        long read = count(result, Accounting.RECORDS_READ);
        long emitted = count(result, Accounting.SAMPLES_EMITTED);
        long dead = count(result, Accounting.DEAD_LETTERS);
        String summary = summary(result, plan, firstStep);
        if (read != plan.recordsFrom(firstStep) || emitted + dead != read) {
            throw new IllegalStateException("Accounting invariant violated: " + summary);
        }
        return summary;
    }

    /**
     * The invariant per mixture source for a whole run (from its plan's first step): each source's
     * records read are {@code epochs * C_s} (its per-epoch count; for a plan that starts part-way
     * through epoch {@code e0}, the source's records in the rest of that epoch plus {@code (epochs
     * - e0 - 1) * C_s}) and its samples + dead letters are its records read.
     *
     * @return one summary per source, e.g. {@code "ocr: planned=40, read=40, samples=39, dead
     *     letters=1"}, joined by {@code "; "}
     * @throws IllegalStateException naming the source and counts if the invariant does not hold
     */
    static String verifySources(JobExecutionResult result, BatchPlan plan, MixtureOrder order) {
        StringJoiner all = new StringJoiner("; ");
        long[] firstEpoch = new long[order.numSources()];
        for (int s = 0; s < order.numSources() && plan.firstEpochPosition() == 0; s++) {
            firstEpoch[s] = order.countPerEpoch(s);
        }
        for (long p = plan.firstEpochPosition(); p > 0 && p < plan.numRecords(); p++) {
            firstEpoch[order.pick(plan.firstEpoch(), p).source]++;
        }
        int fullEpochs = Math.max(0, plan.epochs() - plan.firstEpoch() - 1);
        for (int s = 0; s < order.numSources(); s++) {
            String name = order.name(s);
            long planned =
                    plan.firstEpoch() < plan.epochs()
                            ? firstEpoch[s] + fullEpochs * order.countPerEpoch(s)
                            : 0;
            long read = count(result, Accounting.ofSource(Accounting.RECORDS_READ, name));
            long emitted = count(result, Accounting.ofSource(Accounting.SAMPLES_EMITTED, name));
            long dead = count(result, Accounting.ofSource(Accounting.DEAD_LETTERS, name));
            String line =
                    String.format(
                            "%s: planned=%d, read=%d, samples=%d, dead letters=%d",
                            name, planned, read, emitted, dead);
            if (read != planned || emitted + dead != read) {
                throw new IllegalStateException("Accounting invariant violated for source " + line);
            }
            all.add(line);
        }
        return all.toString();
    }

    /**
     * Whether the run's source read fewer records than its steps hold: it ended before its last
     * step, as a run stopped with a savepoint does (its records in flight are in the savepoint, so
     * the invariant is not checked for it).
     */
    static boolean stoppedEarly(JobExecutionResult result, BatchPlan plan, long firstStep) {
        return count(result, Accounting.RECORDS_READ) < plan.recordsFrom(firstStep);
    }

    /** The counts, e.g. {@code "records in steps 0..9=38, read=38, samples emitted=37, ..."}. */
    static String summary(JobExecutionResult result, BatchPlan plan, long firstStep) {
        return String.format(
                "records in steps %d..%d=%d, read=%d, samples emitted=%d, dead letters=%d",
                firstStep,
                plan.numSteps() - 1,
                plan.recordsFrom(firstStep),
                count(result, Accounting.RECORDS_READ),
                count(result, Accounting.SAMPLES_EMITTED),
                count(result, Accounting.DEAD_LETTERS));
    }

    private static long count(JobExecutionResult result, String name) {
        Long value = result.getAccumulatorResult(name);
        return value == null ? 0 : value;
    }
}
