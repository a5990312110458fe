package dev.stoker.operators.accounting;

import java.util.HashMap;
import java.util.Map;
import org.apache.flink.api.common.accumulators.LongCounter;
import org.apache.flink.api.common.functions.RuntimeContext;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MetricGroup;

/**
 * Names of the per-epoch accounting counters. Each is both a Flink metric (live, per subtask) and a
 * Flink accumulator (summed over subtasks by the JobManager, shown in the web UI's job accumulators
 * and returned with the job result), so that the invariant {@code samplesEmitted + deadLetters =
 * recordsRead} can be checked for the whole job, and for each mixture source: every count is also
 * kept per source, as the metric {@code source.<name>.<count>} and the accumulator {@link #ofSource
 * <count>[<name>]}.
 */
public final class Accounting {
    /** Records (non-blank JSONL lines) read by the source and seen by the parser. */
    public static final String RECORDS_READ = "recordsRead";

    /** Samples written into batches. */
    public static final String SAMPLES_EMITTED = "samplesEmitted";

    /** Records rejected with a reason (all stages). */
    public static final String DEAD_LETTERS = "deadLetters";

    /** Tokens of the samples written into batches (before padding). */
    public static final String TOKENS_EMITTED = "tokensEmitted";

    /** Images of the samples written into batches. */
    public static final String IMAGES_EMITTED = "imagesEmitted";

    /** The metric group key of the per-source counts: {@code source.<name>.<count>}. */
    public static final String SOURCE_GROUP = "source";

    private Accounting() {}

    /** The accumulator name of count {@code name} of mixture source {@code source}. */
    public static String ofSource(String name, String source) {
        return name + "[" + source + "]";
    }

    /**
     * One accounting count of a subtask: a metric counter and an accumulator, in total and per
     * mixture source (registered on a source's first record).
     */
    public static final class Count {
        private final RuntimeContext context;
        private final String name;
        private final Counter total;
        private final LongCounter totalAccumulator;
        private final Map<String, Counter> metricBySource = new HashMap<>();
        private final Map<String, LongCounter> accumulatorBySource = new HashMap<>();

        /** Registers count {@code name} on {@code context}'s operator. */
        public Count(RuntimeContext context, String name) {
            this.context = context;
            this.name = name;
            this.total = context.getMetricGroup().counter(name);
            this.totalAccumulator = new LongCounter();
            context.addAccumulator(name, totalAccumulator);
        }

        /**
         * Adds {@code n} for a record of {@code source} ({@code null}: outside a mixture, counted
         * in the total only).
         */
        public void add(String source, long n) {
            total.inc(n);
            totalAccumulator.add(n);
            if (source == null) {
                return;
            }
            Counter metric = metricBySource.get(source);
            if (metric == null) {
                metric = sourceGroup(context, source).counter(name);
                metricBySource.put(source, metric);
                LongCounter accumulator = new LongCounter();
                context.addAccumulator(ofSource(name, source), accumulator);
                accumulatorBySource.put(source, accumulator);
            }
            metric.inc(n);
            accumulatorBySource.get(source).add(n);
        }
    }

    /** The operator's metric group of mixture source {@code source}. */
    static MetricGroup sourceGroup(RuntimeContext context, String source) {
        return context.getMetricGroup().addGroup(SOURCE_GROUP, source);
    }
}
