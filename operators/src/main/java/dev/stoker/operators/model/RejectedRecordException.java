package dev.stoker.operators.model;

/**
 * Thrown by a transform when a record cannot be turned into a sample for a deterministic reason
 * (bad JSON, corrupt image, ...). Operators catch it and emit a {@link DeadLetter}; it never fails
 * the job.
 */
public class RejectedRecordException extends Exception {
    private static final long serialVersionUID = 1L;

    private final RejectReason reason;
    private final boolean transientFailure;

    public RejectedRecordException(RejectReason reason, String message) {
        this(reason, message, null, false);
    }

    public RejectedRecordException(RejectReason reason, String message, Throwable cause) {
        this(reason, message, cause, false);
    }

    private RejectedRecordException(
            RejectReason reason, String message, Throwable cause, boolean transientFailure) {
        super(message, cause);
        this.reason = reason;
        this.transientFailure = transientFailure;
    }

    /**
     * A rejection that another attempt might not repeat (HTTP 5xx or throttling after the client's
     * retries, timeouts, connection resets), as opposed to one the input decides.
     */
    public static RejectedRecordException transientFailure(
            RejectReason reason, String message, Throwable cause) {
        return new RejectedRecordException(reason, message, cause, true);
    }

    /** Whether this rejection is a {@link #transientFailure transient failure}. */
    public boolean isTransient() {
        return transientFailure;
    }

    public RejectReason reason() {
        return reason;
    }
}
