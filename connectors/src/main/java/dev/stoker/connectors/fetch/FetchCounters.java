package dev.stoker.connectors.fetch;

import dev.stoker.operators.metrics.MetricNames;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.ThreadSafeSimpleCounter;

/**
 * The fetch operators' {@code imagesFetched} and {@code imageBytesFetched} counters. Thread-safe:
 * fetches complete on I/O threads, concurrently (a plain {@code SimpleCounter} loses increments).
 */
final class FetchCounters {
    private final Counter images;
    private final Counter bytes;

    FetchCounters(MetricGroup group) {
        images = group.counter(MetricNames.Fetch.IMAGES_FETCHED, new ThreadSafeSimpleCounter());
        bytes = group.counter(MetricNames.Fetch.IMAGE_BYTES_FETCHED, new ThreadSafeSimpleCounter());
    }

    /** Counts one fetched image of {@code byteCount} bytes. */
    void fetched(int byteCount) {
        images.inc();
        bytes.inc(byteCount);
    }
}
