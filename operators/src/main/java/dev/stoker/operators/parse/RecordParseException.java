package dev.stoker.operators.parse;

import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.RejectedRecordException;

/**
 * A parse rejection that also carries the record's provenance, with the record id filled in when
 * the line got far enough to read it, so that dead letters name the record.
 */
public class RecordParseException extends RejectedRecordException {
    private static final long serialVersionUID = 1L;

    private final RecordRef ref;

    public RecordParseException(RecordRef ref, RejectedRecordException cause) {
        super(cause.reason(), cause.getMessage(), cause);
        this.ref = ref;
    }

    /** Provenance of the rejected line, with {@link RecordRef#recordId} when known. */
    public RecordRef ref() {
        return ref;
    }
}
