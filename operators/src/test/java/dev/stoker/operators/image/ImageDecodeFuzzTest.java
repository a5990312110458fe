package dev.stoker.operators.image;

import static org.assertj.core.api.Assertions.assertThat;

import com.code_intelligence.jazzer.junit.FuzzTest;
import dev.stoker.operators.FuzzContract;
import dev.stoker.operators.model.PreprocessedImage;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.preset.ModelPreset;
import java.time.Duration;

/**
 * Fuzzes the image path, {@link QwenImageProcessor#process} (decode with {@link ImageDecoder}, then
 * smart_resize and resize), with arbitrary bytes: it must return a consistent result or throw
 * {@link RejectedRecordException}, never anything else, and never hang. The source pixel limit is
 * small (64 Ki pixels) so the size guard, not the heap, bounds what a header can ask for. Without
 * {@code JAZZER_FUZZ} this runs over the seed corpus in {@code ImageDecodeFuzzTestInputs/process}
 * (small real JPEG, PNG, GIF, WebP and BMP files, animations, bombs, truncated files); see
 * docs/fuzzing.md.
 */
class ImageDecodeFuzzTest {
    private static final QwenImageProcessor PROCESSOR = new QwenImageProcessor(config());

    private static QwenVisionConfig config() {
        QwenVisionConfig c = ModelPreset.QWEN2_VL.visionConfig();
        c.maxSourcePixels = 1 << 16;
        c.maxPixels = 28 * 28 * 16;
        return c;
    }

    @FuzzTest(maxDuration = "60s")
    void process(byte[] bytes) {
        PreprocessedImage image =
                FuzzContract.call(
                        Duration.ofSeconds(10),
                        () -> PROCESSOR.process(bytes, null),
                        RejectedRecordException.class);
        if (image != null) {
            assertThat(image.gridT).isEqualTo(1);
            assertThat(image.gridH).isPositive().isEven();
            assertThat(image.gridW).isPositive().isEven();
            assertThat(image.resizedRgb).hasSize(image.gridH * 14 * image.gridW * 14 * 3);
        }
    }
}
