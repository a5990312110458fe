package dev.stoker.operators.video;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.image.RgbImage;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.parity.GoldenSet;
import dev.stoker.operators.preset.ModelPreset;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import org.junit.jupiter.api.Test;

/**
 * {@link QwenVideoProcessor} against the Hugging Face video processors ({@link GoldenSet#VIDEO}:
 * the uint8 frames each processor received for a real clip and what it returned), and its own
 * contract: row count, padding, {@code second_per_grid_ts}, refusals.
 */
class QwenVideoProcessorTest {
    /**
     * Every {@code ok} row of the goldens: grid, resized size, sampled fps and {@code
     * second_per_grid_ts} exactly, and {@code pixel_values_videos} with tolerance 0 (the resize is
     * integer arithmetic and the normalisation the same float32 operations, so every value is the
     * reference's). Prints the mean and max absolute difference per preset and codec.
     */
    @Test
    void matchesTheHuggingFaceVideoProcessorsBitForBit() throws Exception {
        Map<String, String> codecs = new HashMap<>();
        for (Map<String, Object> clip : GoldenSet.VIDEO.read("clips.arrow")) {
            codecs.put((String) clip.get("clip"), (String) clip.get("codec"));
        }
        Map<String, double[]> stats = new TreeMap<>(); // rows, values, sum, max, differing
        for (Map<String, Object> row : GoldenSet.VIDEO.read("videos.arrow")) {
            if (!row.get("status").equals("ok")) {
                continue;
            }
            String what = row.get("preset") + " " + row.get("clip") + " fps " + row.get("fps");
            QwenVideoConfig config = ModelPreset.fromKey((String) row.get("preset")).videoConfig();
            // the goldens cut the pixel budget to keep the outputs small
            config.minPixels = (Long) row.get("min_pixels");
            config.maxPixels = (Long) row.get("max_pixels");
            assertThat(config.patchSize).as(what).isEqualTo(row.get("patch_size"));
            assertThat(config.minFrames).as(what).isEqualTo(row.get("min_frames"));
            assertThat(config.maxFrames).as(what).isEqualTo(row.get("max_frames"));
            long[] shape = GoldenSet.longs(row.get("frames_shape"));
            long[] indices = GoldenSet.longs(row.get("frames_indices"));
            double sampledFps =
                    QwenVideoProcessor.sampledFps(
                            indices.length,
                            (Integer) row.get("total_num_frames"),
                            (Double) row.get("video_fps"));
            assertThat(sampledFps).as(what).isEqualTo((Double) row.get("sampled_fps"));

            PreprocessedVideo video =
                    new QwenVideoProcessor(config)
                            .process(frames((byte[]) row.get("frames"), shape), sampledFps);

            assertThat(video.gridThw())
                    .as(what)
                    .containsExactly(
                            Arrays.stream(GoldenSet.longs(row.get("video_grid_thw")))
                                    .mapToInt(Math::toIntExact)
                                    .toArray());
            assertThat(video.resized().height()).as(what).isEqualTo(row.get("resized_height"));
            assertThat(video.resized().width()).as(what).isEqualTo(row.get("resized_width"));
            Double secondPerGridT = (Double) row.get("second_per_grid_ts");
            if (secondPerGridT == null) {
                assertThat(video.secondPerGridT()).as(what).isEmpty();
            } else {
                assertThat(video.secondPerGridT()).as(what).hasValue(secondPerGridT);
            }
            float[] expected = GoldenSet.float32((byte[]) row.get("pixel_values_videos"));
            float[] actual = video.pixelValuesVideos();
            assertThat(actual).as(what).hasSameSizeAs(expected);
            double[] s =
                    stats.computeIfAbsent(
                            row.get("preset") + " " + codecs.get((String) row.get("clip")),
                            k -> new double[5]);
            s[0]++;
            s[1] += expected.length;
            for (int i = 0; i < expected.length; i++) {
                double d = Math.abs((double) actual[i] - expected[i]);
                s[2] += d;
                s[3] = Math.max(s[3], d);
                if (Float.floatToRawIntBits(actual[i]) != Float.floatToRawIntBits(expected[i])) {
                    s[4]++;
                }
            }
        }
        for (Map.Entry<String, double[]> e : stats.entrySet()) {
            double[] s = e.getValue();
            System.out.printf(
                    "video parity %s: %d rows, %d values, mean %.3g, max %.3g, %d not bit-equal%n",
                    e.getKey(), (long) s[0], (long) s[1], s[2] / s[1], s[3], (long) s[4]);
        }
        assertThat(stats.values().stream().mapToDouble(s -> s[0]).sum()).isGreaterThanOrEqualTo(36);
        assertThat(stats)
                .allSatisfy(
                        (key, s) -> assertThat(s[4]).as(key + " values not bit-equal").isZero());
    }

    @Test
    void rowsAreTheProductOfTheGridAndAnOddFrameCountRepeatsTheLastFrame() throws Exception {
        for (ModelPreset preset : ModelPreset.values()) {
            QwenVideoConfig config = preset.videoConfig();
            PreprocessedVideo video =
                    new QwenVideoProcessor(config).process(frames(3, 70, 50, 1), 2.0);
            int[] grid = video.gridThw();
            int dim = config.patchDim();
            assertThat(grid[0]).as(preset + " grid_t").isEqualTo(2);
            assertThat(video.resized().rows()).isEqualTo(grid[0] * grid[1] * grid[2]);
            assertThat(video.pixelValuesVideos()).hasSize(grid[0] * grid[1] * grid[2] * dim);
            // each row is (C, tps, ps, ps): in the last temporal patch, frame 3 (padding) is
            // frame 2 again, so both temporal halves of every channel are equal
            int area = config.patchSize * config.patchSize;
            int rowsPerT = grid[1] * grid[2];
            for (int r = rowsPerT; r < 2 * rowsPerT; r++) {
                float[] values = video.pixelValuesVideos();
                for (int c = 0; c < 3; c++) {
                    int first = r * dim + c * 2 * area;
                    assertThat(Arrays.copyOfRange(values, first + area, first + 2 * area))
                            .isEqualTo(Arrays.copyOfRange(values, first, first + area));
                }
            }
        }
    }

    @Test
    void secondPerGridTsOnlyForQwen25() throws Exception {
        List<RgbImage> frames = frames(4, 64, 64, 2);
        for (ModelPreset preset : ModelPreset.values()) {
            PreprocessedVideo video =
                    new QwenVideoProcessor(preset.videoConfig()).process(frames, 0.5);
            if (preset == ModelPreset.QWEN2_5_VL) {
                assertThat(video.secondPerGridT()).hasValue(4.0);
            } else {
                assertThat(video.secondPerGridT()).isEmpty();
            }
        }
        // transformers' VideoMetadata.sampled_fps: 8 of 240 frames at 30 fps are 1 frame/s
        assertThat(QwenVideoProcessor.sampledFps(8, 240, 30.0)).isEqualTo(1.0);
        assertThat(QwenVideoProcessor.sampledFps(8, 240, 0)).isEqualTo(24.0);
    }

    @Test
    void refusesNoFramesFramesOfDifferentSizesAndTooShortVideos() {
        QwenVideoProcessor qwen2 = new QwenVideoProcessor(ModelPreset.QWEN2_VL.videoConfig());
        assertThatThrownBy(() -> qwen2.process(List.of(), 2.0))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("at least one frame");
        List<RgbImage> mixed = new ArrayList<>(frames(2, 64, 48, 3));
        mixed.add(frames(1, 48, 64, 4).get(0));
        assertThatThrownBy(() -> qwen2.process(mixed, 2.0))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("frame 2 is 48x64, frame 0 is 64x48");
        QwenVideoProcessor qwen3 = new QwenVideoProcessor(ModelPreset.QWEN3_VL.videoConfig());
        assertThatThrownBy(() -> qwen3.process(frames(1, 64, 64, 5), 2.0))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> assertThat(e.reason()).isEqualTo(RejectReason.VIDEO_TOO_SHORT));
    }

    @Test
    void refusesAVideoTooLargeForOneArrayBeforeResizing() {
        // min_pixels at the per-frame maximum of Qwen2-VL scales 768 small frames up to 3584x3584:
        // 768 * 12845056 * 3 samples
        RgbImage frame = frames(1, 28, 28, 6).get(0);
        List<RgbImage> frames = new ArrayList<>();
        for (int i = 0; i < 768; i++) {
            frames.add(frame);
        }
        QwenVideoConfig config = ModelPreset.QWEN2_VL.videoConfig();
        config.minPixels = config.maxPixels;
        QwenVideoProcessor qwen2 = new QwenVideoProcessor(config);
        assertThatThrownBy(() -> qwen2.resize(frames))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> assertThat(e.reason()).isEqualTo(RejectReason.VIDEO_TOO_LARGE))
                .hasMessageContaining("768 frames resized to 3584x3584");
    }

    /** The frames of a golden row: {@code (T, H, W, 3)} uint8 in one array. */
    private static List<RgbImage> frames(byte[] all, long[] shape) {
        int h = Math.toIntExact(shape[1]);
        int w = Math.toIntExact(shape[2]);
        List<RgbImage> frames = new ArrayList<>();
        for (int f = 0; f < shape[0]; f++) {
            frames.add(
                    new RgbImage(
                            w, h, Arrays.copyOfRange(all, f * h * w * 3, (f + 1) * h * w * 3)));
        }
        return frames;
    }

    private static List<RgbImage> frames(int count, int width, int height, long seed) {
        Random random = new Random(seed);
        List<RgbImage> frames = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            byte[] rgb = new byte[width * height * 3];
            random.nextBytes(rgb);
            frames.add(new RgbImage(width, height, rgb));
        }
        return frames;
    }
}
