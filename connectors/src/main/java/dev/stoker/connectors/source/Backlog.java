package dev.stoker.connectors.source;

import org.apache.flink.api.connector.source.SourceEvent;

/**
 * From the {@link StepEnumerator} to one reader: the reader's share of the records of the steps the
 * prefetch gate allows that no reader holds yet. The reader adds it to the records of the splits it
 * holds and has not emitted, and reports the sum as its {@code pendingRecords} (FLIP-33), so the
 * source vertex's sum is the job's backlog within the gate: what Flink's autoscaler reads as the
 * demand the job has not met.
 */
final class Backlog implements SourceEvent {
    private static final long serialVersionUID = 1L;

    /** Records (slots: samples and padding markers) of this reader's share, {@code >= 0}. */
    final long records;

    Backlog(long records) {
        this.records = records;
    }

    @Override
    public String toString() {
        return "Backlog{records=" + records + "}";
    }
}
