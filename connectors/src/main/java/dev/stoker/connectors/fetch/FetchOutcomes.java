package dev.stoker.connectors.fetch;

import dev.stoker.operators.model.DeadLetter;
import dev.stoker.operators.model.FetchedRecord;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SftRecord;
import java.time.Duration;
import java.util.Collections;
import java.util.function.BiConsumer;
import java.util.function.BooleanSupplier;
import org.apache.flink.streaming.api.functions.async.ResultFuture;
import org.apache.flink.types.Either;

/** The dead letters both fetch operators (local filesystem and S3) emit, worded alike. */
final class FetchOutcomes {
    private FetchOutcomes() {}

    /**
     * Image or video {@code index} (0-based) of {@code record} could not be fetched: e.g. {@code
     * "video 1 of 2: 'clips/a.mp4' is ... bytes, above the video limit of ..."}.
     */
    static Either<DeadLetter, FetchedRecord> rejected(
            SftRecord record, Media media, int index, RejectedRecordException e) {
        int count = media == Media.VIDEO ? record.videos.length : record.images.length;
        String msg = media.word() + " " + (index + 1) + " of " + count + ": " + e.getMessage();
        return Either.Left(new DeadLetter(record.ref, e.reason(), msg));
    }

    /**
     * Frame {@code frame} (0-based) of video {@code video} (0-based), a video given as frame
     * images, could not be fetched; the frame is fetched as an image, so the reason is an image's
     * ({@link RejectReason#IMAGE_NOT_FOUND}, {@link RejectReason#IMAGE_TOO_LARGE}, ...): e.g.
     * {@code "video 1 of 2, frame 3 of 8: 'f/3.jpg' not found ..."}.
     */
    static Either<DeadLetter, FetchedRecord> rejectedFrame(
            SftRecord record, int video, int frame, RejectedRecordException e) {
        String msg =
                Media.VIDEO.word()
                        + " "
                        + (video + 1)
                        + " of "
                        + record.videos.length
                        + ", frame "
                        + (frame + 1)
                        + " of "
                        + record.videos[video].frames.length
                        + ": "
                        + e.getMessage();
        return Either.Left(new DeadLetter(record.ref, e.reason(), msg));
    }

    /**
     * Completes {@code result} with a fetch outcome, unless the operator is already closed: then
     * the record is in the async operator's checkpoint and a late completion (or the failure the
     * shutdown itself causes) must not reach a closed task.
     */
    static BiConsumer<Either<DeadLetter, FetchedRecord>, Throwable> completeUnlessClosed(
            ResultFuture<Either<DeadLetter, FetchedRecord>> result, BooleanSupplier closed) {
        return (value, error) -> {
            if (closed.getAsBoolean()) {
                return;
            }
            if (error != null) {
                result.completeExceptionally(error);
            } else {
                result.complete(Collections.singleton(value));
            }
        };
    }

    /**
     * The async operator's timeout fired before all images and videos of {@code record} arrived.
     */
    static Either<DeadLetter, FetchedRecord> timedOut(SftRecord record, Duration timeout) {
        return timedOut(record, timeout, "");
    }

    /**
     * The async operator's timeout fired before all images and videos of {@code record} arrived;
     * {@code progress} says where the unfinished reads were (empty if unknown).
     */
    static Either<DeadLetter, FetchedRecord> timedOut(
            SftRecord record, Duration timeout, String progress) {
        String msg =
                String.format(
                        java.util.Locale.ROOT,
                        "fetching %d image(s)%s took longer than %.1f s (stoker.fetch.timeout)%s",
                        record.images.length,
                        record.videos.length == 0
                                ? ""
                                : " and " + record.videos.length + " video(s)",
                        timeout.toMillis() / 1e3,
                        progress.isEmpty() ? "" : ": " + progress);
        return Either.Left(new DeadLetter(record.ref, RejectReason.FETCH_TIMEOUT, msg));
    }
}
