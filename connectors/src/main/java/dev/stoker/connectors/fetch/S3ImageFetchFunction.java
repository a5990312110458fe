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
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.Map;
import java.util.StringJoiner;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.function.BiConsumer;
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
 * <p>A video larger than the spill threshold is streamed into a file of the subtask's {@link
 * SpillDirectory} instead of memory, and handed on in {@link FetchedRecord#videoFiles} (the media
 * stage deletes it). The files of a record that does not go on (another of its images or videos
 * rejected, the operator's timeout, a GET that completes after it) are deleted here; what is left
 * when the subtask closes or fails goes with its spill directory.
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
    private final SpillSettings spill;
    private transient SpillDirectory spillDirectory;
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
     * @param spill which videos go to spill files, and where
     */
    public S3ImageFetchFunction(
            PerSource<String> roots,
            long maxObjectBytes,
            long maxVideoBytes,
            S3ClientSettings settings,
            Duration timeout,
            TransientFailurePolicy transientFailures,
            SpillSettings spill) {
        this.roots = roots;
        this.maxObjectBytes = maxObjectBytes;
        this.maxVideoBytes = maxVideoBytes;
        this.settings = settings;
        this.timeout = timeout;
        this.transientFailures = transientFailures;
        this.spill = spill;
    }

    /**
     * Creates the subtask's spill directory and the S3 client.
     *
     * @throws java.io.IOException if the spill directory cannot be created
     */
    @Override
    public void open(OpenContext openContext) throws java.io.IOException {
        spillDirectory = SpillDirectory.create(spill, getRuntimeContext());
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
                reads[r++] = store.read(root, video.path, Media.VIDEO, spillDirectory);
            }
        }
        inFlight.put(record, reads);
        BiConsumer<Either<DeadLetter, FetchedRecord>, Throwable> complete =
                FetchOutcomes.completeUnlessClosed(result, () -> closed);
        CompletableFuture.allOf(reads)
                .handle(
                        (ignored, error) -> {
                            if (inFlight.remove(record) == null) {
                                // timed out: its dead letter is out, and nobody takes its files
                                deleteSpillFiles(reads);
                                return null;
                            }
                            return toResult(record, reads);
                        })
                .whenComplete(
                        (value, error) -> {
                            if (value != null || error != null) {
                                complete.accept(value, error);
                            }
                        });
    }

    private Either<DeadLetter, FetchedRecord> toResult(SftRecord record, S3ImageStore.Get[] reads) {
        FetchedObject[] objects = new FetchedObject[reads.length];
        for (int i = 0; i < reads.length; i++) {
            try {
                objects[i] = reads[i].join();
            } catch (CompletionException e) {
                deleteSpillFiles(reads);
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
        byte[][] imageBytes = new byte[images][];
        for (int i = 0; i < images; i++) {
            imageBytes[i] = objects[i].bytes();
            fetched.fetched(objects[i].size());
        }
        FetchedRecord result = new FetchedRecord(record, imageBytes);
        result.videoBytes = new byte[record.videos.length][];
        result.videoFrames = new byte[FramedVideos.any(record) ? record.videos.length : 0][][];
        String[] files = new String[record.videos.length];
        boolean spilled = false;
        int r = images;
        for (int v = 0; v < record.videos.length; v++) {
            String[] frames = record.videos[v].frames;
            if (frames == null) {
                FetchedObject video = objects[r++];
                result.videoBytes[v] = video.bytes();
                if (video.file() != null) {
                    files[v] = video.file().toString();
                    spilled = true;
                }
                fetched.fetchedVideo(video.size());
            } else {
                byte[][] frameBytes = new byte[frames.length][];
                for (int f = 0; f < frames.length; f++) {
                    FetchedObject frame = objects[r++]; // fetched as an image: in memory
                    frameBytes[f] = frame.bytes();
                    fetched.fetched(frame.size());
                }
                result.videoFrames[v] = frameBytes;
            }
        }
        if (spilled) {
            result.videoFiles = files;
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

    /** Deletes the spill files of the reads that completed with one. */
    private static void deleteSpillFiles(S3ImageStore.Get[] reads) {
        for (S3ImageStore.Get read : reads) {
            if (read.isDone() && !read.isCompletedExceptionally()) {
                SpillDirectory.deleteQuietly(read.join().file());
            }
        }
    }

    /**
     * The record's dead letter, unless its reads completed just now (then their outcome completes
     * the record); reads completing later delete their spill files.
     */
    @Override
    public void timeout(SftRecord record, ResultFuture<Either<DeadLetter, FetchedRecord>> result) {
        S3ImageStore.Get[] reads = inFlight.remove(record);
        if (reads == null) {
            return;
        }
        metrics.failed(RejectReason.FETCH_TIMEOUT);
        metrics.transientFailure();
        Either<DeadLetter, FetchedRecord> dead =
                FetchOutcomes.timedOut(record, timeout, progress(record, reads));
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
        StringJoiner unfinished = new StringJoiner("; ");
        for (int i = 0; i < reads.length; i++) {
            if (!reads[i].isDone()) {
                unfinished.add("'" + pathOf(record, i) + "' " + reads[i].progress());
            }
        }
        return unfinished.toString();
    }

    /** Closes the client, then deletes the spill directory with the files of records in flight. */
    @Override
    public void close() {
        closed = true;
        if (store != null) {
            store.close();
        }
        if (spillDirectory != null) {
            spillDirectory.close();
        }
    }
}
