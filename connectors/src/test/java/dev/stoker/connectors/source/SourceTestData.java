package dev.stoker.connectors.source;

import dev.stoker.connectors.feedback.AckFeed;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * Small mixtures on disk for the source's unit tests: source {@code name} is a folder of one JSONL
 * file whose line {@code i} is {@code {"id": "<name>-<i>"}}, so a record read says where it came
 * from.
 */
final class SourceTestData {
    private SourceTestData() {}

    /** Writes source {@code name} with {@code records} records under {@code dir}; its listing. */
    static DatasetListing source(Path dir, String name, int records) throws IOException {
        Path root = Files.createDirectories(dir.resolve(name));
        List<String> lines = new ArrayList<>();
        for (int i = 0; i < records; i++) {
            lines.add(line(name, i));
        }
        Files.write(root.resolve("part-0.jsonl"), lines);
        return DatasetListing.scan(
                new org.apache.flink.core.fs.Path(root.toUri()),
                "*.jsonl",
                new RecordIndexCache(dir.resolve("index-cache").toString(), 1 << 16),
                1);
    }

    /** The line of record {@code i} of source {@code name}. */
    static String line(String name, long i) {
        return "{\"id\": \"" + name + "-" + i + "\"}";
    }

    /** A gate that never waits for a trainer (depth 0: the feed is never polled). */
    static PrefetchGate unboundedGate(String generation, long firstStep) {
        return new PrefetchGate(new NoAcks(), generation, 0, firstStep);
    }

    /** An ack feed with no trainer behind it. */
    private static final class NoAcks implements AckFeed {
        private static final long serialVersionUID = 1L;

        @Override
        public long[] poll() {
            throw new UnsupportedOperationException("an unbounded gate never polls");
        }

        @Override
        public long pollPeriodMs() {
            return 1000;
        }

        @Override
        public void close() {}
    }
}
