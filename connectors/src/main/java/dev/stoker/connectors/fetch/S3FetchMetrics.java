package dev.stoker.connectors.fetch;

import com.codahale.metrics.SlidingWindowReservoir;
import dev.stoker.operators.metrics.MetricNames;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.Stage;
import java.util.EnumMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.flink.dropwizard.metrics.DropwizardHistogramWrapper;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.Gauge;
import org.apache.flink.metrics.Histogram;
import org.apache.flink.metrics.MeterView;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.ThreadSafeSimpleCounter;
import software.amazon.awssdk.core.interceptor.Context;
import software.amazon.awssdk.core.interceptor.ExecutionAttribute;
import software.amazon.awssdk.core.interceptor.ExecutionAttributes;
import software.amazon.awssdk.core.interceptor.ExecutionInterceptor;

/**
 * Flink metrics of S3 image GETs, registered on the fetch operator's metric group (shown in the web
 * UI under the operator, e.g. {@code fetch-images.s3.getLatencyMs}):
 *
 * <ul>
 *   <li>{@code requestsInFlight} (gauge): GETs started and not yet finished, retries included;
 *   <li>{@code getsWaitingForConnection} (gauge): GETs waiting for one of the client's HTTP
 *       connections ({@code stoker.s3.max-connections}), none of their timeouts running yet;
 *   <li>{@code getLatencyMs} (histogram over the last 10,000 GETs): milliseconds from the read's
 *       start to the last byte, connection wait, backoff and retries included;
 *   <li>{@code bytesFetched} (counter) and {@code bytesPerSecond} (meter, 60 s window);
 *   <li>{@code retries} (counter): HTTP attempts beyond the first of each GET;
 *   <li>{@code hedgedGets} (counter): second GETs sent for stragglers ({@code
 *       stoker.s3.hedge-after});
 *   <li>{@code failures.<REASON>} (counters): GETs that ended as a dead letter, by reason;
 *   <li>{@code transientFailures} (counter, the alarm): records whose GETs failed for a transient
 *       reason after all retries (see {@link TransientFailurePolicy}).
 * </ul>
 *
 * <p>The counters are {@link ThreadSafeSimpleCounter}s: the SDK's completion threads update them
 * concurrently, and a plain {@code SimpleCounter} loses increments (a run of S3ImageStoreITCase
 * counted 11 of 12 timed-out GETs).
 */
public final class S3FetchMetrics {
    private static final ExecutionAttribute<Boolean> ATTEMPTED =
            new ExecutionAttribute<>("stoker.attempted");

    /**
     * A read's own count of HTTP attempts, put on its requests (hedged ones share it) and counted
     * by {@link #attemptCounter()}.
     */
    static final ExecutionAttribute<AtomicInteger> ATTEMPTS =
            new ExecutionAttribute<>("stoker.attempts");

    private final AtomicInteger inFlight = new AtomicInteger();
    private final AtomicInteger waitingForConnection = new AtomicInteger();
    private final Histogram latencyMs;
    private final Counter bytes;
    private final Counter retries;
    private final Counter transientFailures;
    private final Counter hedged;
    private final Map<RejectReason, Counter> failures = new EnumMap<>(RejectReason.class);

    /**
     * Registers the metrics on {@code group} (typically {@code
     * operatorGroup.addGroup(MetricNames.Fetch.S3_GROUP)}).
     */
    public S3FetchMetrics(MetricGroup group) {
        group.gauge(MetricNames.Fetch.REQUESTS_IN_FLIGHT, (Gauge<Integer>) inFlight::get);
        group.gauge(
                MetricNames.Fetch.GETS_WAITING_FOR_CONNECTION,
                (Gauge<Integer>) waitingForConnection::get);
        latencyMs =
                group.histogram(
                        MetricNames.Fetch.GET_LATENCY_MS,
                        new DropwizardHistogramWrapper(
                                new com.codahale.metrics.Histogram(
                                        new SlidingWindowReservoir(10_000))));
        bytes = group.counter(MetricNames.Fetch.BYTES_FETCHED, new ThreadSafeSimpleCounter());
        group.meter(MetricNames.Fetch.BYTES_PER_SECOND, new MeterView(bytes));
        retries = group.counter(MetricNames.Fetch.RETRIES, new ThreadSafeSimpleCounter());
        transientFailures =
                group.counter(MetricNames.Fetch.TRANSIENT_FAILURES, new ThreadSafeSimpleCounter());
        hedged = group.counter(MetricNames.Fetch.HEDGED_GETS, new ThreadSafeSimpleCounter());
        MetricGroup failureGroup = group.addGroup(MetricNames.Fetch.FAILURES_GROUP);
        for (RejectReason reason : RejectReason.values()) {
            if (reason.stage() == Stage.FETCH || reason == RejectReason.UNSAFE_PATH) {
                failures.put(
                        reason, failureGroup.counter(reason.name(), new ThreadSafeSimpleCounter()));
            }
        }
    }

    /**
     * An SDK interceptor that counts every HTTP attempt into its read's {@link #ATTEMPTS} and every
     * attempt after a request's first one as a retry.
     */
    ExecutionInterceptor attemptCounter() {
        return new ExecutionInterceptor() {
            @Override
            public void beforeTransmission(
                    Context.BeforeTransmission context, ExecutionAttributes attributes) {
                AtomicInteger attempts = attributes.getAttribute(ATTEMPTS);
                if (attempts != null) {
                    attempts.incrementAndGet();
                }
                if (attributes.getAttribute(ATTEMPTED) != null) {
                    retries.inc();
                } else {
                    attributes.putAttribute(ATTEMPTED, Boolean.TRUE);
                }
            }
        };
    }

    void started() {
        inFlight.incrementAndGet();
    }

    void waitingForConnection(int delta) {
        waitingForConnection.addAndGet(delta);
    }

    void finished(long startNanos) {
        inFlight.decrementAndGet();
        latencyMs.update((System.nanoTime() - startNanos) / 1_000_000);
    }

    void fetched(long numBytes) {
        bytes.inc(numBytes);
    }

    /** Counts a second GET sent for a straggler. */
    void hedged() {
        hedged.inc();
    }

    /** Counts a record whose fetch failed transiently after all retries. */
    void transientFailure() {
        transientFailures.inc();
    }

    /** Counts a GET that ended as a dead letter with {@code reason}. */
    public void failed(RejectReason reason) {
        Counter c = failures.get(reason);
        if (c != null) {
            c.inc();
        }
    }

    public int inFlight() {
        return inFlight.get();
    }

    public int getsWaitingForConnection() {
        return waitingForConnection.get();
    }

    public long hedgedGets() {
        return hedged.getCount();
    }

    public long retries() {
        return retries.getCount();
    }

    public long bytesFetched() {
        return bytes.getCount();
    }

    public long failures(RejectReason reason) {
        Counter c = failures.get(reason);
        return c == null ? 0 : c.getCount();
    }

    public Histogram latencyMs() {
        return latencyMs;
    }
}
