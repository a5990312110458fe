package dev.stoker.connectors.fetch;

import dev.stoker.operators.model.DeadLetter;
import dev.stoker.operators.model.FetchedRecord;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SftRecord;
import java.time.Duration;
import org.apache.flink.types.Either;

/** The dead letters both image fetch operators (local filesystem and S3) emit, worded alike. */
final class FetchOutcomes {
    private FetchOutcomes() {}

    /** Image {@code index} (0-based) of {@code record} could not be fetched. */
    static Either<DeadLetter, FetchedRecord> imageRejected(
            SftRecord record, int index, RejectedRecordException e) {
        String msg = "image " + (index + 1) + " of " + record.images.length + ": " + e.getMessage();
        return Either.Left(new DeadLetter(record.ref, e.reason(), msg));
    }

    /** The async operator's timeout fired before all images of {@code record} arrived. */
    static Either<DeadLetter, FetchedRecord> timedOut(SftRecord record, Duration timeout) {
        String msg = "fetching " + record.images.length + " image(s) took longer than " + timeout;
        return Either.Left(new DeadLetter(record.ref, RejectReason.FETCH_TIMEOUT, msg));
    }
}
