package dev.stoker.connectors.fetch;

import dev.stoker.operators.model.DeadLetter;
import dev.stoker.operators.model.FetchedRecord;
import dev.stoker.operators.model.SftRecord;
import java.util.Collection;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.JobInfoImpl;
import org.apache.flink.api.common.TaskInfoImpl;
import org.apache.flink.api.common.functions.DefaultOpenContext;
import org.apache.flink.api.common.functions.util.RuntimeUDFContext;
import org.apache.flink.metrics.CharacterFilter;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.Gauge;
import org.apache.flink.metrics.Histogram;
import org.apache.flink.metrics.Meter;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.groups.OperatorIOMetricGroup;
import org.apache.flink.metrics.groups.OperatorMetricGroup;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.metrics.testutils.MetricListener;
import org.apache.flink.streaming.api.functions.async.CollectionSupplier;
import org.apache.flink.streaming.api.functions.async.ResultFuture;
import org.apache.flink.streaming.api.functions.async.RichAsyncFunction;
import org.apache.flink.types.Either;

/**
 * Runs a fetch function outside an operator: Flink's own {@link RuntimeUDFContext} for one subtask
 * attempt of a job, whose metrics a {@link MetricListener} records, and each record's result.
 */
public final class FetchFunctionContext {
    /** The job the function runs in. */
    public final JobID job = new JobID();

    /** What the function registered on its metric group. */
    public final MetricListener metrics = new MetricListener();

    private final int subtask;
    private final int attempt;

    /**
     * @param subtask the subtask index (of 2)
     * @param attempt the attempt number
     */
    public FetchFunctionContext(int subtask, int attempt) {
        this.subtask = subtask;
        this.attempt = attempt;
    }

    /** Gives {@code function} this context and opens it. */
    public void open(RichAsyncFunction<SftRecord, Either<DeadLetter, FetchedRecord>> function)
            throws Exception {
        function.setRuntimeContext(
                new RuntimeUDFContext(
                        new JobInfoImpl(job, "spill-test"),
                        new TaskInfoImpl("fetch-images", 2, subtask, 2, attempt),
                        getClass().getClassLoader(),
                        new ExecutionConfig(),
                        new HashMap<>(),
                        new HashMap<>(),
                        new ListenedOperatorGroup(metrics.getMetricGroup())));
        function.open(DefaultOpenContext.INSTANCE);
    }

    /** Fetches {@code record} and waits (at most 30 s) for its one result. */
    public static Either<DeadLetter, FetchedRecord> fetch(
            RichAsyncFunction<SftRecord, Either<DeadLetter, FetchedRecord>> function,
            SftRecord record)
            throws Exception {
        Result result = new Result();
        function.asyncInvoke(record, result);
        Collection<Either<DeadLetter, FetchedRecord>> out = result.future.get(30, TimeUnit.SECONDS);
        return out.iterator().next();
    }

    /** The value of the counter {@code name} of the function's metric group. */
    public long counter(String... path) {
        return metrics.getCounter(path).map(Counter::getCount).orElseThrow();
    }

    /** One record's result, as the async operator would receive it. */
    public static final class Result implements ResultFuture<Either<DeadLetter, FetchedRecord>> {
        public final CompletableFuture<Collection<Either<DeadLetter, FetchedRecord>>> future =
                new CompletableFuture<>();

        @Override
        public void complete(Collection<Either<DeadLetter, FetchedRecord>> result) {
            future.complete(result);
        }

        @Override
        public void completeExceptionally(Throwable error) {
            future.completeExceptionally(error);
        }

        @Override
        public void complete(CollectionSupplier<Either<DeadLetter, FetchedRecord>> supplier) {
            try {
                future.complete(supplier.get());
            } catch (Exception e) {
                future.completeExceptionally(e);
            }
        }
    }

    /** An operator metric group that registers its metrics in a {@link MetricListener}'s group. */
    private static final class ListenedOperatorGroup implements OperatorMetricGroup {
        private final MetricGroup group;

        ListenedOperatorGroup(MetricGroup group) {
            this.group = group;
        }

        @Override
        public OperatorIOMetricGroup getIOMetricGroup() {
            return UnregisteredMetricsGroup.createOperatorIOMetricGroup();
        }

        @Override
        public Counter counter(String name) {
            return group.counter(name);
        }

        @Override
        public <C extends Counter> C counter(String name, C counter) {
            return group.counter(name, counter);
        }

        @Override
        public <T, G extends Gauge<T>> G gauge(String name, G gauge) {
            return group.gauge(name, gauge);
        }

        @Override
        public <H extends Histogram> H histogram(String name, H histogram) {
            return group.histogram(name, histogram);
        }

        @Override
        public <M extends Meter> M meter(String name, M meter) {
            return group.meter(name, meter);
        }

        @Override
        public MetricGroup addGroup(String name) {
            return group.addGroup(name);
        }

        @Override
        public MetricGroup addGroup(String key, String value) {
            return group.addGroup(key, value);
        }

        @Override
        public String[] getScopeComponents() {
            return group.getScopeComponents();
        }

        @Override
        public Map<String, String> getAllVariables() {
            return group.getAllVariables();
        }

        @Override
        public String getMetricIdentifier(String name) {
            return group.getMetricIdentifier(name);
        }

        @Override
        public String getMetricIdentifier(String name, CharacterFilter filter) {
            return group.getMetricIdentifier(name, filter);
        }
    }
}
