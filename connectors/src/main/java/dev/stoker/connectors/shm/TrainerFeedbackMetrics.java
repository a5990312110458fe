package dev.stoker.connectors.shm;

import dev.stoker.connectors.protocol.Ack;
import dev.stoker.operators.metrics.MetricNames;
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
    private final Path ackFile;

    TrainerFeedbackMetrics(Path ackFile) {
        this.ackFile = ackFile;
    }

    /** Registers the gauges for the rank whose acknowledgement file is {@code ackFile}. */
    public static void register(MetricGroup rankGroup, Path ackFile) {
        TrainerFeedbackMetrics m = new TrainerFeedbackMetrics(ackFile);
        rankGroup.gauge(MetricNames.Sink.TRAINER_WAIT_TIME_RATIO, (Gauge<Double>) m::waitTimeRatio);
        rankGroup.gauge(MetricNames.Sink.TRAINER_CONSUMED_STEP, (Gauge<Long>) m::consumedStep);
    }

    /** The reader's wait-time ratio ({@link Ack#ratio()}), else -1. */
    double waitTimeRatio() {
        return Ack.read(ackFile).map(a -> a.ratio().orElse(-1)).orElse(-1.0);
    }

    long consumedStep() {
        return Ack.read(ackFile).map(Ack::consumedStep).orElse(-1L);
    }
}
