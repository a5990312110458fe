package dev.stoker.connectors.fetch;

import dev.stoker.operators.metrics.MetricNames;
import dev.stoker.operators.model.DeadLetter;
import dev.stoker.operators.model.FetchedRecord;
import dev.stoker.operators.model.PerSource;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SftRecord;
import java.time.Duration;
import java.util.Arrays;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.Map;
import java.util.StringJoiner;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.streaming.api.functions.async.ResultFuture;
import org.apache.flink.streaming.api.functions.async.RichAsyncFunction;
import org.apache.flink.types.Either;

/**
 * Async I/O operator that fetches all images and videos of a record from an {@code s3://} image
 * root with one {@link software.amazon.awssdk.services.s3.S3AsyncClient} per subtask (non-blocking:
 * no I/O threads of its own).
 *
 * <p>Use with {@code AsyncDataStream.unorderedWait(..., timeout, capacity)}; the capacity counts
 * records, and {@link S3ClientSettings#maxConnections} bounds their GETs on the wire (the others
 * wait for a connection in the {@link S3ImageStore}). A record's images and videos are requested
 * concurrently; if any of them is rejected the record becomes a {@link DeadLetter} ({@code
 * Either.Left}) naming the first rejected one (images in record order, then videos) and its key. A
 * record exceeding the operator timeout becomes a {@link RejectReason#FETCH_TIMEOUT} dead letter
 * that says where each of its unfinished GETs was (waiting for a connection, or attempts made and
 * for how long); keep {@link S3ClientSettings#requestTimeout} below it so the client gives up (and
 * frees its connection) first. Transient failures (5xx or throttling after the client's retries,
 * timeouts, resets) follow the {@link TransientFailurePolicy}: a dead letter, or a failed task so
 * the job fails over and retries from its last checkpoint.
 *
 * <p>{@link #close()} marks the function closed before closing the client: GETs that fail because
 * of the close are ignored (their records are in the operator's checkpoint), so stop-with-savepoint
 * finishes cleanly. Metrics: see {@link S3FetchMetrics} (group {@code s3}) plus {@code
 * imagesFetched}, {@code imageBytesFetched}, {@code videosFetched} and {@code videoBytesFetched}
 * like {@link ImageFetchFunction}.
 */
public final class S3ImageFetchFunction
        extends RichAsyncFunction<SftRecord, Either<DeadLetter, FetchedRecord>> {
    private static final long serialVersionUID = 1L;

    private final PerSource<String> roots;
    private final long maxObjectBytes;
    private final long maxVideoBytes;
    private final S3ClientSettings settings;
    private final Duration timeout;
    private final TransientFailurePolicy transientFailures;
    private transient S3ImageStore store;
    private transient S3FetchMetrics metrics;
    private transient volatile boolean closed;
    private transient FetchCounters fetched;
    private transient Map<SftRecord, S3ImageStore.Get[]> inFlight;

    /**
     * @param roots each source's image root {@code s3://bucket/prefix} (one client serves all)
     * @param maxObjectBytes largest accepted image object, in bytes
     * @param maxVideoBytes largest accepted video object, in bytes
     * @param settings client settings (endpoint, credentials, retries, connections)
     * @param timeout the async operator's timeout, for the dead letter's message
     * @param transientFailures what a transient failure after all retries becomes
     */
    public S3ImageFetchFunction(
            PerSource<String> roots,
            long maxObjectBytes,
            long maxVideoBytes,
            S3ClientSettings settings,
            Duration timeout,
            TransientFailurePolicy transientFailures) {
        this.roots = roots;
        this.maxObjectBytes = maxObjectBytes;
        this.maxVideoBytes = maxVideoBytes;
        this.settings = settings;
        this.timeout = timeout;
        this.transientFailures = transientFailures;
    }

    @Override
    public void open(OpenContext openContext) {
        metrics =
                new S3FetchMetrics(
                        getRuntimeContext().getMetricGroup().addGroup(MetricNames.Fetch.S3_GROUP));
        store = new S3ImageStore(maxObjectBytes, maxVideoBytes, settings, metrics);
        inFlight = Collections.synchronizedMap(new IdentityHashMap<>());
        fetched = new FetchCounters(getRuntimeContext().getMetricGroup());
    }

    @Override
    public void asyncInvoke(
            SftRecord record, ResultFuture<Either<DeadLetter, FetchedRecord>> result) {
        int images = record.images.length;
        S3ImageStore.Get[] reads = new S3ImageStore.Get[images + record.videos.length];
        String root = roots.of(record.ref);
        for (int i = 0; i < reads.length; i++) {
            reads[i] =
                    i < images
                            ? store.read(root, record.images[i].path, Media.IMAGE)
                            : store.read(root, record.videos[i - images].path, Media.VIDEO);
        }
        inFlight.put(record, reads);
        CompletableFuture.allOf(reads)
                .handle(
                        (ignored, error) -> {
                            inFlight.remove(record);
                            return toResult(record, reads);
                        })
                .whenComplete(FetchOutcomes.completeUnlessClosed(result, () -> closed));
    }

    private Either<DeadLetter, FetchedRecord> toResult(SftRecord record, S3ImageStore.Get[] reads) {
        int images = record.images.length;
        byte[][] bytes = new byte[reads.length][];
        for (int i = 0; i < reads.length; i++) {
            try {
                bytes[i] = reads[i].join();
            } catch (CompletionException e) {
                RejectedRecordException rejected =
                        e.getCause() instanceof RejectedRecordException r
                                ? r
                                : new RejectedRecordException(
                                        RejectReason.FETCH_FAILED, String.valueOf(e.getCause()));
                Either<DeadLetter, FetchedRecord> dead =
                        i < images
                                ? FetchOutcomes.rejected(record, Media.IMAGE, i, rejected)
                                : FetchOutcomes.rejected(record, Media.VIDEO, i - images, rejected);
                if (rejected.isTransient()) {
                    metrics.transientFailure();
                    if (transientFailures == TransientFailurePolicy.FAIL_OVER) {
                        // the dead letter's text, escaped; the cause is the client's failure
                        // (the rejection's own message repeats the record's image path raw)
                        throw new TransientFetchException(
                                dead.left().toString(), rejected.getCause());
                    }
                }
                return dead;
            }
        }
        for (int i = 0; i < bytes.length; i++) {
            if (i < images) {
                fetched.fetched(bytes[i].length);
            } else {
                fetched.fetchedVideo(bytes[i].length);
            }
        }
        FetchedRecord result = new FetchedRecord(record, Arrays.copyOfRange(bytes, 0, images));
        result.videoBytes = Arrays.copyOfRange(bytes, images, bytes.length);
        return Either.Right(result);
    }

    @Override
    public void timeout(SftRecord record, ResultFuture<Either<DeadLetter, FetchedRecord>> result) {
        metrics.failed(RejectReason.FETCH_TIMEOUT);
        metrics.transientFailure();
        Either<DeadLetter, FetchedRecord> dead =
                FetchOutcomes.timedOut(record, timeout, progress(record, inFlight.remove(record)));
        if (transientFailures == TransientFailurePolicy.FAIL_OVER) {
            result.completeExceptionally(new TransientFetchException(dead.left().toString(), null));
        } else {
            result.complete(Collections.singleton(dead));
        }
    }

    /**
     * Where each unfinished GET of a timed-out record is, e.g. {@code "'a.jpg' waited 4.2 s ..."}.
     */
    private static String progress(SftRecord record, S3ImageStore.Get[] reads) {
        if (reads == null) {
            return "";
        }
        StringJoiner unfinished = new StringJoiner("; ");
        int images = record.images.length;
        for (int i = 0; i < reads.length; i++) {
            if (!reads[i].isDone()) {
                String path = i < images ? record.images[i].path : record.videos[i - images].path;
                unfinished.add("'" + path + "' " + reads[i].progress());
            }
        }
        return unfinished.toString();
    }

    @Override
    public void close() {
        closed = true;
        if (store != null) {
            store.close();
        }
    }
}
