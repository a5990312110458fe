package dev.stoker.operators.model;

/**
 * Thrown by a transform when a record cannot be turned into a sample for a deterministic reason
 * (bad JSON, corrupt image, ...). Operators catch it and emit a {@link DeadLetter}; it never fails
 * the job.
 */
public class RejectedRecordException extends Exception {
    private static final long serialVersionUID = 1L;

    private final RejectReason reason;

    public RejectedRecordException(RejectReason reason, String message) {
        super(message);
        this.reason = reason;
    }

    public RejectedRecordException(RejectReason reason, String message, Throwable cause) {
        super(message, cause);
        this.reason = reason;
    }

    public RejectReason reason() {
        return reason;
    }
}
