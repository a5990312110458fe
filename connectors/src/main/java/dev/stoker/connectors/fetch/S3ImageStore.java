package dev.stoker.connectors.fetch;

import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import java.io.IOException;
import java.net.URI;
import java.time.Duration;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BiConsumer;
import java.util.function.Supplier;
import software.amazon.awssdk.awscore.exception.AwsServiceException;
import software.amazon.awssdk.core.exception.ApiCallAttemptTimeoutException;
import software.amazon.awssdk.core.exception.ApiCallTimeoutException;
import software.amazon.awssdk.services.s3.S3AsyncClient;
import software.amazon.awssdk.services.s3.model.GetObjectRequest;
import software.amazon.awssdk.services.s3.model.ListObjectsV2Request;

/**
 * Reads image and video objects from S3 by path relative to an {@code s3://bucket/prefix/} image
 * root, with non-blocking GETs on a shared {@link S3AsyncClient}: both kinds alike (connections,
 * rate limit, retries, hedging, metrics), each with its own size limit and reasons ({@link Media}).
 * An object is read in one GET, into memory, or, for a video larger than the spill threshold when a
 * {@link SpillDirectory} is given, streamed into a spill file of its own ({@link BodyTransformer}):
 * the body goes to the file as it arrives, never whole to the heap. A GET that fails, is retried or
 * is cancelled (a hedged GET that lost) leaves no file behind.
 *
 * <p>Paths are resolved and normalised like {@link ImageStore}'s: a key outside the image root's
 * prefix (or in another bucket) is rejected ({@link RejectReason#UNSAFE_PATH}) before any request.
 * Each GET asks for the range {@code bytes=0-<limit>}, and an oversized object is rejected from its
 * total size in the response's headers ({@code Content-Range}) before any byte of its body is read
 * ({@link RejectReason#IMAGE_TOO_LARGE}, {@link RejectReason#VIDEO_FILE_TOO_LARGE}); a server that
 * sends no total costs at most the range's bytes.
 *
 * <p>Keys are the paths as written, without Unicode normalization. Outcomes, each naming the {@code
 * s3://} key: 404 is {@link RejectReason#IMAGE_NOT_FOUND} or {@link RejectReason#VIDEO_NOT_FOUND}
 * (naming the NFC or NFD spelling of the path when an object of that name exists, found with a HEAD
 * request); 403 and any error left after the client's retries are {@link RejectReason#FETCH_FAILED}
 * (with the HTTP status, S3 error code and number of attempts); running out of the client's total
 * request time, or the last attempt timing out (its attempt timeout, or its read timeout: no byte
 * for {@link S3ClientSettings#readTimeout}), is {@link RejectReason#FETCH_TIMEOUT}; every such
 * message names the attempts made and how long they took. Retries themselves happen inside the
 * client (see {@link S3ClientSettings}).
 *
 * <p>Connections: at most {@link S3ClientSettings#maxConnections} requests (GETs, hedged GETs,
 * HEADs) are on the wire at once; the store queues the others itself (first come, first served,
 * without blocking), so a GET's timeouts start only once it has a connection, and a read's {@link
 * Get#progress()} names a wait for a connection as such. GETs that may stream into a spill file go
 * through a second client of the same settings whose read timeout is the attempt timeout ({@link
 * S3ClientSettings#withReadTimeoutOfTheAttempt}): the client reads only as fast as the file's
 * writes ask for more, so a stalled disk would otherwise end a healthy GET.
 */
public final class S3ImageStore implements AutoCloseable {
    /** The class of the exception the Netty client's read timeout raises. */
    private static final String NETTY_READ_TIMEOUT =
            "io.netty.handler.timeout.ReadTimeoutException";

    private final long maxObjectBytes;
    private final long maxVideoBytes;
    private final S3AsyncClient client;
    private final S3ClientSettings settings;

    /**
     * The client of the GETs that may stream into a spill file ({@link #read(String, String, Media,
     * SpillDirectory)} with a spill directory): made on the first such GET, with the read timeout
     * raised to the attempt timeout, since the Netty client reads only as fast as the spill file's
     * writes ask for more and a stalled disk must not end a healthy GET.
     */
    private S3AsyncClient spillClient;

    private boolean closed;
    private final S3FetchMetrics metrics;
    private final PrefixRateLimiter rateLimiter;
    private final ConnectionPermits connections;
    private final Duration hedgeAfter;
    private final Duration readTimeout;
    private final Duration attemptTimeout;
    private final Duration requestTimeout;

    /**
     * @param maxObjectBytes largest accepted image object, in bytes
     * @param maxVideoBytes largest accepted video object, in bytes, at most {@code 2^31 - 9}
     * @param settings the client to build (endpoint, credentials, connections, timeouts, retries),
     *     the client-side GET rate limit per key prefix and the hedging delay
     * @param metrics where to count requests, latency, bytes and failures
     */
    public S3ImageStore(
            long maxObjectBytes,
            long maxVideoBytes,
            S3ClientSettings settings,
            S3FetchMetrics metrics) {
        this.maxObjectBytes = maxObjectBytes;
        this.maxVideoBytes = maxVideoBytes;
        this.metrics = metrics;
        this.rateLimiter = new PrefixRateLimiter(settings.getsPerSecondPerPrefix());
        this.connections = new ConnectionPermits(settings.maxConnections());
        this.hedgeAfter = settings.hedgeAfter();
        this.readTimeout = settings.readTimeout();
        this.attemptTimeout = settings.attemptTimeout();
        this.requestTimeout = settings.requestTimeout();
        this.settings = settings;
        this.client = settings.createClient(List.of(metrics.attemptCounter()));
    }

    /** Whether {@code root} is an S3 URI ({@code s3://}, {@code s3a://} or {@code s3p://}). */
    public static boolean isS3(String root) {
        String r = root.toLowerCase(java.util.Locale.ROOT);
        return r.startsWith("s3://") || r.startsWith("s3a://") || r.startsWith("s3p://");
    }

    /**
     * One read in progress: the future of the object, in memory or in a spill file (a {@link
     * RejectedRecordException} on failure, see {@link #read}), that also says, while it runs, where
     * the read is.
     */
    public static final class Get extends CompletableFuture<FetchedObject> {
        private final AtomicInteger attempts = new AtomicInteger();
        private final long startedNanos = System.nanoTime();
        private final int connections;
        private volatile long waitingSinceNanos;
        private volatile long sentNanos;

        private Get(int connections) {
            this.connections = connections;
        }

        /**
         * Where the read is, for a timeout message: e.g. {@code "waited 4.2 s for a free HTTP
         * connection (all 64 in use; stoker.s3.max-connections)"}, {@code "2 attempt(s), 9.8 s
         * since the first"}, or {@code "waited 1.0 s for the per-prefix rate limit"}.
         */
        public String progress() {
            long now = System.nanoTime();
            long sent = sentNanos;
            long waiting = waitingSinceNanos;
            if (sent != 0) {
                String wait =
                        sent - waiting >= 1_000_000
                                ? ", after waiting " + seconds(sent - waiting) + " for a connection"
                                : "";
                return attempts.get()
                        + " attempt(s), "
                        + seconds(now - sent)
                        + " since the first"
                        + wait;
            }
            if (waiting != 0) {
                return "waited "
                        + seconds(now - waiting)
                        + " for a free HTTP connection (all "
                        + connections
                        + " in use; stoker.s3.max-connections)";
            }
            return "waited " + seconds(now - startedNanos) + " for the per-prefix rate limit";
        }

        /** Time on the wire and any wait for a connection before, for a settled GET's message. */
        private String timing() {
            long sent = sentNanos;
            if (sent == 0) {
                return "";
            }
            long waited = sent - waitingSinceNanos;
            return " in "
                    + seconds(System.nanoTime() - sent)
                    + (waited >= 1_000_000
                            ? " (after waiting " + seconds(waited) + " for a free HTTP connection)"
                            : "");
        }
    }

    private static String seconds(long nanos) {
        return String.format(java.util.Locale.ROOT, "%.1f s", nanos / 1e9);
    }

    /**
     * Starts reading the whole object at {@code relativePath} under the image root {@code root}
     * ({@code s3://bucket/prefix}; also {@code s3a://} or {@code s3p://}; the roots of all reads
     * share the client, its connections and its rate limits). The GET first waits (without
     * blocking) for the per-prefix rate limit and for one of the client's HTTP connections; its
     * attempt and request timeouts run only from then on.
     *
     * @return the read: its bytes in memory, or failed with a {@link RejectedRecordException}
     *     (IMAGE_NOT_FOUND, IMAGE_TOO_LARGE, UNSAFE_PATH, FETCH_FAILED or FETCH_TIMEOUT, the
     *     message naming the attempts made and their duration); never another exception
     * @throws IllegalArgumentException if {@code root} is not an S3 URI
     */
    public Get read(String root, String relativePath) {
        return read(root, relativePath, Media.IMAGE);
    }

    /**
     * Starts reading the whole object at {@code relativePath} as {@link #read(String, String)} does
     * an image, with {@code media}'s size limit and reasons.
     *
     * @return the read: its bytes in memory, or failed with a {@link RejectedRecordException}
     *     ({@link Media#notFound()}, {@link Media#tooLarge()}, UNSAFE_PATH, FETCH_FAILED or
     *     FETCH_TIMEOUT)
     * @throws IllegalArgumentException if {@code root} is not an S3 URI
     */
    public Get read(String root, String relativePath, Media media) {
        return read(root, relativePath, media, null);
    }

    /**
     * Starts reading the whole object at {@code relativePath} as {@link #read(String, String,
     * Media)} does, streaming its body into a new file of {@code spill} instead of memory when it
     * is larger than {@code spill}'s threshold ({@link SpillDirectory#spills}; also when the
     * response gives no length). The file then belongs to the caller; a read that fails leaves
     * none.
     *
     * @param spill where a large object goes; null keeps every object in memory
     * @return the read: the object in memory or in its spill file, or failed as {@link
     *     #read(String, String, Media)}; FETCH_FAILED also when the spill file cannot be written
     * @throws IllegalArgumentException if {@code root} is not an S3 URI
     */
    public Get read(String root, String relativePath, Media media, SpillDirectory spill) {
        long limit = media == Media.VIDEO ? maxVideoBytes : maxObjectBytes;
        if (!isS3(root)) {
            throw new IllegalArgumentException("not an s3:// image root: " + root);
        }
        String dir = root.endsWith("/") ? root : root + "/";
        String bucket = URI.create(dir).getAuthority();
        Get get = new Get(connections.permits());
        String key;
        try {
            key = ImageStore.resolveUnderRoot(dir, relativePath).getPath().substring(1);
        } catch (RejectedRecordException e) {
            metrics.failed(e.reason());
            get.completeExceptionally(e);
            return get;
        }
        String where = "s3://" + bucket + "/" + key;
        GetObjectRequest request =
                GetObjectRequest.builder()
                        .bucket(bucket)
                        .key(key)
                        .range("bytes=0-" + limit)
                        .overrideConfiguration(
                                o -> o.putExecutionAttribute(S3FetchMetrics.ATTEMPTS, get.attempts))
                        .build();
        long start = System.nanoTime();
        metrics.started();
        // every request's body (a hedged GET sends two): all but the one returned are deleted
        List<BodyTransformer> bodies = new CopyOnWriteArrayList<>();
        Supplier<BodyTransformer> newBody =
                () -> {
                    BodyTransformer body = new BodyTransformer(limit, spill);
                    bodies.add(body);
                    return body;
                };
        CompletableFuture<FetchedObject> result;
        try {
            S3AsyncClient via = spill == null ? client : spillClient();
            result =
                    rateLimiter
                            .permit(key)
                            .thenCompose(ready -> connection(get))
                            .thenCompose(ready -> hedgedGet(via, request, newBody))
                            .handle(
                                    (body, error) -> {
                                        metrics.finished(start);
                                        if (error != null) {
                                            return emptyOrThrow(
                                                    relativePath, where, error, get, media);
                                        }
                                        long total = body.total();
                                        if (body.object() == null || total > limit) {
                                            throw reject(
                                                    media.tooLarge(),
                                                    "'"
                                                            + relativePath
                                                            + "' ("
                                                            + where
                                                            + ") is "
                                                            + total
                                                            + " bytes, above the "
                                                            + media.word()
                                                            + " limit of "
                                                            + limit);
                                        }
                                        metrics.fetched(body.object().size());
                                        return body.object();
                                    });
        } catch (RuntimeException e) { // e.g. the client or the store is already closed
            metrics.finished(start);
            result = CompletableFuture.failedFuture(e);
        }
        result.exceptionallyCompose(
                        e -> {
                            Throwable cause = unwrap(e);
                            if (cause instanceof RejectedRecordException rejected) {
                                return rejected.reason() == media.notFound()
                                        ? withVariantHint(rejected, dir, bucket, relativePath)
                                        : CompletableFuture.failedFuture(cause);
                            }
                            metrics.failed(RejectReason.FETCH_FAILED);
                            return CompletableFuture.failedFuture(
                                    RejectedRecordException.transientFailure(
                                            RejectReason.FETCH_FAILED,
                                            "GET " + where + " failed: " + cause,
                                            cause));
                        })
                .whenComplete(
                        (object, error) -> {
                            java.nio.file.Path kept = error == null ? object.file() : null;
                            for (BodyTransformer body : bodies) {
                                if (body.file() != null && !body.file().equals(kept)) {
                                    body.abandon();
                                }
                            }
                            if (error == null) {
                                get.complete(object);
                            } else {
                                get.completeExceptionally(unwrap(error));
                            }
                        });
        return get;
    }

    /** A connection for {@code get}, its wait recorded for its message and the gauge. */
    private CompletableFuture<Void> connection(Get get) {
        get.waitingSinceNanos = System.nanoTime();
        CompletableFuture<Void> turn = connections.acquire();
        if (turn.isDone()) {
            get.sentNanos = System.nanoTime();
            return turn;
        }
        metrics.waitingForConnection(1);
        return turn.thenRun(
                () -> {
                    metrics.waitingForConnection(-1);
                    get.sentNanos = System.nanoTime();
                });
    }

    /**
     * {@code notFound}, with the hint that names the NFC or NFD spelling of {@code relativePath}
     * when an object of that name exists (a HEAD request per differing spelling, so none for ASCII
     * names).
     */
    private CompletableFuture<FetchedObject> withVariantHint(
            RejectedRecordException notFound, String root, String bucket, String relativePath) {
        CompletableFuture<String> hint = CompletableFuture.completedFuture("");
        for (String variant : ImageStore.normalizationVariants(relativePath)) {
            hint =
                    hint.thenCompose(
                            found ->
                                    found.isEmpty()
                                            ? exists(root, bucket, variant)
                                                    .thenApply(
                                                            yes ->
                                                                    yes
                                                                            ? ImageStore
                                                                                    .normalizationHint(
                                                                                            variant)
                                                                            : "")
                                            : CompletableFuture.completedFuture(found));
        }
        return hint.thenCompose(
                h ->
                        CompletableFuture.failedFuture(
                                h.isEmpty()
                                        ? notFound
                                        : new RejectedRecordException(
                                                notFound.reason(), notFound.getMessage() + h)));
    }

    /** Whether an object exists at {@code relativePath} (HEAD); false on any error. */
    private CompletableFuture<Boolean> exists(String root, String bucket, String relativePath) {
        try {
            String key = ImageStore.resolveUnderRoot(root, relativePath).getPath().substring(1);
            return connections
                    .acquire()
                    .thenCompose(
                            ready -> {
                                try {
                                    return client.headObject(r -> r.bucket(bucket).key(key))
                                            .whenComplete((r, e) -> connections.release());
                                } catch (RuntimeException e) {
                                    connections.release();
                                    throw e;
                                }
                            })
                    .handle((response, error) -> error == null);
        } catch (RejectedRecordException | RuntimeException e) {
            return CompletableFuture.completedFuture(false);
        }
    }

    /**
     * The GET on the connection permit its caller holds, and when {@code hedgeAfter} is set and it
     * has not completed by then, a second identical one if a connection is free (a hedge never
     * makes another GET wait): the first success wins and the other is cancelled (its connection
     * aborted). Fails only when every request sent failed, with the last failure. Each request
     * gives its permit back when it settles, and receives its body with its own transformer from
     * {@code bodies}.
     */
    private CompletableFuture<BodyTransformer.Body> hedgedGet(
            S3AsyncClient via, GetObjectRequest request, Supplier<BodyTransformer> bodies) {
        CompletableFuture<BodyTransformer.Body> first = send(via, request, bodies.get());
        if (hedgeAfter.isZero()) {
            return first;
        }
        CompletableFuture<BodyTransformer.Body> winner = new CompletableFuture<>();
        List<CompletableFuture<BodyTransformer.Body>> sent =
                new CopyOnWriteArrayList<>(List.of(first));
        AtomicInteger pending = new AtomicInteger(1);
        BiConsumer<BodyTransformer.Body, Throwable> settle =
                (response, error) -> {
                    int left = pending.decrementAndGet();
                    if (error == null) {
                        winner.complete(response);
                    } else if (left == 0) {
                        winner.completeExceptionally(error);
                    }
                };
        first.whenComplete(settle);
        CompletableFuture.delayedExecutor(hedgeAfter.toNanos(), TimeUnit.NANOSECONDS)
                .execute(
                        () -> {
                            if (winner.isDone() || !connections.tryAcquire()) {
                                return;
                            }
                            if (!pending.compareAndSet(1, 2)) {
                                connections.release();
                                return;
                            }
                            metrics.hedged();
                            CompletableFuture<BodyTransformer.Body> second =
                                    send(via, request, bodies.get());
                            sent.add(second);
                            second.whenComplete(settle);
                        });
        winner.whenComplete((r, e) -> sent.forEach(f -> f.cancel(true)));
        return winner;
    }

    /** One request through {@code via} on a permit already held; it goes back when it settles. */
    private CompletableFuture<BodyTransformer.Body> send(
            S3AsyncClient via, GetObjectRequest request, BodyTransformer body) {
        CompletableFuture<BodyTransformer.Body> sent;
        try {
            sent = via.getObject(request, body);
        } catch (RuntimeException e) { // e.g. the client is already closed
            connections.release();
            throw e;
        }
        sent.whenComplete((response, error) -> connections.release());
        return sent;
    }

    private FetchedObject emptyOrThrow(
            String relativePath, String where, Throwable error, Get get, Media media) {
        Throwable t = unwrap(error);
        String attempts = " after " + get.attempts.get() + " attempt(s)" + get.timing();
        if (t instanceof AwsServiceException e) {
            int status = e.statusCode();
            String code = e.awsErrorDetails() != null ? e.awsErrorDetails().errorCode() : null;
            String statusText = "HTTP " + status + (code != null ? " " + code : "");
            if (status == 404) {
                throw reject(
                        media.notFound(),
                        "'" + relativePath + "' not found: " + where + " (" + statusText + ")");
            }
            if (status == 416) {
                // an empty object has no byte 0; the decoder rejects it as corrupt
                return FetchedObject.inMemory(new byte[0]);
            }
            // 5xx and 429 (throttling) outlasted the retries; 403 and other 4xx are permanent
            boolean transientStatus = status >= 500 || status == 429;
            throw reject(
                    RejectReason.FETCH_FAILED,
                    "GET " + where + " failed with " + statusText + attempts,
                    transientStatus);
        }
        if (isTimeout(t)) {
            throw reject(
                    RejectReason.FETCH_TIMEOUT,
                    "GET "
                            + where
                            + " did not complete in time"
                            + attempts
                            + " (read timeout "
                            + seconds(readTimeout.toNanos())
                            + ", attempt timeout "
                            + seconds(attemptTimeout.toNanos())
                            + ", request timeout "
                            + seconds(requestTimeout.toNanos())
                            + ": stoker.s3.read-timeout, stoker.s3.attempt-timeout,"
                            + " stoker.s3.request-timeout)",
                    true);
        }
        throw reject(
                RejectReason.FETCH_FAILED,
                "GET "
                        + where
                        + " failed"
                        + attempts
                        + ": "
                        + t.getClass().getSimpleName()
                        + ": "
                        + t.getMessage(),
                true);
    }

    /**
     * Whether {@code t} or one of its causes is the SDK's call or attempt timeout, the Netty
     * client's read timeout (an {@code IOException} caused by Netty's {@code ReadTimeoutException},
     * told by its class name: Netty is the SDK's HTTP client's dependency, not this module's), or
     * the Netty client's {@code IOException("Request cancelled")}: its {@code FutureCancelHandler}
     * raises that, without a cause, when the SDK cancels an attempt on its timeout, and now and
     * then it reaches the caller instead of the {@link ApiCallAttemptTimeoutException} (this store
     * cancels a request only after the GET has settled: a hedged request that lost).
     */
    private static boolean isTimeout(Throwable t) {
        for (Throwable c = t; c != null; c = c.getCause()) {
            if (c instanceof ApiCallTimeoutException
                    || c instanceof ApiCallAttemptTimeoutException
                    || NETTY_READ_TIMEOUT.equals(c.getClass().getName())
                    || (c instanceof IOException && "Request cancelled".equals(c.getMessage()))) {
                return true;
            }
        }
        return false;
    }

    private CompletionException reject(RejectReason reason, String message) {
        return reject(reason, message, false);
    }

    private CompletionException reject(
            RejectReason reason, String message, boolean transientFailure) {
        metrics.failed(reason);
        return new CompletionException(
                transientFailure
                        ? RejectedRecordException.transientFailure(reason, message, null)
                        : new RejectedRecordException(reason, message));
    }

    /**
     * Total object size from a {@code Content-Range: bytes 0-99/1234} header, else {@code
     * received}.
     */
    static long totalSize(String contentRange, long received) {
        if (contentRange != null) {
            int slash = contentRange.lastIndexOf('/');
            if (slash >= 0
                    && slash < contentRange.length() - 1
                    && contentRange.charAt(slash + 1) != '*') {
                try {
                    return Math.max(
                            received, Long.parseLong(contentRange.substring(slash + 1).trim()));
                } catch (NumberFormatException ignored) {
                    // fall through to the bytes received
                }
            }
        }
        return received;
    }

    private static Throwable unwrap(Throwable t) {
        while ((t instanceof CompletionException || t instanceof ExecutionException)
                && t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }

    /**
     * Checks before submission that each root's bucket answers with these settings: one {@code
     * ListObjectsV2} of at most one key under each prefix (an empty prefix is fine), all at once
     * through one client, closed on a thread of its own (its shutdown takes about 2 s), so this
     * returns as soon as every root has answered.
     *
     * @param roots image roots {@code s3://bucket/prefix}
     * @param settings endpoint, region, credentials and timeouts of the job's S3 client
     * @return each root that did not answer, with the reason naming the endpoint (unreachable
     *     endpoint, unknown bucket, denied credentials, timeout); empty when all did
     */
    public static Map<String, String> unreachableRoots(
            Collection<String> roots, S3ClientSettings settings) {
        Map<String, String> failed = new LinkedHashMap<>();
        // a listing's first byte may take longer than a GET's: only the attempt timeout limits it
        S3AsyncClient client = settings.withReadTimeoutOfTheAttempt().createClient(List.of());
        try {
            Map<String, CompletableFuture<?>> lists = new LinkedHashMap<>();
            for (String root : roots) {
                URI uri = URI.create(root.endsWith("/") ? root : root + "/");
                String prefix = uri.getPath().isEmpty() ? "" : uri.getPath().substring(1);
                lists.put(
                        root,
                        client.listObjectsV2(
                                ListObjectsV2Request.builder()
                                        .bucket(uri.getAuthority())
                                        .prefix(prefix)
                                        .maxKeys(1)
                                        .build()));
            }
            long deadline =
                    System.nanoTime() + settings.requestTimeout().toNanos() + 1_000_000_000L;
            for (Map.Entry<String, CompletableFuture<?>> list : lists.entrySet()) {
                try {
                    list.getValue()
                            .get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
                } catch (ExecutionException e) {
                    failed.put(
                            list.getKey(),
                            "S3 ("
                                    + settings
                                    + ") did not list "
                                    + list.getKey()
                                    + ": "
                                    + unwrap(e.getCause()).getMessage());
                } catch (TimeoutException e) {
                    failed.put(
                            list.getKey(),
                            "S3 (" + settings + ") did not answer for " + list.getKey());
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    failed.put(list.getKey(), "interrupted while checking " + list.getKey());
                    return failed;
                }
            }
        } finally {
            closeInBackground(client);
        }
        return failed;
    }

    /**
     * Closes {@code client} on a daemon thread of its own: the SDK closes a client's Netty event
     * loops with a quiet period of 2 s and waits for it (NettyNioAsyncHttpClient, SDK 2.57.8),
     * which held the planner, and so every job's start, 2.1 s after its check.
     */
    private static void closeInBackground(S3AsyncClient client) {
        Thread closer = new Thread(() -> client.close(), "stoker-s3-check-close");
        closer.setDaemon(true);
        closer.start();
    }

    /** See {@link #spillClient}. */
    private synchronized S3AsyncClient spillClient() {
        if (closed) {
            throw new IllegalStateException("the S3 image store is closed");
        }
        if (spillClient == null) {
            spillClient =
                    settings.withReadTimeoutOfTheAttempt()
                            .createClient(List.of(metrics.attemptCounter()));
        }
        return spillClient;
    }

    /** Closes the clients; GETs still in flight fail (callers that are closing ignore them). */
    @Override
    public void close() {
        client.close();
        synchronized (this) {
            closed = true;
            if (spillClient != null) {
                spillClient.close();
            }
        }
    }

    @Override
    public String toString() {
        return "S3ImageStore{maxObjectBytes="
                + maxObjectBytes
                + ", maxVideoBytes="
                + maxVideoBytes
                + "}";
    }
}
