package dev.stoker.operators.video;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.parity.GoldenSet;
import dev.stoker.operators.preset.ModelPreset;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * {@link VideoPreprocessor} from the clip file to the model's inputs against the Hugging Face
 * processors called on the same file ({@link GoldenSet#VIDEO}, {@code videos.arrow}): the frame
 * indices, the sampled fps, the grid, {@code second_per_grid_ts} and every value of {@code
 * pixel_values_videos} bit for bit; a clip the reference refuses is refused.
 */
class VideoPreprocessorTest {
    private static final VideoLimits LIMITS = new VideoLimits(1L << 24, 10_000);

    @Test
    void fromTheClipFileToTheModelsInputsAsTheProcessorCalledOnIt() throws Exception {
        int ok = 0;
        int refused = 0;
        for (Map<String, Object> row : GoldenSet.VIDEO.read("videos.arrow")) {
            String what = row.get("preset") + " " + row.get("clip") + " fps " + row.get("fps");
            ModelPreset preset = ModelPreset.fromKey((String) row.get("preset"));
            QwenVideoConfig config = preset.videoConfig();
            config.minPixels = (Long) row.get("min_pixels"); // the goldens' small budgets
            config.maxPixels = (Long) row.get("max_pixels");
            VideoPreprocessor preprocessor =
                    new VideoPreprocessor(
                            config,
                            preset == ModelPreset.QWEN3_VL
                                    ? VideoPreprocessor.FrameRule.QWEN3_VL
                                    : VideoPreprocessor.FrameRule.QWEN2_VL,
                            (Double) row.get("fps"),
                            LIMITS);
            Path clip = GoldenSet.VIDEO.dir().resolve("clips").resolve((String) row.get("clip"));
            if (!row.get("status").equals("ok")) {
                assertThatThrownBy(() -> preprocessor.preprocess(clip))
                        .as(what + ": the reference refused it with " + row.get("error"))
                        .isInstanceOf(RejectedRecordException.class);
                refused++;
                continue;
            }
            VideoPreprocessor.Result r = preprocessor.preprocess(clip);

            assertThat(Arrays.stream(r.frameIndices()).asLongStream().toArray())
                    .as(what + " frame indices")
                    .containsExactly(GoldenSet.longs(row.get("frames_indices")));
            assertThat(r.sampledFps()).as(what).isEqualTo((Double) row.get("sampled_fps"));
            assertThat(Arrays.stream(r.video().gridThw()).asLongStream().toArray())
                    .as(what)
                    .containsExactly(GoldenSet.longs(row.get("video_grid_thw")));
            Double secondPerGridT = (Double) row.get("second_per_grid_ts");
            if (secondPerGridT != null) {
                assertThat(r.video().secondPerGridT()).as(what).hasValue(secondPerGridT);
            }
            float[] expected = GoldenSet.float32((byte[]) row.get("pixel_values_videos"));
            float[] actual = r.video().pixelValuesVideos();
            assertThat(actual).as(what).hasSameSizeAs(expected);
            assertThat(Arrays.mismatch(actual, expected))
                    .as(what + ": the first value that differs from the processor's")
                    .isEqualTo(-1);
            ok++;
        }
        assertThat(ok).isGreaterThanOrEqualTo(40);
        assertThat(refused).isGreaterThanOrEqualTo(1);
    }

    @Test
    void aFileThatIsNoVideoIsRefusedWithAReason() {
        VideoPreprocessor preprocessor =
                new VideoPreprocessor(
                        ModelPreset.QWEN2_VL.videoConfig(),
                        VideoPreprocessor.FrameRule.QWEN2_VL,
                        2,
                        LIMITS);
        for (Map<String, Object> clip : GoldenSet.VIDEO.read("clips.arrow")) {
            if (!(Boolean) clip.get("good")) {
                Path file =
                        GoldenSet.VIDEO.dir().resolve("clips").resolve((String) clip.get("clip"));
                assertThatThrownBy(() -> preprocessor.preprocess(file))
                        .as(clip.get("clip") + " (" + clip.get("why") + ")")
                        .isInstanceOfSatisfying(
                                RejectedRecordException.class,
                                e ->
                                        assertThat(e.reason())
                                                .isIn(
                                                        RejectReason.UNSUPPORTED_VIDEO,
                                                        RejectReason.CORRUPT_VIDEO));
            }
        }
    }
}
