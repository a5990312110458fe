package dev.stoker.connectors.fetch;

import com.codahale.metrics.SlidingWindowReservoir;
import dev.stoker.operators.metrics.MetricNames;
import dev.stoker.operators.model.DeadLetter;
import dev.stoker.operators.model.FetchedRecord;
import dev.stoker.operators.model.PerSource;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SftRecord;
import java.time.Duration;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.function.BiConsumer;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.dropwizard.metrics.DropwizardHistogramWrapper;
import org.apache.flink.metrics.Histogram;
import org.apache.flink.streaming.api.functions.async.ResultFuture;
import org.apache.flink.streaming.api.functions.async.RichAsyncFunction;
import org.apache.flink.types.Either;
import org.apache.flink.util.concurrent.ExecutorThreadFactory;

/**
 * Async I/O operator that fetches all images and videos of a record from the {@link ImageStore}
 * (images first, then videos, one at a time; the first that fails ends the record's fetch). The
 * frames of a video given as frame images are fetched as images (the image size limit, the image
 * reasons, counted in {@code imagesFetched} / {@code imageBytesFetched}), in order, into {@link
 * FetchedRecord#videoFrames}; a frame that cannot be read names the video and the frame ({@code
 * video 1 of 1, frame 3 of 8: ...}).
 *
 * <p>Use with {@code AsyncDataStream.unorderedWait(..., timeout, capacity)}: at most {@code
 * capacity} records are in flight per subtask, served by a pool of {@code threads} I/O threads. A
 * record whose images or videos cannot be read becomes a {@link DeadLetter} ({@code Either.Left})
 * naming the image or video; a record that exceeds the async timeout becomes a {@link
 * RejectReason#FETCH_TIMEOUT} dead letter instead of failing the job.
 *
 * <p>A video larger than the spill threshold is copied into a file of the subtask's {@link
 * SpillDirectory} instead of memory ({@link ImageStore#readVideo}) and handed on in {@link
 * FetchedRecord#videoFiles} (the media stage deletes it). The files of a record that does not go on
 * (another of its videos rejected, a read that finishes after the record's timeout) are deleted
 * here; what is left when the subtask closes or fails goes with its spill directory.
 */
public final class ImageFetchFunction
        extends RichAsyncFunction<SftRecord, Either<DeadLetter, FetchedRecord>> {
    private static final long serialVersionUID = 1L;

    private final PerSource<ImageStore> stores;
    private final int threads;
    private final Duration timeout;
    private final SpillSettings spill;
    private transient SpillDirectory spillDirectory;
    private transient Set<SftRecord> inFlight;
    private transient ExecutorService executor;
    private transient volatile boolean closed;
    private transient FetchCounters fetched;
    private transient Histogram readLatencyMs;

    /**
     * @param stores each source's image store (its image root)
     * @param threads I/O threads per subtask
     * @param timeout the async operator's timeout, for the dead letter's message
     * @param spill which videos go to spill files, and where
     */
    public ImageFetchFunction(
            PerSource<ImageStore> stores, int threads, Duration timeout, SpillSettings spill) {
        this.stores = stores;
        this.threads = threads;
        this.timeout = timeout;
        this.spill = spill;
    }

    /**
     * Creates the subtask's spill directory and I/O threads.
     *
     * @throws java.io.IOException if the spill directory cannot be created
     */
    @Override
    public void open(OpenContext openContext) throws java.io.IOException {
        spillDirectory = SpillDirectory.create(spill, getRuntimeContext());
        inFlight = Collections.newSetFromMap(Collections.synchronizedMap(new IdentityHashMap<>()));
        executor =
                Executors.newFixedThreadPool(
                        threads, new ExecutorThreadFactory("stoker-image-fetch"));
        fetched = new FetchCounters(getRuntimeContext().getMetricGroup());
        // the counterpart of the S3 path's s3.getLatencyMs: one image read, last 10,000 reads
        readLatencyMs =
                getRuntimeContext()
                        .getMetricGroup()
                        .addGroup(MetricNames.Fetch.FS_GROUP)
                        .histogram(
                                MetricNames.Fetch.READ_LATENCY_MS,
                                new DropwizardHistogramWrapper(
                                        new com.codahale.metrics.Histogram(
                                                new SlidingWindowReservoir(10_000))));
    }

    @Override
    public void asyncInvoke(
            SftRecord record, ResultFuture<Either<DeadLetter, FetchedRecord>> result) {
        inFlight.add(record);
        BiConsumer<Either<DeadLetter, FetchedRecord>, Throwable> complete =
                FetchOutcomes.completeUnlessClosed(result, () -> closed);
        CompletableFuture.supplyAsync(() -> fetchAll(record), executor)
                .whenComplete(
                        (value, error) -> {
                            if (inFlight.remove(record)) {
                                complete.accept(value, error);
                            } else if (value != null && value.isRight()) {
                                // timed out: its dead letter is out, and nobody takes its files
                                deleteSpillFiles(value.right());
                            }
                        });
    }

    private Either<DeadLetter, FetchedRecord> fetchAll(SftRecord record) {
        byte[][] bytes = new byte[record.images.length][];
        byte[][] videoBytes = new byte[record.videos.length][];
        ImageStore store = stores.of(record.ref);
        for (int i = 0; i < bytes.length; i++) {
            try {
                bytes[i] = read(store, record.images[i].path, Media.IMAGE);
            } catch (RejectedRecordException e) {
                return FetchOutcomes.rejected(record, Media.IMAGE, i, e);
            }
            fetched.fetched(bytes[i].length);
        }
        FetchedRecord result = new FetchedRecord(record, bytes);
        result.videoBytes = videoBytes;
        result.videoFrames = new byte[FramedVideos.any(record) ? videoBytes.length : 0][][];
        String[] files = new String[videoBytes.length];
        for (int i = 0; i < videoBytes.length; i++) {
            String[] frames = record.videos[i].frames;
            if (frames != null) {
                byte[][] frameBytes = new byte[frames.length][];
                for (int f = 0; f < frames.length; f++) {
                    try {
                        frameBytes[f] = read(store, frames[f], Media.IMAGE);
                    } catch (RejectedRecordException e) {
                        deleteSpillFiles(result);
                        return FetchOutcomes.rejectedFrame(record, i, f, e);
                    }
                    fetched.fetched(frameBytes[f].length);
                }
                result.videoFrames[i] = frameBytes;
                continue;
            }
            long start = System.nanoTime();
            FetchedObject video;
            try {
                video = store.readVideo(record.videos[i].path, spillDirectory);
            } catch (RejectedRecordException e) {
                deleteSpillFiles(result);
                return FetchOutcomes.rejected(record, Media.VIDEO, i, e);
            } finally {
                readLatencyMs.update((System.nanoTime() - start) / 1_000_000);
            }
            videoBytes[i] = video.bytes();
            if (video.file() != null) {
                files[i] = video.file().toString();
                result.videoFiles = files;
            }
            fetched.fetchedVideo(video.size());
        }
        return Either.Right(result);
    }

    private byte[] read(ImageStore store, String path, Media media) throws RejectedRecordException {
        long start = System.nanoTime();
        try {
            return store.read(path, media);
        } finally {
            readLatencyMs.update((System.nanoTime() - start) / 1_000_000);
        }
    }

    /** Deletes the spill files of {@code record}'s videos. */
    private static void deleteSpillFiles(FetchedRecord record) {
        for (String file : record.videoFiles) {
            if (file != null) {
                SpillDirectory.deleteQuietly(java.nio.file.Path.of(file));
            }
        }
    }

    /**
     * The record's dead letter, unless its read completed just now (then its outcome completes the
     * record); a read completing later deletes its spill files.
     */
    @Override
    public void timeout(SftRecord record, ResultFuture<Either<DeadLetter, FetchedRecord>> result) {
        if (inFlight.remove(record)) {
            result.complete(Collections.singleton(FetchOutcomes.timedOut(record, timeout)));
        }
    }

    /**
     * Stops the I/O threads, then deletes the spill directory with the files of records in flight.
     */
    @Override
    public void close() {
        closed = true;
        if (executor != null) {
            executor.shutdownNow();
        }
        if (spillDirectory != null) {
            spillDirectory.close();
        }
    }
}
