package dev.stoker.connectors.source;

import dev.stoker.operators.model.JsonlLine;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.core.fs.Path;

/**
 * Builds the bounded Flink {@link FileSource} over a dataset's JSONL files.
 *
 * <p>Delivery: each record exactly once per run with Flink checkpointing (the file source's split
 * assignment and reader position are checkpointed). Emits {@link JsonlLine}s; blank lines are not
 * records and are skipped.
 */
public final class JsonlSource {
    private JsonlSource() {}

    /** A bounded source over exactly the files of {@code listing}. */
    public static FileSource<JsonlLine> forListing(DatasetListing listing, int maxLineBytes) {
        Path[] paths = listing.files().stream().map(Path::new).toArray(Path[]::new);
        return FileSource.forBulkFileFormat(new JsonlFormat(listing, maxLineBytes), paths).build();
    }
}
