package dev.stoker.operators.video;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SampledVideo;
import dev.stoker.operators.model.VideoRef;
import dev.stoker.operators.parity.GoldenSet;
import dev.stoker.operators.preset.ModelPreset;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * {@link VideoPreprocessor} from the clip file to the model's inputs against the Hugging Face
 * processors called on the same file ({@link GoldenSet#VIDEO}, {@code videos.arrow}): the frame
 * indices, the sampled fps, the grid, {@code second_per_grid_ts} and every value of {@code
 * pixel_values_videos} bit for bit; a clip the reference refuses is refused.
 */
class VideoPreprocessorTest {
    private static final VideoLimits LIMITS = new VideoLimits(1L << 24, 10_000, 1L << 31);

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

    /**
     * {@link VideoPreprocessor#sample} (the job's path: bytes in, resized uint8 frames out, with a
     * video's own fps and, for Qwen2/2.5-VL, its per-frame pixel bounds) patchified by the
     * processor's float path equals the processor's output, for one clip per preset; the
     * preprocessor's own fps and bounds are the presets' defaults, so the overrides are what make
     * it match.
     */
    @Test
    void theJobsPathFromBytesWithTheVideosOwnSettingsPatchifiesToTheProcessorsValues()
            throws Exception {
        Set<String> done = new HashSet<>();
        for (Map<String, Object> row : GoldenSet.VIDEO.read("videos.arrow")) {
            String presetKey = (String) row.get("preset");
            if (!row.get("status").equals("ok") || !done.add(presetKey)) {
                continue;
            }
            String what = presetKey + " " + row.get("clip") + " fps " + row.get("fps");
            ModelPreset preset = ModelPreset.fromKey(presetKey);
            QwenVideoConfig config = preset.videoConfig();
            long min = (Long) row.get("min_pixels");
            long max = (Long) row.get("max_pixels");
            boolean wholeVideo = config.budget == QwenVideoConfig.PixelBudget.WHOLE_VIDEO;
            if (wholeVideo) { // a per-frame override is not the processor's whole-video bound
                config.minPixels = min;
                config.maxPixels = max;
            }
            VideoPreprocessor preprocessor =
                    new VideoPreprocessor(
                            config,
                            wholeVideo
                                    ? VideoPreprocessor.FrameRule.QWEN3_VL
                                    : VideoPreprocessor.FrameRule.QWEN2_VL,
                            2,
                            LIMITS);
            String clip = (String) row.get("clip");
            byte[] bytes = Files.readAllBytes(GoldenSet.VIDEO.dir().resolve("clips").resolve(clip));
            VideoRef ref =
                    new VideoRef(
                            clip,
                            (Double) row.get("fps"),
                            wholeVideo ? 0 : min,
                            wholeVideo ? 0 : max);
            SampledVideo v = preprocessor.sample(bytes, ref);

            assertThat(Arrays.stream(v.frameIndices).asLongStream().toArray())
                    .as(what + " frame indices")
                    .containsExactly(GoldenSet.longs(row.get("frames_indices")));
            assertThat(v.sampledFps).as(what).isEqualTo((Double) row.get("sampled_fps"));
            assertThat(new long[] {v.gridT, v.gridH, v.gridW})
                    .as(what)
                    .containsExactly(GoldenSet.longs(row.get("video_grid_thw")));
            Double secondPerGridT = (Double) row.get("second_per_grid_ts");
            if (secondPerGridT != null) {
                assertThat(v.secondPerGridT).as(what).isEqualTo(secondPerGridT);
            }
            int ps = config.patchSize;
            float[] actual =
                    new QwenVideoProcessor(config)
                            .patchify(
                                    new ResizedVideo(
                                            v.resizedRgb,
                                            v.frames,
                                            v.gridH * ps,
                                            v.gridW * ps,
                                            v.gridT,
                                            v.gridH,
                                            v.gridW));
            float[] expected = GoldenSet.float32((byte[]) row.get("pixel_values_videos"));
            assertThat(actual).as(what).hasSameSizeAs(expected);
            assertThat(Arrays.mismatch(actual, expected))
                    .as(what + ": the first value that differs from the processor's")
                    .isEqualTo(-1);
        }
        assertThat(done).containsExactlyInAnyOrder("qwen2-vl", "qwen2.5-vl", "qwen3-vl");
    }

    @Test
    void sampledFramesOverTheMemoryLimitAreRefusedBeforeDecoding() throws Exception {
        Map<String, Object> row = GoldenSet.VIDEO.read("videos.arrow").get(0);
        String clip = (String) row.get("clip");
        byte[] bytes = Files.readAllBytes(GoldenSet.VIDEO.dir().resolve("clips").resolve(clip));
        VideoPreprocessor tight =
                new VideoPreprocessor(
                        ModelPreset.QWEN2_VL.videoConfig(),
                        VideoPreprocessor.FrameRule.QWEN2_VL,
                        2,
                        new VideoLimits(1L << 24, 10_000, 1000));
        assertThatThrownBy(() -> tight.sample(bytes, new VideoRef(clip, 0, 0, 0)))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> assertThat(e.reason()).isEqualTo(RejectReason.VIDEO_TOO_MANY_FRAMES))
                .hasMessageContaining("bytes of RGB, more than the limit of 1000");
    }

    @Test
    void aVideosOwnMinPixelsAboveTheJobsMaxPixelsIsRefusedNotUpscaled() throws Exception {
        Map<String, Object> row = GoldenSet.VIDEO.read("videos.arrow").get(0);
        String clip = (String) row.get("clip");
        byte[] bytes = Files.readAllBytes(GoldenSet.VIDEO.dir().resolve("clips").resolve(clip));
        for (ModelPreset preset : ModelPreset.values()) {
            VideoPreprocessor preprocessor =
                    new VideoPreprocessor(
                            preset.videoConfig(),
                            preset == ModelPreset.QWEN3_VL
                                    ? VideoPreprocessor.FrameRule.QWEN3_VL
                                    : VideoPreprocessor.FrameRule.QWEN2_VL,
                            2,
                            new VideoLimits(1L << 24, 10_000, 1L << 31));
            // 9e18 per frame: times the frames it overflows a long, and an int frame side anyway
            for (long min :
                    new long[] {preset.videoConfig().maxPixels + 1, 9_000_000_000_000_000_000L}) {
                assertThatThrownBy(() -> preprocessor.sample(bytes, new VideoRef(clip, 0, min, 0)))
                        .as(preset + " min_pixels " + min)
                        .isInstanceOfSatisfying(
                                RejectedRecordException.class,
                                e -> assertThat(e.reason()).isEqualTo(RejectReason.VIDEO_TOO_LARGE))
                        .hasMessageContaining("stoker.video.max-pixels");
            }
            // a huge max_pixels only lifts the ceiling: the frames keep their size
            assertThat(
                            preprocessor.sample(
                                            bytes,
                                            new VideoRef(clip, 0, 0, 9_000_000_000_000_000_000L))
                                    .frames)
                    .isPositive();
        }
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
