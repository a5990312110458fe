package dev.stoker.operators.image;

import static org.assertj.core.api.Assertions.assertThat;

import dev.stoker.operators.preset.ModelPreset;
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
    void nativeDecoderGaugesSayWhichDecodersRun() {
        new PreprocessMetrics(group, 14, true, false);
        assertThat(gauges.get("jpegDecoderNative").getValue()).isEqualTo(1);
        assertThat(gauges.get("webpDecoderNative").getValue()).isEqualTo(0);
        new PreprocessMetrics(group, 14, false, true);
        assertThat(gauges.get("jpegDecoderNative").getValue()).isEqualTo(0);
        assertThat(gauges.get("webpDecoderNative").getValue()).isEqualTo(1);
    }

    @Test
    void aProcessorReportsTheDecodersItUses() {
        QwenVisionConfig config = ModelPreset.QWEN2_VL.visionConfig();
        QwenImageProcessor defaults = new QwenImageProcessor(config);
        assertThat(defaults.nativeJpeg()).isEqualTo(TurboJpeg.available());
        assertThat(defaults.nativeWebp()).isEqualTo(LibWebpDecoder.available());
        QwenImageProcessor imageIo = new QwenImageProcessor(config, new ImageDecoder(false, false));
        assertThat(imageIo.nativeJpeg()).isFalse();
        assertThat(imageIo.nativeWebp()).isFalse();
    }

    @Test
    void libwebpLoadsFromTheBundledNativeLibrary() {
        // webp-imageio's jar carries libwebp for this platform (Linux x86-64 in CI): no set-up
        assertThat(LibWebpDecoder.available()).isTrue();
    }
}
