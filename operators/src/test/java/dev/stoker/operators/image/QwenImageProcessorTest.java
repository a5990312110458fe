package dev.stoker.operators.image;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.SharedData;
import dev.stoker.operators.model.ImageRef;
import dev.stoker.operators.model.PreprocessedImage;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.preset.ModelPreset;
import java.util.Arrays;
import org.junit.jupiter.api.Test;

class QwenImageProcessorTest {
    private final QwenVisionConfig config = ModelPreset.QWEN2_VL.visionConfig();
    private final QwenImageProcessor processor = new QwenImageProcessor(config);

    @Test
    void configDerivedSizes() {
        assertThat(config.factor()).isEqualTo(28);
        assertThat(config.patchDim()).isEqualTo(1176);
    }

    @Test
    void resizedPixelsAreTheResamplersOutputForTheDecodedImage() throws Exception {
        byte[] png = SharedData.bytes("llava-style/images/photos/chelsea_cat.png");
        PreprocessedImage out = processor.process(png, null);
        RgbImage decoded = new ImageDecoder().decode(png, config.maxSourcePixels);
        RgbImage resized = new BicubicResampler().resize(decoded, 448, 308);
        assertThat(out.resizedRgb).isEqualTo(Arrays.copyOf(resized.pixels(), 448 * 308 * 3));
    }

    @Test
    void realImageHasHuggingFaceShapes() throws Exception {
        // chelsea_cat.png is 451x300; smart_resize_reference.jsonl gives 448 wide x 308 high.
        PreprocessedImage out =
                processor.process(
                        SharedData.bytes("llava-style/images/photos/chelsea_cat.png"),
                        new ImageRef("cat.png", 0, 0));
        assertThat(out.gridT).isEqualTo(1);
        assertThat(out.gridH).isEqualTo(308 / 14);
        assertThat(out.gridW).isEqualTo(448 / 14);
        assertThat(out.numPatches()).isEqualTo(22 * 32);
        assertThat(out.resizedRgb).hasSize(308 * 448 * 3);
    }

    @Test
    void perImageMaxPixelsOverrideIsUsed() throws Exception {
        // landmark.jpg is 2506x1698; with max_pixels 1003520 the reference table gives 1204x812.
        PreprocessedImage out =
                processor.process(
                        SharedData.bytes("qwen-messages/images/photos/landmark.jpg"),
                        new ImageRef("l.jpg", 0, 1003520));
        assertThat(out.gridH).isEqualTo(812 / 14);
        assertThat(out.gridW).isEqualTo(1204 / 14);
        assertThat(out.resizedRgb).hasSize(812 * 1204 * 3);
    }

    @Test
    void extremeAspectIsRejected() {
        assertThatThrownBy(
                        () ->
                                processor.process(
                                        SharedData.bytes(
                                                "bad-inputs/extreme-aspect/images/w10_h2100.png"),
                                        new ImageRef("x", 0, 0)))
                .isInstanceOf(RejectedRecordException.class)
                .hasMessageContaining("aspect ratio 210.0 > 200")
                .extracting(e -> ((RejectedRecordException) e).reason())
                .isEqualTo(RejectReason.EXTREME_ASPECT_RATIO);
    }
}
