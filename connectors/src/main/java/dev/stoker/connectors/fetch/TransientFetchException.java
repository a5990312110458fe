package dev.stoker.connectors.fetch;

/**
 * Fails the fetch task under {@link TransientFailurePolicy#FAIL_OVER}: the message names the record
 * (file, line, id) and the image key with the failure after all retries.
 */
public final class TransientFetchException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    TransientFetchException(String message, Throwable cause) {
        super(
                "Transient fetch failure, failing over to retry from the last checkpoint: "
                        + message,
                cause);
    }
}
