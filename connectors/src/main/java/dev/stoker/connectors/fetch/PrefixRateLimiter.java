package dev.stoker.connectors.fetch;

import io.github.resilience4j.ratelimiter.RateLimiter;
import io.github.resilience4j.ratelimiter.RateLimiterConfig;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

/**
 * Client-side GET rate limit per S3 key prefix (the key up to its last {@code /}), so one subtask
 * stays below the request rate at which S3 starts answering 503 SlowDown for a prefix, instead of
 * retrying into it. Backed by resilience4j's {@link RateLimiter}; waiting never blocks a thread:
 * {@link #permit} returns a future that completes when the GET may start.
 *
 * <p>The rate is per subtask: with parallelism {@code p} the job sends at most {@code p} times it.
 */
final class PrefixRateLimiter {
    private static final int SLICES_PER_SECOND = 10;

    private final double perSecond;
    private final RateLimiterConfig config;
    private final Map<String, RateLimiter> limiters = new ConcurrentHashMap<>();

    /**
     * @param perSecond GETs per second per prefix; {@code 0} or less means no limit
     */
    PrefixRateLimiter(double perSecond) {
        this.perSecond = perSecond;
        this.config =
                perSecond <= 0
                        ? null
                        : RateLimiterConfig.custom()
                                .limitRefreshPeriod(Duration.ofMillis(1000 / SLICES_PER_SECOND))
                                .limitForPeriod(
                                        (int)
                                                Math.max(
                                                        1,
                                                        Math.round(perSecond / SLICES_PER_SECOND)))
                                .timeoutDuration(Duration.ofDays(1))
                                .build();
    }

    /**
     * Reserves one GET of {@code key}.
     *
     * @return a future completing when the GET may start (already complete when not limited)
     */
    CompletableFuture<Void> permit(String key) {
        if (config == null) {
            return CompletableFuture.completedFuture(null);
        }
        String prefix = key.substring(0, key.lastIndexOf('/') + 1);
        long waitNanos =
                limiters.computeIfAbsent(prefix, p -> RateLimiter.of("s3-prefix", config))
                        .reservePermission();
        if (waitNanos <= 0) {
            return CompletableFuture.completedFuture(null);
        }
        return CompletableFuture.runAsync(
                () -> {}, CompletableFuture.delayedExecutor(waitNanos, TimeUnit.NANOSECONDS));
    }

    @Override
    public String toString() {
        return perSecond <= 0 ? "unlimited" : perSecond + " GET/s per prefix";
    }
}
