package dev.stoker.operators.accounting;

import java.util.HashMap;
import java.util.Map;
import java.util.function.BiConsumer;
import java.util.function.LongConsumer;
import org.apache.flink.api.common.accumulators.LongCounter;
import org.apache.flink.api.common.functions.RuntimeContext;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MetricGroup;

/**
 * Names of the per-epoch accounting counters. Each count of an operator is both a Flink metric
 * (live, per subtask) and a Flink accumulator (summed over subtasks by the JobManager, shown in the
 * web UI's job accumulators and returned with the job result), so that the invariant {@code
 * samplesEmitted + deadLetters = recordsRead} can be checked for the whole job, and for each
 * mixture source: every count is also kept per source, as the metric {@code source.<name>.<count>}
 * and the accumulator {@link #ofSource <count>[<name>]}. The sink's counts ({@link
 * #PADDING_TOKENS}, {@link #BACKFILLED_SAMPLES}) are metrics only: a Flink sink writer cannot add
 * accumulators.
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

    /**
     * Pad tokens written by the sink, in tokens: per row of a batch, the batch's padded length
     * {@code L} minus the row's tokens. Per source, an unpacked row counts for its sample's source
     * and a packed row's padding tail for the source of the row's last sample (the one the tail
     * follows). Metrics only.
     */
    public static final String PADDING_TOKENS = "paddingTokens";

    /**
     * Rows (packed: samples) the sink wrote as a copy of another sample, in samples: the batch's
     * back-filled slots ({@code stoker.backfilled_slots}), counted for the copied sample's source.
     * Metrics only.
     */
    public static final String BACKFILLED_SAMPLES = "backfilledSamples";

    /** The metric group key of the per-source counts: {@code source.<name>.<count>}. */
    public static final String SOURCE_GROUP = "source";

    private Accounting() {}

    /** The accumulator name of count {@code name} of mixture source {@code source}. */
    public static String ofSource(String name, String source) {
        return name + "[" + source + "]";
    }

    /**
     * One accounting count of a subtask: a metric counter and (unless metrics only) an accumulator,
     * in total and per mixture source (registered on a source's first record).
     */
    public static final class Count {
        private final MetricGroup group;
        private final String name;

        /** Adds each accumulator under its name; {@code null} for metrics only. */
        private final BiConsumer<String, LongCounter> accumulators;

        private final LongConsumer total;
        private final Map<String, LongConsumer> bySource = new HashMap<>();

        /** Registers count {@code name} on {@code context}'s operator: metrics and accumulators. */
        public Count(RuntimeContext context, String name) {
            this(context.getMetricGroup(), name, context::addAccumulator);
        }

        /**
         * Registers count {@code name} in {@code group} as metrics only, where no accumulator can
         * be added (a sink writer).
         */
        public Count(MetricGroup group, String name) {
            this(group, name, null);
        }

        private Count(
                MetricGroup group, String name, BiConsumer<String, LongCounter> accumulators) {
            this.group = group;
            this.name = name;
            this.accumulators = accumulators;
            this.total = register(group, name);
        }

        /**
         * Adds {@code n} for a record of {@code source} ({@code null}: outside a mixture, counted
         * in the total only).
         */
        public void add(String source, long n) {
            total.accept(n);
            if (source != null) {
                bySource.computeIfAbsent(
                                source, s -> register(sourceGroup(group, s), ofSource(name, s)))
                        .accept(n);
            }
        }

        /** The counter {@code name} in {@code metrics}, and its accumulator unless metrics only. */
        private LongConsumer register(MetricGroup metrics, String accumulatorName) {
            Counter metric = metrics.counter(name);
            if (accumulators == null) {
                return metric::inc;
            }
            LongCounter accumulator = new LongCounter();
            accumulators.accept(accumulatorName, accumulator);
            return n -> {
                metric.inc(n);
                accumulator.add(n);
            };
        }
    }

    /** The metric group of mixture source {@code source} in {@code operator}'s group. */
    static MetricGroup sourceGroup(MetricGroup operator, String source) {
        return operator.addGroup(SOURCE_GROUP, source);
    }
}
