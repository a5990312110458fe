package dev.stoker.connectors.fetch;

import dev.stoker.operators.metrics.MetricNames;
import dev.stoker.operators.model.DeadLetter;
import dev.stoker.operators.model.FetchedRecord;
import dev.stoker.operators.model.ImageRef;
import dev.stoker.operators.model.PerSource;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.VideoRef;
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
 * Either.Left}) naming the first rejected one (images in record order, then videos) and its key;
 * the frames of a video given as frame images are fetched as images (the image size limit and
 * reasons, counted as images), and a dead letter names the video and the frame. A record exceeding
 * the operator timeout becomes a {@link RejectReason#FETCH_TIMEOUT} dead letter that says where
 * each of its unfinished GETs was (waiting for a connection, or attempts made and for how long);
 * keep {@link S3ClientSettings#requestTimeout} below it so the client gives up (and frees its
 * connection) first. Transient failures (5xx or throttling after the client's retries, timeouts,
 * resets) follow the {@link TransientFailurePolicy}: a dead letter, or a failed task so the job
 * fails over and retries from its last checkpoint.
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
        S3ImageStore.Get[] reads = new S3ImageStore.Get[FramedVideos.objects(record)];
        String root = roots.of(record.ref);
        int r = 0;
        for (ImageRef image : record.images) {
            reads[r++] = store.read(root, image.path, Media.IMAGE);
        }
        for (VideoRef video : record.videos) {
            if (video.givenAsFrames()) {
                for (String frame : video.frames) {
                    reads[r++] = store.read(root, frame, Media.IMAGE);
                }
            } else {
                reads[r++] = store.read(root, video.path, Media.VIDEO);
            }
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
                Either<DeadLetter, FetchedRecord> dead = rejected(record, i, rejected);
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
        int images = record.images.length;
        for (int i = 0; i < images; i++) {
            fetched.fetched(bytes[i].length);
        }
        FetchedRecord result = new FetchedRecord(record, Arrays.copyOfRange(bytes, 0, images));
        result.videoBytes = new byte[record.videos.length][];
        result.videoFrames = new byte[FramedVideos.any(record) ? record.videos.length : 0][][];
        int r = images;
        for (int v = 0; v < record.videos.length; v++) {
            String[] frames = record.videos[v].frames;
            if (frames == null) {
                result.videoBytes[v] = bytes[r++];
                fetched.fetchedVideo(result.videoBytes[v].length);
            } else {
                result.videoFrames[v] = Arrays.copyOfRange(bytes, r, r + frames.length);
                r += frames.length;
                for (byte[] frame : result.videoFrames[v]) {
                    fetched.fetched(frame.length);
                }
            }
        }
        return Either.Right(result);
    }

    /** The dead letter of read {@code read} (images, then each video's file or frames). */
    private static Either<DeadLetter, FetchedRecord> rejected(
            SftRecord record, int read, RejectedRecordException e) {
        int images = record.images.length;
        if (read < images) {
            return FetchOutcomes.rejected(record, Media.IMAGE, read, e);
        }
        int r = images;
        for (int v = 0; v < record.videos.length; v++) {
            String[] frames = record.videos[v].frames;
            int n = frames == null ? 1 : frames.length;
            if (read < r + n) {
                return frames == null
                        ? FetchOutcomes.rejected(record, Media.VIDEO, v, e)
                        : FetchOutcomes.rejectedFrame(record, v, read - r, e);
            }
            r += n;
        }
        throw new IllegalArgumentException("read " + read + " of a record with " + r + " reads");
    }

    /** The path of read {@code read} (images, then each video's file or frames). */
    private static String pathOf(SftRecord record, int read) {
        if (read < record.images.length) {
            return record.images[read].path;
        }
        int r = record.images.length;
        for (VideoRef video : record.videos) {
            if (!video.givenAsFrames()) {
                if (read == r++) {
                    return video.path;
                }
            } else if (read < r + video.frames.length) {
                return video.frames[read - r];
            } else {
                r += video.frames.length;
            }
        }
        throw new IllegalArgumentException("read " + read + " of a record with " + r + " reads");
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
        for (int i = 0; i < reads.length; i++) {
            if (!reads[i].isDone()) {
                unfinished.add("'" + pathOf(record, i) + "' " + reads[i].progress());
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
