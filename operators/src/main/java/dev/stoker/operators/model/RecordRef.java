package dev.stoker.operators.model;

import java.util.Objects;

/**
 * Provenance of one dataset record: where it came from and its position in the deterministic sample
 * order. Every sample and every dead letter carries one, so any error names its source.
 *
 * <p>Flink POJO: public fields, public no-argument constructor.
 */
public class RecordRef {
    /** Path (URI string) of the JSONL file the record was read from. */
    public String file;

    /** 1-based physical line number in {@link #file}. */
    public long line;

    /**
     * 0-based position of the record in the dataset's deterministic order (files sorted by path,
     * non-blank lines in file order); decides the record's (step, rank, slot).
     */
    public long sampleIndex;

    /** The record's {@code id} field, or {@code null} when absent or not yet parsed. */
    public String recordId;

    public RecordRef() {}

    public RecordRef(String file, long line, long sampleIndex, String recordId) {
        this.file = file;
        this.line = line;
        this.sampleIndex = sampleIndex;
        this.recordId = recordId;
    }

    /** Returns a copy with the given record id. */
    public RecordRef withRecordId(String id) {
        return new RecordRef(file, line, sampleIndex, id);
    }

    /** {@code file:line} followed by {@code (id=...)} when the id is known. */
    /**
     * {@code file:line (id=...)} for logs and exception messages, the file name and record id
     * escaped with {@link PrintableText} (they come from the data).
     */
    @Override
    public String toString() {
        return PrintableText.escape(file)
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
                && Objects.equals(file, r.file)
                && Objects.equals(recordId, r.recordId);
    }

    @Override
    public int hashCode() {
        return Objects.hash(file, line, sampleIndex, recordId);
    }
}
