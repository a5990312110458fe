package dev.stoker.operators.video;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SampledVideo;
import dev.stoker.operators.model.VideoRef;
import dev.stoker.operators.parity.GoldenSet;
import dev.stoker.operators.preset.ModelPreset;
import dev.stoker.operators.tokenize.ChatTokenizer;
import dev.stoker.operators.tokenize.TemplateTurn;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * A video given as a list of frame images ({@link VideoPreprocessor#sampleFrames}, the job's path:
 * the frames' files in, resized uint8 frames out) against the Hugging Face processors called on the
 * same frame files ({@link GoldenSet#VIDEO}, {@code frame_videos.arrow}, made by {@code
 * scripts/golden/make_video_golden.py} with {@code do_sample_frames=False}, as transformers 5.23.0
 * only accepts a frame list so): the grid, the frame indices, the frames' rate, {@code
 * second_per_grid_ts}, every value of {@code pixel_values_videos} bit for bit (patchified by the
 * processor's float path, as the sink's patchifier does), and the placeholder: the video pads per
 * temporal patch and Qwen3-VL's timestamps as the processor wrote them into {@code input_ids}; a
 * set the reference refuses is refused with a reason.
 */
class FrameListVideoTest {
    private static final VideoLimits LIMITS = new VideoLimits(1L << 24, 10_000, 1L << 31);

    @Test
    void fromTheFrameFilesToTheModelsInputsAsTheProcessorCalledOnThem() throws Exception {
        int ok = 0;
        int refused = 0;
        for (Map<String, Object> row : GoldenSet.VIDEO.read("frame_videos.arrow")) {
            String what = row.get("preset") + " " + row.get("frame_set") + " fps " + row.get("fps");
            ModelPreset preset = ModelPreset.fromKey((String) row.get("preset"));
            QwenVideoConfig config = preset.videoConfig();
            config.minPixels = (Long) row.get("min_pixels"); // the goldens' small budgets
            config.maxPixels = (Long) row.get("max_pixels");
            VideoPreprocessor preprocessor = preprocessor(preset, config);
            List<String> files = strings(row.get("frame_files"));
            byte[][] frames = new byte[files.size()][];
            for (int i = 0; i < frames.length; i++) {
                frames[i] = Files.readAllBytes(GoldenSet.VIDEO.dir().resolve(files.get(i)));
            }
            Double fps = (Double) row.get("fps");
            VideoRef ref =
                    VideoRef.ofFrames(files.toArray(String[]::new), fps == null ? 0 : fps, 0, 0);
            if (!row.get("status").equals("ok")) {
                assertThatThrownBy(() -> preprocessor.sampleFrames(frames, ref))
                        .as(what + ": the reference refused it with " + row.get("error"))
                        .isInstanceOfSatisfying(
                                RejectedRecordException.class,
                                e ->
                                        assertThat(e.reason())
                                                .isIn(
                                                        RejectReason.CORRUPT_VIDEO,
                                                        RejectReason.VIDEO_TOO_SHORT));
                refused++;
                continue;
            }
            SampledVideo v = preprocessor.sampleFrames(frames, ref);

            assertThat(new long[] {v.gridT, v.gridH, v.gridW})
                    .as(what + " grid")
                    .containsExactly(GoldenSet.longs(row.get("video_grid_thw")));
            assertThat(Arrays.stream(v.frameIndices).asLongStream().toArray())
                    .as(what + " frame indices")
                    .containsExactly(GoldenSet.longs(row.get("frames_indices")));
            assertThat(v.frames).isEqualTo(((Integer) row.get("total_num_frames")));
            assertThat(v.videoFps).as(what + " fps").isEqualTo((Double) row.get("video_fps"));
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

            // the placeholder the processor wrote for this grid
            TemplateTurn.Video block =
                    preset.chatTemplate()
                            .videoBlock(
                                    0,
                                    v.gridT,
                                    v.gridH,
                                    v.gridW,
                                    config.mergeSize,
                                    v.frameIndices,
                                    v.videoFps,
                                    config.temporalPatchSize);
            long pads =
                    GoldenSet.longs(row.get("input_ids")).length == 0
                            ? 0
                            : Arrays.stream(GoldenSet.longs(row.get("input_ids")))
                                    .filter(id -> id == ChatTokenizer.VIDEO_PAD)
                                    .count();
            assertThat((long) block.gridT() * block.padsPerTemporalPatch())
                    .as(what + " video pads")
                    .isEqualTo(pads);
            assertThat(block.timestamps())
                    .as(what + " timestamps")
                    .containsExactlyElementsOf(strings(row.get("video_timestamp_texts")));
            ok++;
        }
        assertThat(ok).isEqualTo(28);
        assertThat(refused).isEqualTo(8);
    }

    /** The reference loads the frames with torchvision; Pillow (Stoker's model) agrees on all. */
    @Test
    void theFramesTheProcessorLoadedAreThoseStokerDecodes() throws Exception {
        for (Map<String, Object> row : GoldenSet.VIDEO.read("frame_videos.arrow")) {
            if (row.get("status").equals("ok")) {
                assertThat((Boolean) row.get("frames_equal_pillow"))
                        .as(row.get("preset") + " " + row.get("frame_set"))
                        .isTrue();
            }
        }
    }

    @Test
    void framesOfTwoSizesAreRefusedNamingTheFrame() throws Exception {
        Map<String, Object> row = firstRow("png_sizes3");
        List<String> files = strings(row.get("frame_files"));
        byte[][] frames = read(files);
        VideoRef ref = VideoRef.ofFrames(files.toArray(String[]::new), 0, 0, 0);
        assertThatThrownBy(
                        () ->
                                preprocessor(
                                                ModelPreset.QWEN2_VL,
                                                ModelPreset.QWEN2_VL.videoConfig())
                                        .sampleFrames(frames, ref))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> assertThat(e.reason()).isEqualTo(RejectReason.CORRUPT_VIDEO))
                .hasMessage(
                        "frame 3 of 3 '"
                                + files.get(2)
                                + "' is 48x64, but the first frame is 64x48: a video's frames must"
                                + " all have one size");
    }

    @Test
    void aFrameThatIsNoImageIsRefusedWithTheImageReasonNamingTheFrame() throws Exception {
        Map<String, Object> row = firstRow("jpg_7");
        List<String> files = strings(row.get("frame_files"));
        byte[][] frames = read(files);
        frames[4] = Arrays.copyOf(frames[4], 0);
        VideoRef ref = VideoRef.ofFrames(files.toArray(String[]::new), 0, 0, 0);
        assertThatThrownBy(
                        () ->
                                preprocessor(
                                                ModelPreset.QWEN3_VL,
                                                ModelPreset.QWEN3_VL.videoConfig())
                                        .sampleFrames(frames, ref))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> assertThat(e.reason()).isEqualTo(RejectReason.CORRUPT_IMAGE))
                .hasMessageStartingWith("frame 5 of 7 '" + files.get(4) + "': empty image file");
    }

    @Test
    void tooManyFramesOrTooManyBytesAreRefusedBeforeDecodingThemAll() throws Exception {
        Map<String, Object> row = firstRow("jpg_7");
        List<String> files = strings(row.get("frame_files"));
        byte[][] frames = read(files);
        frames[6] = new byte[0]; // never reached
        VideoRef ref = VideoRef.ofFrames(files.toArray(String[]::new), 0, 0, 0);
        QwenVideoConfig config = ModelPreset.QWEN2_5_VL.videoConfig();
        VideoPreprocessor fewFrames =
                new VideoPreprocessor(
                        config,
                        VideoPreprocessor.FrameRule.QWEN2_VL,
                        2,
                        new VideoLimits(1L << 24, 6, 1L << 31));
        assertThatThrownBy(() -> fewFrames.sampleFrames(frames, ref))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> assertThat(e.reason()).isEqualTo(RejectReason.VIDEO_TOO_MANY_FRAMES))
                .hasMessage("7 frame images, more than the limit of 6");
        VideoPreprocessor fewBytes =
                new VideoPreprocessor(
                        config,
                        VideoPreprocessor.FrameRule.QWEN2_VL,
                        2,
                        new VideoLimits(1L << 24, 100, 7L * 64 * 48 * 3 - 1));
        assertThatThrownBy(() -> fewBytes.sampleFrames(frames, ref))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> assertThat(e.reason()).isEqualTo(RejectReason.VIDEO_TOO_MANY_FRAMES))
                .hasMessageContaining("7 frame images of 64x48 are 64512 bytes of RGB");
    }

    private static VideoPreprocessor preprocessor(ModelPreset preset, QwenVideoConfig config) {
        return new VideoPreprocessor(
                config,
                preset == ModelPreset.QWEN3_VL
                        ? VideoPreprocessor.FrameRule.QWEN3_VL
                        : VideoPreprocessor.FrameRule.QWEN2_VL,
                2,
                LIMITS);
    }

    private static Map<String, Object> firstRow(String set) {
        return GoldenSet.VIDEO.read("frame_videos.arrow").stream()
                .filter(r -> r.get("frame_set").equals(set))
                .findFirst()
                .orElseThrow();
    }

    private static byte[][] read(List<String> files) throws Exception {
        byte[][] frames = new byte[files.size()][];
        for (int i = 0; i < frames.length; i++) {
            Path file = GoldenSet.VIDEO.dir().resolve(files.get(i));
            frames[i] = Files.readAllBytes(file);
        }
        return frames;
    }

    private static List<String> strings(Object list) {
        List<String> out = new ArrayList<>();
        for (Object o : (List<?>) list) {
            out.add(String.valueOf(o));
        }
        return out;
    }
}
