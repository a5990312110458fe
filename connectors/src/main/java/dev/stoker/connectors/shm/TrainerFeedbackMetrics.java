package dev.stoker.connectors.shm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.flink.metrics.Gauge;
import org.apache.flink.metrics.MetricGroup;

/**
 * Gauges of what a rank's trainer reports back through its {@code ack.json} (see {@code
 * docs/batch-protocol.md}), registered on the sink's per-rank metric group, e.g. {@code
 * arrow-shm-sink: Writer.rank.0.trainerWaitTimeRatio} in the web UI:
 *
 * <ul>
 *   <li>{@code trainerWaitTimeRatio}: the trainer's data-wait time / total step time since its
 *       first request, in [0, 1] (-1 until the first acknowledgement). Near 0: the pipeline keeps
 *       ahead; near 1: the GPUs wait for data (raise parallelism or fetch capacity).
 *   <li>{@code trainerConsumedStep}: the last step the trainer acknowledged (-1 before any).
 * </ul>
 *
 * <p>Each read of a gauge reads the small {@code ack.json} file; a missing or half-written file
 * reads as "no acknowledgement yet".
 */
public final class TrainerFeedbackMetrics {
    private static final ObjectMapper JSON = new ObjectMapper();

    private final Path ackFile;

    TrainerFeedbackMetrics(Path ackFile) {
        this.ackFile = ackFile;
    }

    /** Registers the gauges for the rank whose acknowledgement file is {@code ackFile}. */
    public static void register(MetricGroup rankGroup, Path ackFile) {
        TrainerFeedbackMetrics m = new TrainerFeedbackMetrics(ackFile);
        rankGroup.gauge("trainerWaitTimeRatio", (Gauge<Double>) m::waitTimeRatio);
        rankGroup.gauge("trainerConsumedStep", (Gauge<Long>) m::consumedStep);
    }

    /** The reader's {@code wait_time_ratio}, else {@code data_wait_s / elapsed_s}, else -1. */
    double waitTimeRatio() {
        JsonNode ack = read();
        if (ack == null) {
            return -1;
        }
        if (ack.hasNonNull("wait_time_ratio")) {
            return ack.get("wait_time_ratio").asDouble();
        }
        double elapsed = ack.path("elapsed_s").asDouble(0);
        return elapsed > 0 ? Math.min(1.0, ack.path("data_wait_s").asDouble(0) / elapsed) : -1;
    }

    long consumedStep() {
        JsonNode ack = read();
        return ack == null ? -1 : ack.path("consumed_step").asLong(-1);
    }

    private JsonNode read() {
        try {
            return JSON.readTree(Files.readAllBytes(ackFile));
        } catch (IOException e) {
            return null;
        }
    }
}
