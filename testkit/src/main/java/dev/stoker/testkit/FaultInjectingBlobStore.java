package dev.stoker.testkit;

import com.google.common.util.concurrent.RateLimiter;
import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
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
import org.jclouds.io.MutableContentMetadata;
import org.jclouds.io.Payload;
import org.jclouds.io.Payloads;

/**
 * Realistic S3 misbehaviour for tests and benchmarks, as S3Proxy middleware (a jclouds {@link
 * ForwardingBlobStore}, the extension point S3Proxy's own read-only, sharded and eventual stores
 * use): object GETs whose key matches a pattern get a time to first byte and answer a share of
 * requests with 503 SlowDown or 500 InternalError; single keys can be scripted to answer given
 * statuses next or always; a request-rate limit answers 503 SlowDown above it. S3Proxy turns the
 * thrown {@link HttpResponseException} into that HTTP status. Single keys can also be given a slow
 * or broken body ({@link Body}): a delayed first byte, a trickle, a connection reset or a body
 * shorter than its Content-Length; S3Proxy streams the blob's payload, so these are served by
 * wrapping the payload's InputStream. Waits end early on {@link #clearAnswers()}.
 */
public final class FaultInjectingBlobStore extends ForwardingBlobStore {

    /**
     * How the message of every exception this store throws into a body begins, so test logging can
     * tell an injected fault from a real one ({@link ExpectedFaultFilter}).
     */
    public static final String INJECTED = "injected fault: ";

    /**
     * What to inject into GETs of matching keys.
     *
     * @param latencyMs mean added time to first byte, in milliseconds
     * @param jitterMs the added time is uniform in {@code latencyMs +- jitterMs}
     * @param errorRate share of GETs answered 503 or 500 (half each), 0..1
     * @param keyPattern regular expression a key must match (full match)
     * @param stragglerRate share of GETs that are stragglers, 0..1
     * @param stragglerMs extra time to first byte of a straggler, in milliseconds
     */
    public record Faults(
            long latencyMs,
            long jitterMs,
            double errorRate,
            String keyPattern,
            double stragglerRate,
            long stragglerMs) {
        public static final Faults NONE = new Faults(0, 0, 0, ".*");

        /** Latency, jitter and errors without stragglers. */
        public Faults(long latencyMs, long jitterMs, double errorRate, String keyPattern) {
            this(latencyMs, jitterMs, errorRate, keyPattern, 0, 0);
        }
    }

    /**
     * How the body of a successful GET is served.
     *
     * @param firstByteDelayMs time before the answer's headers (time to first byte)
     * @param bytesPerSecond body bandwidth, 0 for unlimited
     * @param endAfterBytes the body stops after this many bytes, -1 for the whole object
     * @param reset whether stopping early is a connection reset (an exception while streaming)
     *     rather than a clean end of a body shorter than its Content-Length
     */
    public record Body(
            long firstByteDelayMs, long bytesPerSecond, long endAfterBytes, boolean reset) {
        /** Headers only after {@code ms}. */
        public static Body firstByteAfter(long ms) {
            return new Body(ms, 0, -1, false);
        }

        /** The body at {@code bytesPerSecond}. */
        public static Body trickle(long bytesPerSecond) {
            return new Body(0, bytesPerSecond, -1, false);
        }

        /** The connection breaks after {@code bytes} bytes of the body. */
        public static Body resetAfter(long bytes) {
            return new Body(0, 0, bytes, true);
        }

        /** The body ends cleanly after {@code bytes} bytes, short of its Content-Length. */
        public static Body truncatedAfter(long bytes) {
            return new Body(0, 0, bytes, false);
        }
    }

    private final Map<String, Deque<Body>> scriptedBodies = new ConcurrentHashMap<>();
    private final Map<String, Body> alwaysBodies = new ConcurrentHashMap<>();
    private final AtomicLong generation = new AtomicLong();
    private final Map<String, Deque<Integer>> scripted = new ConcurrentHashMap<>();
    private final Map<String, Integer> always = new ConcurrentHashMap<>();
    private volatile RateLimiter rateLimiter;
    private static final long SEED = 42;
    private final Random random = new Random(SEED);
    private final AtomicLong gets = new AtomicLong();
    private final AtomicLong injectedErrors = new AtomicLong();
    private volatile Faults faults = Faults.NONE;
    private volatile Pattern keyPattern = Pattern.compile(Faults.NONE.keyPattern());

    public FaultInjectingBlobStore(BlobStore delegate) {
        super(delegate);
    }

    /**
     * Replaces the faults injected from now on, and restarts the seeded draws, so which GETs fail
     * does not depend on how many GETs earlier tests made.
     */
    public void setFaults(Faults faults) {
        synchronized (random) {
            random.setSeed(SEED);
        }
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

    /** The next successful GETs of {@code bucket/key} serve these bodies, in order. */
    public void bodyNext(String bucket, String key, Body... bodies) {
        Deque<Body> q = scriptedBodies.computeIfAbsent(bucket + "/" + key, k -> new ArrayDeque<>());
        synchronized (q) {
            q.addAll(java.util.Arrays.asList(bodies));
        }
    }

    /**
     * Every successful GET of {@code bucket/key} (after any scripted bodies) serves {@code body}.
     */
    public void bodyAlways(String bucket, String key, Body body) {
        alwaysBodies.put(bucket + "/" + key, body);
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
        scriptedBodies.clear();
        alwaysBodies.clear();
        rateLimiter = null;
        generation.incrementAndGet(); // ends delays and trickles in progress
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
        return withBody(container, name, super.getBlob(container, name));
    }

    @Override
    public Blob getBlob(String container, String name, GetOptions options) {
        inject(container, name);
        return withBody(container, name, super.getBlob(container, name, options));
    }

    private Body nextBody(String container, String name) {
        Deque<Body> q = scriptedBodies.get(container + "/" + name);
        if (q != null) {
            synchronized (q) {
                Body b = q.poll();
                if (b != null) {
                    return b;
                }
            }
        }
        return alwaysBodies.get(container + "/" + name);
    }

    private Blob withBody(String container, String name, Blob blob) {
        if (blob == null) {
            return null;
        }
        Body body = nextBody(container, name);
        if (body == null) {
            return blob;
        }
        long gen = generation.get();
        long until = System.nanoTime() + body.firstByteDelayMs() * 1_000_000L;
        while (System.nanoTime() < until && generation.get() == gen) {
            try {
                Thread.sleep(Math.min(50, Math.max(1, (until - System.nanoTime()) / 1_000_000L)));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                break;
            }
        }
        if (body.bytesPerSecond() <= 0 && body.endAfterBytes() < 0) {
            return blob;
        }
        MutableContentMetadata metadata = blob.getPayload().getContentMetadata();
        // setPayload releases the old payload (closing its file), so read the (small) object first
        byte[] bytes;
        try (InputStream in = blob.getPayload().openStream()) {
            bytes = in.readAllBytes();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
        InputStream in = new java.io.ByteArrayInputStream(bytes);
        Payload payload = Payloads.newInputStreamPayload(new BodyStream(in, body, gen));
        payload.setContentMetadata(metadata); // same Content-Length, Content-Range, ETag
        blob.setPayload(payload);
        return blob;
    }

    /** Serves {@link Body#bytesPerSecond()} and {@link Body#endAfterBytes()} one byte at a time. */
    private final class BodyStream extends FilterInputStream {
        private final Body body;
        private final long gen;
        private final long start = System.nanoTime();
        private long served;

        BodyStream(InputStream in, Body body, long gen) {
            super(in);
            this.body = body;
            this.gen = gen;
        }

        @Override
        public int read() throws IOException {
            if (body.endAfterBytes() >= 0 && served >= body.endAfterBytes()) {
                if (body.reset()) {
                    throw new IOException(INJECTED + "connection reset after " + served + " bytes");
                }
                return -1;
            }
            if (body.bytesPerSecond() > 0) {
                long due = start + (served * 1_000_000_000L) / body.bytesPerSecond();
                while (System.nanoTime() < due) {
                    if (generation.get() != gen) {
                        throw new IOException(INJECTED + "slow body cancelled");
                    }
                    try {
                        Thread.sleep(
                                Math.min(50, Math.max(1, (due - System.nanoTime()) / 1_000_000L)));
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        throw new IOException("interrupted", e);
                    }
                }
            }
            int b = super.read();
            if (b >= 0) {
                served++;
            }
            return b;
        }

        /** Through {@link #read(byte[], int, int)}, never straight from the wrapped stream. */
        @Override
        public long transferTo(java.io.OutputStream out) throws IOException {
            byte[] buf = new byte[8192];
            long total = 0;
            for (int n; (n = read(buf, 0, buf.length)) >= 0; ) {
                out.write(buf, 0, n);
                total += n;
                if (body.bytesPerSecond() > 0) {
                    out.flush(); // each trickled byte leaves now, not when a buffer fills
                }
            }
            return total;
        }

        @Override
        public int read(byte[] buf, int off, int len) throws IOException {
            if (len == 0) {
                return 0;
            }
            if (body.bytesPerSecond() > 0) {
                int b = read();
                if (b < 0) {
                    return -1;
                }
                buf[off] = (byte) b;
                return 1;
            }
            int n = len;
            if (body.endAfterBytes() >= 0) {
                long left = body.endAfterBytes() - served;
                if (left <= 0) {
                    return read() < 0 ? -1 : 0; // throws for a reset
                }
                n = (int) Math.min(n, left);
            }
            int r = super.read(buf, off, n);
            if (r > 0) {
                served += r;
            }
            return r;
        }
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
            if (f.stragglerRate() > 0 && random.nextDouble() < f.stragglerRate()) {
                delay += f.stragglerMs();
            }
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
