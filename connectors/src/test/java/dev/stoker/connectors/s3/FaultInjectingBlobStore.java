package dev.stoker.connectors.s3;

import com.google.common.util.concurrent.RateLimiter;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Pattern;
import org.jclouds.blobstore.BlobStore;
import org.jclouds.blobstore.domain.Blob;
import org.jclouds.blobstore.options.GetOptions;
import org.jclouds.blobstore.util.ForwardingBlobStore;
import org.jclouds.http.HttpResponse;
import org.jclouds.http.HttpResponseException;

/**
 * Realistic S3 misbehaviour for tests and benchmarks, as S3Proxy middleware (a jclouds {@link
 * ForwardingBlobStore}, the extension point S3Proxy's own read-only, sharded and eventual stores
 * use): object GETs whose key matches a pattern get a time to first byte and answer a share of
 * requests with 503 SlowDown or 500 InternalError; single keys can be scripted to answer given
 * statuses next or always; a request-rate limit answers 503 SlowDown above it. S3Proxy turns the
 * thrown {@link HttpResponseException} into that HTTP status.
 */
public final class FaultInjectingBlobStore extends ForwardingBlobStore {

    /**
     * What to inject into GETs of matching keys.
     *
     * @param latencyMs mean added time to first byte, in milliseconds
     * @param jitterMs the added time is uniform in {@code latencyMs +- jitterMs}
     * @param errorRate share of GETs answered 503 or 500 (half each), 0..1
     * @param keyPattern regular expression a key must match (full match)
     */
    public record Faults(long latencyMs, long jitterMs, double errorRate, String keyPattern) {
        public static final Faults NONE = new Faults(0, 0, 0, ".*");
    }

    private final Map<String, Deque<Integer>> scripted = new ConcurrentHashMap<>();
    private final Map<String, Integer> always = new ConcurrentHashMap<>();
    private volatile RateLimiter rateLimiter;
    private final Random random = new Random(42);
    private final AtomicLong gets = new AtomicLong();
    private final AtomicLong injectedErrors = new AtomicLong();
    private volatile Faults faults = Faults.NONE;
    private volatile Pattern keyPattern = Pattern.compile(Faults.NONE.keyPattern());

    public FaultInjectingBlobStore(BlobStore delegate) {
        super(delegate);
    }

    /** Replaces the faults injected from now on. */
    public void setFaults(Faults faults) {
        this.keyPattern = Pattern.compile(faults.keyPattern());
        this.faults = faults;
    }

    /**
     * The next GETs of {@code bucket/key} answer these HTTP statuses, in order, before any other
     * fault.
     */
    public void answerNext(String bucket, String key, int... statuses) {
        Deque<Integer> q = scripted.computeIfAbsent(bucket + "/" + key, k -> new ArrayDeque<>());
        synchronized (q) {
            for (int s : statuses) {
                q.add(s);
            }
        }
    }

    /**
     * Every GET of {@code bucket/key} answers {@code status} (e.g. 503 SlowDown or 403 forever).
     */
    public void answerAlways(String bucket, String key, int status) {
        always.put(bucket + "/" + key, status);
    }

    /**
     * Object GETs above {@code requestsPerSecond} (Guava's smooth {@link RateLimiter}, no waiting)
     * answer 503 SlowDown, as S3 does for a hot prefix; 0 turns the limit off.
     */
    public void setRateLimit(double requestsPerSecond) {
        rateLimiter = requestsPerSecond > 0 ? RateLimiter.create(requestsPerSecond) : null;
    }

    /** Forgets scripted and permanent answers and the rate limit. */
    public void clearAnswers() {
        scripted.clear();
        always.clear();
        rateLimiter = null;
    }

    /** Object GETs served or failed so far. */
    public long gets() {
        return gets.get();
    }

    /** GETs answered with an injected error so far. */
    public long injectedErrors() {
        return injectedErrors.get();
    }

    @Override
    public Blob getBlob(String container, String name) {
        inject(container, name);
        return super.getBlob(container, name);
    }

    @Override
    public Blob getBlob(String container, String name, GetOptions options) {
        inject(container, name);
        return super.getBlob(container, name, options);
    }

    private void inject(String container, String name) {
        gets.incrementAndGet();
        Integer permanent =
                always.get(container + "/" + name); // e.g. access denied: decided before throttling
        if (permanent != null) {
            throw error(permanent);
        }
        RateLimiter limiter = rateLimiter;
        if (limiter != null && !limiter.tryAcquire()) {
            throw error(503);
        }
        Deque<Integer> q = scripted.get(container + "/" + name);
        if (q != null) {
            Integer status;
            synchronized (q) {
                status = q.poll();
            }
            if (status != null) {
                throw error(status);
            }
        }
        Faults f = faults;
        if (!keyPattern.matcher(name).matches()) {
            return;
        }
        double errorDraw;
        long delay;
        synchronized (random) {
            errorDraw = random.nextDouble();
            delay =
                    f.latencyMs()
                            + (f.jitterMs() > 0
                                    ? random.nextLong(-f.jitterMs(), f.jitterMs() + 1)
                                    : 0);
        }
        if (delay > 0) {
            try {
                Thread.sleep(delay);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        if (errorDraw < f.errorRate()) {
            throw error(errorDraw < f.errorRate() / 2 ? 503 : 500);
        }
    }

    private HttpResponseException error(int status) {
        injectedErrors.incrementAndGet();
        String message =
                switch (status) {
                    case 503 -> "SlowDown";
                    case 500 -> "InternalError";
                    case 403 -> "AccessDenied";
                    case 404 -> "NoSuchKey";
                    default -> "Injected";
                };
        return new HttpResponseException(
                message, null, HttpResponse.builder().statusCode(status).message(message).build());
    }
}
