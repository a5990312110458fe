package dev.stoker.operators.image;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.HashMap;
import java.util.Map;
import org.apache.flink.metrics.Gauge;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.junit.jupiter.api.Test;

class PreprocessMetricsTest {
    private final Map<String, Gauge<?>> gauges = new HashMap<>();
    private final MetricGroup group =
            new UnregisteredMetricsGroup() {
                @Override
                public <T, G extends Gauge<T>> G gauge(String name, G gauge) {
                    gauges.put(name, gauge);
                    return gauge;
                }
            };

    @Test
    void jpegDecoderNativeGaugeSaysWhichJpegDecoderRuns() {
        new PreprocessMetrics(group, 14, true);
        assertThat(gauges.get("jpegDecoderNative").getValue()).isEqualTo(1);
        new PreprocessMetrics(group, 14, false);
        assertThat(gauges.get("jpegDecoderNative").getValue()).isEqualTo(0);
    }

    @Test
    void aProcessorReportsTheDecoderItUses() {
        QwenVisionConfig config = new QwenVisionConfig();
        assertThat(new QwenImageProcessor(config).nativeJpeg()).isEqualTo(TurboJpeg.available());
        assertThat(new QwenImageProcessor(config, new ImageDecoder(false)).nativeJpeg()).isFalse();
    }
}
