package dev.stoker.operators.model;

import java.util.Objects;

/**
 * Provenance of one dataset record: where it came from and its position in the deterministic sample
 * order. Every sample and every dead letter carries one, so any error names its source.
 *
 * <p>Flink POJO: public fields, public no-argument constructor.
 */
public class RecordRef {
    /** The source name of the one-source mixture that {@code stoker.dataset.path} makes. */
    public static final String SINGLE_SOURCE = "dataset";

    /**
     * Name of the mixture source the record belongs to ({@code stoker.mixture.path}; the single
     * dataset of {@code stoker.dataset.path} is the source {@value #SINGLE_SOURCE}); {@code null}
     * outside a job (tests, tools).
     */
    public String source;

    /** Path (URI string) of the JSONL file the record was read from. */
    public String file;

    /** 1-based physical line number in {@link #file}. */
    public long line;

    /**
     * 0-based slot index of the record in the run's deterministic sample order; decides the
     * record's (step, rank, slot).
     */
    public long sampleIndex;

    /** The record's {@code id} field, or {@code null} when absent or not yet parsed. */
    public String recordId;

    public RecordRef() {}

    /** A record outside a mixture ({@link #source} {@code null}): tests and tools. */
    public RecordRef(String file, long line, long sampleIndex, String recordId) {
        this(null, file, line, sampleIndex, recordId);
    }

    public RecordRef(String source, String file, long line, long sampleIndex, String recordId) {
        this.source = source;
        this.file = file;
        this.line = line;
        this.sampleIndex = sampleIndex;
        this.recordId = recordId;
    }

    /** Returns a copy with the given record id. */
    public RecordRef withRecordId(String id) {
        return new RecordRef(source, file, line, sampleIndex, id);
    }

    /**
     * {@code file:line (id=...)} for logs and exception messages, preceded by {@code [source] } in
     * a mixture; the names escaped with {@link PrintableText} (they come from the data and the
     * spec).
     */
    @Override
    public String toString() {
        return (source == null ? "" : "[" + PrintableText.escape(source) + "] ")
                + PrintableText.escape(file)
                + ":"
                + line
                + (recordId == null ? "" : " (id=" + PrintableText.escape(recordId) + ")");
    }

    @Override
    public boolean equals(Object o) {
        if (!(o instanceof RecordRef)) {
            return false;
        }
        RecordRef r = (RecordRef) o;
        return line == r.line
                && sampleIndex == r.sampleIndex
                && Objects.equals(source, r.source)
                && Objects.equals(file, r.file)
                && Objects.equals(recordId, r.recordId);
    }

    @Override
    public int hashCode() {
        return Objects.hash(source, file, line, sampleIndex, recordId);
    }
}
