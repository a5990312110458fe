package dev.stoker.connectors.fetch;

/**
 * What the image fetch does with a transient failure that outlasted the S3 client's retries (5xx or
 * throttling, timeouts, connection resets). Either way it is counted in {@code transientFailures},
 * the alarm metric of the fetch operator.
 */
public enum TransientFailurePolicy {
    /**
     * The record becomes a dead letter ({@code FETCH_FAILED} or {@code FETCH_TIMEOUT}) and its slot
     * is back-filled; the job never restarts. The batch then depends on when the store misbehaved.
     */
    DEAD_LETTER,

    /**
     * The fetch fails the task, so the job fails over and retries from its last checkpoint (Flink's
     * restart strategy bounds and paces the retries). The batches stay a pure function of the
     * dataset; a store that stays broken stops the job instead of emptying slots.
     */
    FAIL_OVER
}
