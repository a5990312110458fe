package dev.stoker.operators.model;

/**
 * A rejected record: where it came from, the stage and reason it was rejected, and a human-readable
 * message. Written to the dead-letter output and counted per reason; its slot in the batch plan is
 * left empty.
 */
public class DeadLetter {
    public RecordRef ref;
    public Stage stage;
    public RejectReason reason;
    public String message;

    public DeadLetter() {}

    public DeadLetter(RecordRef ref, RejectReason reason, String message) {
        this.ref = ref;
        this.stage = reason.stage();
        this.reason = reason;
        this.message = message;
    }

    /** A dead letter for {@code ref} from a caught rejection. */
    public static DeadLetter of(RecordRef ref, RejectedRecordException e) {
        return new DeadLetter(ref, e.reason(), e.getMessage());
    }

    /**
     * The dead letter on one line for logs and exception messages, its record text (file and record
     * id by {@link RecordRef#toString}, the message) escaped with {@link PrintableText}: a record
     * can hold control characters, bidi overrides or lone surrogates, and a log line must not be
     * able to carry them to a terminal.
     */
    @Override
    public String toString() {
        return ref + ": " + stage + "/" + reason + ": " + PrintableText.escape(message);
    }
}
