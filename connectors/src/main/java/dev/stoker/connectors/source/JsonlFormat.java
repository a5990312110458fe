package dev.stoker.connectors.source;

import dev.stoker.operators.model.JsonlLine;
import dev.stoker.operators.model.RecordRef;
import java.io.IOException;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.file.src.FileSourceSplit;
import org.apache.flink.connector.file.src.reader.BulkFormat;
import org.apache.flink.connector.file.src.util.ArrayResultIterator;
import org.apache.flink.connector.file.src.util.CheckpointedPosition;

/**
 * A {@link BulkFormat} for the Flink {@code FileSource} that reads JSONL files as {@link
 * JsonlLine}s with provenance: file, 1-based line number and the record's sample index from the
 * {@link DatasetListing}.
 *
 * <p>Files are not split. The checkpointed position is the number of records already emitted from
 * the file; on restore the file is re-read and that many records are skipped, so line numbers and
 * sample indices stay exact.
 */
public final class JsonlFormat implements BulkFormat<JsonlLine, FileSourceSplit> {
    private static final long serialVersionUID = 1L;
    private static final int BATCH_SIZE = 64;

    private final DatasetListing listing;
    private final int maxLineBytes;

    public JsonlFormat(DatasetListing listing, int maxLineBytes) {
        this.listing = listing;
        this.maxLineBytes = maxLineBytes;
    }

    @Override
    public Reader<JsonlLine> createReader(Configuration config, FileSourceSplit split)
            throws IOException {
        return new LineBatchReader(split, 0);
    }

    @Override
    public Reader<JsonlLine> restoreReader(Configuration config, FileSourceSplit split)
            throws IOException {
        long skip =
                split.getReaderPosition()
                        .map(CheckpointedPosition::getRecordsAfterOffset)
                        .orElse(0L);
        return new LineBatchReader(split, skip);
    }

    @Override
    public boolean isSplittable() {
        return false;
    }

    @Override
    public TypeInformation<JsonlLine> getProducedType() {
        return TypeInformation.of(JsonlLine.class);
    }

    private final class LineBatchReader implements Reader<JsonlLine> {
        private final String file;
        private final long base;
        private final JsonlLineReader lines;
        private long emitted;

        LineBatchReader(FileSourceSplit split, long skip) throws IOException {
            this.file = split.path().toString();
            this.base = listing.baseIndex(file);
            this.lines =
                    new JsonlLineReader(
                            split.path().getFileSystem().open(split.path()), maxLineBytes);
            while (emitted < skip && lines.next() != null) {
                emitted++;
            }
        }

        @Override
        public RecordIterator<JsonlLine> readBatch() throws IOException {
            JsonlLine[] batch = new JsonlLine[BATCH_SIZE];
            int n = 0;
            long first = emitted;
            JsonlLineReader.Line line;
            while (n < BATCH_SIZE && (line = lines.next()) != null) {
                RecordRef ref = new RecordRef(file, line.lineNumber, base + emitted, null);
                batch[n++] = new JsonlLine(ref, line.bytes, line.originalLength);
                emitted++;
            }
            if (n == 0) {
                return null;
            }
            ArrayResultIterator<JsonlLine> it = new ArrayResultIterator<>();
            it.set(batch, n, CheckpointedPosition.NO_OFFSET, first);
            return it;
        }

        @Override
        public void close() throws IOException {
            lines.close();
        }
    }
}
