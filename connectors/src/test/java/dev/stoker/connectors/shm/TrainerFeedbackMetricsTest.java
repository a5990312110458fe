package dev.stoker.connectors.shm;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.within;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import org.apache.flink.metrics.Gauge;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class TrainerFeedbackMetricsTest {
    @TempDir Path dir;

    private Map<String, Gauge<?>> register(Path ack) {
        Map<String, Gauge<?>> gauges = new HashMap<>();
        TrainerFeedbackMetrics.register(
                new UnregisteredMetricsGroup() {
                    @Override
                    public <T, G extends Gauge<T>> G gauge(String name, G gauge) {
                        gauges.put(name, gauge);
                        return gauge;
                    }
                },
                ack);
        return gauges;
    }

    @Test
    void noAcknowledgementYetReadsMinusOne() {
        Map<String, Gauge<?>> gauges = register(dir.resolve("ack.json"));
        assertThat(gauges.get("trainerWaitTimeRatio").getValue()).isEqualTo(-1.0);
        assertThat(gauges.get("trainerConsumedStep").getValue()).isEqualTo(-1L);
    }

    @Test
    void readsWhatTheReaderWrote() throws Exception {
        Path ack = dir.resolve("ack.json");
        Map<String, Gauge<?>> gauges = register(ack);
        Files.writeString(
                ack,
                "{\"consumed_step\": 7, \"data_wait_s\": 1.5, \"elapsed_s\": 6.0,"
                        + " \"wait_time_ratio\": 0.25}",
                StandardCharsets.UTF_8);
        assertThat(gauges.get("trainerWaitTimeRatio").getValue()).isEqualTo(0.25);
        assertThat(gauges.get("trainerConsumedStep").getValue()).isEqualTo(7L);
        // an older reader without the ratio: computed from the two times
        Files.writeString(
                ack,
                "{\"consumed_step\": 8, \"data_wait_s\": 3.0, \"elapsed_s\": 4.0}",
                StandardCharsets.UTF_8);
        assertThat((Double) gauges.get("trainerWaitTimeRatio").getValue())
                .isCloseTo(0.75, within(1e-9));
        Files.writeString(ack, "{\"consumed_st", StandardCharsets.UTF_8);
        assertThat(gauges.get("trainerConsumedStep").getValue()).isEqualTo(-1L);
    }
}
