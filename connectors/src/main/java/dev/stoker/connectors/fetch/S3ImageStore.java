package dev.stoker.connectors.fetch;

import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import java.io.IOException;
import java.net.URI;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BiConsumer;
import software.amazon.awssdk.awscore.exception.AwsServiceException;
import software.amazon.awssdk.core.ResponseBytes;
import software.amazon.awssdk.core.async.AsyncResponseTransformer;
import software.amazon.awssdk.core.exception.ApiCallAttemptTimeoutException;
import software.amazon.awssdk.core.exception.ApiCallTimeoutException;
import software.amazon.awssdk.core.exception.SdkException;
import software.amazon.awssdk.services.s3.S3AsyncClient;
import software.amazon.awssdk.services.s3.model.GetObjectRequest;
import software.amazon.awssdk.services.s3.model.GetObjectResponse;
import software.amazon.awssdk.services.s3.model.ListObjectsV2Request;

/**
 * Reads image objects from S3 by path relative to an {@code s3://bucket/prefix/} image root, with
 * non-blocking GETs on a shared {@link S3AsyncClient}.
 *
 * <p>Paths are resolved and normalised like {@link ImageStore}'s: a key outside the image root's
 * prefix (or in another bucket) is rejected ({@link RejectReason#UNSAFE_PATH}) before any request.
 * Each GET asks for the range {@code bytes=0-maxObjectBytes}, so an oversized object costs at most
 * that many bytes and is rejected from its total size ({@link RejectReason#IMAGE_TOO_LARGE}).
 *
 * <p>Keys are the paths as written, without Unicode normalization. Outcomes, each naming the {@code
 * s3://} key: 404 is {@link RejectReason#IMAGE_NOT_FOUND} (naming the NFC or NFD spelling of the
 * path when an object of that name exists, found with a HEAD request); 403 and any error left after
 * the client's retries are {@link RejectReason#FETCH_FAILED} (with the HTTP status, S3 error code
 * and number of attempts); running out of the client's total request time, or every attempt timing
 * out, is {@link RejectReason#FETCH_TIMEOUT}. Retries themselves happen inside the client (see
 * {@link S3ClientSettings}).
 */
public final class S3ImageStore implements AutoCloseable {
    private final String root;
    private final String bucket;
    private final long maxObjectBytes;
    private final S3AsyncClient client;
    private final S3FetchMetrics metrics;
    private final PrefixRateLimiter rateLimiter;
    private final Duration hedgeAfter;

    /**
     * @param root image root {@code s3://bucket/prefix} (also {@code s3a://} or {@code s3p://})
     * @param maxObjectBytes largest accepted image object, in bytes
     * @param client the client to use; closed by {@link #close()}
     * @param metrics where to count requests, latency, bytes and failures
     * @param getsPerSecondPerPrefix client-side GET rate limit per key prefix; 0 = none
     * @param hedgeAfter send a second GET when the first has not completed after this long; {@link
     *     Duration#ZERO} = never
     */
    public S3ImageStore(
            String root,
            long maxObjectBytes,
            S3AsyncClient client,
            S3FetchMetrics metrics,
            double getsPerSecondPerPrefix,
            Duration hedgeAfter) {
        if (!isS3(root)) {
            throw new IllegalArgumentException("not an s3:// image root: " + root);
        }
        this.root = root.endsWith("/") ? root : root + "/";
        this.bucket = URI.create(this.root).getAuthority();
        this.maxObjectBytes = maxObjectBytes;
        this.client = client;
        this.metrics = metrics;
        this.rateLimiter = new PrefixRateLimiter(getsPerSecondPerPrefix);
        this.hedgeAfter = hedgeAfter;
    }

    /** Whether {@code root} is an S3 URI ({@code s3://}, {@code s3a://} or {@code s3p://}). */
    public static boolean isS3(String root) {
        String r = root.toLowerCase(java.util.Locale.ROOT);
        return r.startsWith("s3://") || r.startsWith("s3a://") || r.startsWith("s3p://");
    }

    /**
     * Starts reading the whole object at {@code relativePath}.
     *
     * @return the object's bytes, or a future failed with a {@link RejectedRecordException}
     *     (IMAGE_NOT_FOUND, IMAGE_TOO_LARGE, UNSAFE_PATH, FETCH_FAILED or FETCH_TIMEOUT); never
     *     another exception
     */
    public CompletableFuture<byte[]> read(String relativePath) {
        String key;
        try {
            key = ImageStore.resolveUnderRoot(root, relativePath).getPath().substring(1);
        } catch (RejectedRecordException e) {
            metrics.failed(e.reason());
            return CompletableFuture.failedFuture(e);
        }
        String where = "s3://" + bucket + "/" + key;
        GetObjectRequest request =
                GetObjectRequest.builder()
                        .bucket(bucket)
                        .key(key)
                        .range("bytes=0-" + maxObjectBytes)
                        .build();
        long start = System.nanoTime();
        metrics.started();
        CompletableFuture<byte[]> result;
        try {
            result =
                    rateLimiter
                            .permit(key)
                            .thenCompose(ready -> hedgedGet(request))
                            .handle(
                                    (response, error) -> {
                                        metrics.finished(start);
                                        if (error != null) {
                                            return emptyOrThrow(relativePath, where, error);
                                        }
                                        byte[] bytes = response.asByteArrayUnsafe();
                                        long total =
                                                totalSize(
                                                        response.response().contentRange(),
                                                        bytes.length);
                                        if (total > maxObjectBytes) {
                                            throw reject(
                                                    RejectReason.IMAGE_TOO_LARGE,
                                                    "'"
                                                            + relativePath
                                                            + "' ("
                                                            + where
                                                            + ") is "
                                                            + total
                                                            + " bytes, above the limit of "
                                                            + maxObjectBytes);
                                        }
                                        metrics.fetched(bytes.length);
                                        return bytes;
                                    });
        } catch (RuntimeException e) { // e.g. the client is already closed
            metrics.finished(start);
            result = CompletableFuture.failedFuture(e);
        }
        return result.exceptionallyCompose(
                e -> {
                    Throwable cause = unwrap(e);
                    if (cause instanceof RejectedRecordException rejected) {
                        return rejected.reason() == RejectReason.IMAGE_NOT_FOUND
                                ? withVariantHint(rejected, relativePath)
                                : CompletableFuture.failedFuture(cause);
                    }
                    metrics.failed(RejectReason.FETCH_FAILED);
                    return CompletableFuture.failedFuture(
                            RejectedRecordException.transientFailure(
                                    RejectReason.FETCH_FAILED,
                                    "GET " + where + " failed: " + cause,
                                    cause));
                });
    }

    /**
     * {@code notFound}, with the hint that names the NFC or NFD spelling of {@code relativePath}
     * when an object of that name exists (a HEAD request per differing spelling, so none for ASCII
     * names).
     */
    private CompletableFuture<byte[]> withVariantHint(
            RejectedRecordException notFound, String relativePath) {
        CompletableFuture<String> hint = CompletableFuture.completedFuture("");
        for (String variant : ImageStore.normalizationVariants(relativePath)) {
            hint =
                    hint.thenCompose(
                            found ->
                                    found.isEmpty()
                                            ? exists(variant)
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
                                                RejectReason.IMAGE_NOT_FOUND,
                                                notFound.getMessage() + h)));
    }

    /** Whether an object exists at {@code relativePath} (HEAD); false on any error. */
    private CompletableFuture<Boolean> exists(String relativePath) {
        try {
            String key = ImageStore.resolveUnderRoot(root, relativePath).getPath().substring(1);
            return client.headObject(r -> r.bucket(bucket).key(key))
                    .handle((response, error) -> error == null);
        } catch (RejectedRecordException | RuntimeException e) {
            return CompletableFuture.completedFuture(false);
        }
    }

    /**
     * The GET, and when {@code hedgeAfter} is set and it has not completed by then, a second
     * identical one: the first success wins and the other is cancelled (its connection aborted).
     * Fails only when every request sent failed, with the last failure.
     */
    private CompletableFuture<ResponseBytes<GetObjectResponse>> hedgedGet(
            GetObjectRequest request) {
        CompletableFuture<ResponseBytes<GetObjectResponse>> first =
                client.getObject(request, AsyncResponseTransformer.toBytes());
        if (hedgeAfter.isZero()) {
            return first;
        }
        CompletableFuture<ResponseBytes<GetObjectResponse>> winner = new CompletableFuture<>();
        List<CompletableFuture<ResponseBytes<GetObjectResponse>>> sent =
                new CopyOnWriteArrayList<>(List.of(first));
        AtomicInteger pending = new AtomicInteger(1);
        BiConsumer<ResponseBytes<GetObjectResponse>, Throwable> settle =
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
                            if (winner.isDone() || !pending.compareAndSet(1, 2)) {
                                return;
                            }
                            metrics.hedged();
                            CompletableFuture<ResponseBytes<GetObjectResponse>> second =
                                    client.getObject(request, AsyncResponseTransformer.toBytes());
                            sent.add(second);
                            second.whenComplete(settle);
                        });
        winner.whenComplete((r, e) -> sent.forEach(f -> f.cancel(true)));
        return winner;
    }

    private byte[] emptyOrThrow(String relativePath, String where, Throwable error) {
        Throwable t = unwrap(error);
        String attempts = attempts(t);
        if (t instanceof AwsServiceException e) {
            int status = e.statusCode();
            String code = e.awsErrorDetails() != null ? e.awsErrorDetails().errorCode() : null;
            String statusText = "HTTP " + status + (code != null ? " " + code : "");
            if (status == 404) {
                throw reject(
                        RejectReason.IMAGE_NOT_FOUND,
                        "'" + relativePath + "' not found: " + where + " (" + statusText + ")");
            }
            if (status == 416) {
                return new byte
                        [0]; // an empty object has no byte 0; the decoder rejects it as corrupt
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
                    "GET " + where + " did not complete in time" + attempts,
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
     * Whether {@code t} or one of its causes is the SDK's call or attempt timeout, or the Netty
     * client's {@code IOException("Request cancelled")}: its {@code FutureCancelHandler} raises
     * that, without a cause, when the SDK cancels an attempt on its timeout, and now and then it
     * reaches the caller instead of the {@link ApiCallAttemptTimeoutException} (this store cancels
     * a request only after the GET has settled: a hedged request that lost).
     */
    private static boolean isTimeout(Throwable t) {
        for (Throwable c = t; c != null; c = c.getCause()) {
            if (c instanceof ApiCallTimeoutException
                    || c instanceof ApiCallAttemptTimeoutException
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

    private static String attempts(Throwable t) {
        if (t instanceof SdkException e && e.numAttempts() != null) {
            return " after " + e.numAttempts() + " attempt(s)";
        }
        return "";
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
     * Checks before submission that {@code root}'s bucket answers with these settings: one {@code
     * ListObjectsV2} of at most one key under the prefix (an empty prefix is fine).
     *
     * @param root image root {@code s3://bucket/prefix}
     * @param settings endpoint, region, credentials and timeouts of the job's S3 client
     * @throws IOException naming the endpoint and the reason (unreachable endpoint, unknown bucket,
     *     denied credentials, timeout)
     */
    public static void checkReachable(String root, S3ClientSettings settings) throws IOException {
        URI uri = URI.create(root.endsWith("/") ? root : root + "/");
        String prefix = uri.getPath().isEmpty() ? "" : uri.getPath().substring(1);
        try (S3AsyncClient client = settings.createClient(List.of())) {
            client.listObjectsV2(
                            ListObjectsV2Request.builder()
                                    .bucket(uri.getAuthority())
                                    .prefix(prefix)
                                    .maxKeys(1)
                                    .build())
                    .get(settings.requestTimeout.toMillis() + 1000, TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) {
            throw new IOException(
                    "S3 ("
                            + settings
                            + ") did not list "
                            + root
                            + ": "
                            + unwrap(e.getCause()).getMessage(),
                    e.getCause());
        } catch (java.util.concurrent.TimeoutException e) {
            throw new IOException("S3 (" + settings + ") did not answer for " + root, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted while checking " + root, e);
        }
    }

    /** Closes the client; GETs still in flight fail (callers that are closing ignore them). */
    @Override
    public void close() {
        client.close();
    }

    @Override
    public String toString() {
        return "S3ImageStore{root=" + root + ", maxObjectBytes=" + maxObjectBytes + "}";
    }
}
