package dev.stoker.connectors.fetch;

import dev.stoker.operators.metrics.MetricNames;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.ThreadSafeSimpleCounter;

/**
 * The fetch operators' {@code imagesFetched}, {@code imageBytesFetched}, {@code videosFetched} and
 * {@code videoBytesFetched} counters. Thread-safe: fetches complete on I/O threads, concurrently (a
 * plain {@code SimpleCounter} loses increments).
 */
final class FetchCounters {
    private final Counter images;
    private final Counter bytes;
    private final Counter videos;
    private final Counter videoBytes;

    FetchCounters(MetricGroup group) {
        images = group.counter(MetricNames.Fetch.IMAGES_FETCHED, new ThreadSafeSimpleCounter());
        bytes = group.counter(MetricNames.Fetch.IMAGE_BYTES_FETCHED, new ThreadSafeSimpleCounter());
        videos = group.counter(MetricNames.Fetch.VIDEOS_FETCHED, new ThreadSafeSimpleCounter());
        videoBytes =
                group.counter(MetricNames.Fetch.VIDEO_BYTES_FETCHED, new ThreadSafeSimpleCounter());
    }

    /** Counts one fetched image of {@code byteCount} bytes. */
    void fetched(long byteCount) {
        images.inc();
        bytes.inc(byteCount);
    }

    /** Counts one fetched video of {@code byteCount} bytes. */
    void fetchedVideo(long byteCount) {
        videos.inc();
        videoBytes.inc(byteCount);
    }
}
