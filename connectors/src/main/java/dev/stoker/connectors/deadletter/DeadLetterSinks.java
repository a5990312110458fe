package dev.stoker.connectors.deadletter;

import dev.stoker.operators.model.DeadLetter;
import org.apache.flink.connector.file.sink.FileSink;
import org.apache.flink.core.fs.Path;
import org.apache.flink.streaming.api.functions.sink.filesystem.OutputFileConfig;

/**
 * The dead-letter output: JSONL part files ({@code dead-letters-*.jsonl}) under a directory,
 * written by Flink's {@link FileSink}. Part files are committed on checkpoints and at the end of a
 * bounded run.
 */
public final class DeadLetterSinks {
    private DeadLetterSinks() {}

    /** A file sink writing dead letters as JSON lines under {@code dir}. */
    public static FileSink<DeadLetter> jsonl(String dir) {
        return FileSink.forRowFormat(new Path(dir), new DeadLetterJsonEncoder())
                .withOutputFileConfig(
                        OutputFileConfig.builder()
                                .withPartPrefix("dead-letters")
                                .withPartSuffix(".jsonl")
                                .build())
                .build();
    }
}
