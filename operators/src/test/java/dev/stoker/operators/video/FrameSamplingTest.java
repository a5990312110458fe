package dev.stoker.operators.video;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.parity.GoldenSet;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The three frame-index rules against the indices the reference computed ({@code
 * scripts/golden/make_video_golden.py}): the processors' own {@code sample_frames} at the requested
 * fps for every clip and preset ({@code videos.arrow}), and each rule with a fixed frame count
 * ({@code frame_indices.arrow}).
 */
class FrameSamplingTest {

    @Test
    void fpsRulesGiveTheProcessorsIndices() throws RejectedRecordException {
        int checked = 0;
        for (Map<String, Object> row : GoldenSet.VIDEO.read("videos.arrow")) {
            if (!"ok".equals(row.get("status"))) {
                continue;
            }
            int total = (Integer) row.get("total_num_frames");
            double videoFps = (Double) row.get("video_fps");
            double fps = (Double) row.get("fps");
            int minFrames = (Integer) row.get("min_frames");
            int maxFrames = (Integer) row.get("max_frames");
            int[] actual =
                    "qwen3-vl".equals(row.get("preset"))
                            ? FrameSampling.qwen3Vl(total, videoFps, fps, minFrames, maxFrames)
                            : FrameSampling.qwen2Vl(
                                    total,
                                    videoFps,
                                    fps,
                                    minFrames,
                                    maxFrames,
                                    (Integer) row.get("temporal_patch_size"));
            assertThat(actual)
                    .as("%s %s at %s fps", row.get("preset"), row.get("clip"), fps)
                    .containsExactly(ints(row.get("frames_indices")));
            checked++;
        }
        assertThat(checked).isGreaterThanOrEqualTo(40);
    }

    @Test
    void fixedCountRulesGiveTheRecordedIndices() throws RejectedRecordException {
        List<Map<String, Object>> rows = GoldenSet.VIDEO.read("frame_indices.arrow");
        for (Map<String, Object> row : rows) {
            int total = (Integer) row.get("total_num_frames");
            int n = (Integer) row.get("num_frames");
            int[] actual =
                    switch ((String) row.get("rule")) {
                        case "qwen2_vl_arange" -> FrameSampling.qwen2VlNumFrames(total, n, 2);
                        case "qwen3_vl_linspace_round" -> FrameSampling.qwen3VlNumFrames(total, n);
                        case "llamafactory_linspace_floor" -> FrameSampling.linspaceFloor(total, n);
                        default -> throw new AssertionError("unknown rule " + row.get("rule"));
                    };
            assertThat(actual)
                    .as("%s, %d of %d frames (%s)", row.get("rule"), n, total, row.get("clip"))
                    .containsExactly(ints(row.get("indices")));
        }
        assertThat(rows).hasSizeGreaterThanOrEqualTo(100);
    }

    @Test
    void noFrameToSampleIsRejectedAsTheReferenceFails() {
        // a stream of 0 frames: the reference's Qwen2-VL divides by zero, Qwen3-VL's loader
        // indexes an empty list (as it did for Matroska/WebM, whose count Stoker now counts)
        assertThatThrownBy(() -> FrameSampling.qwen2Vl(0, 30, 2, 4, 768, 2))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> assertThat(e.reason()).isEqualTo(RejectReason.VIDEO_TOO_SHORT));
        assertThatThrownBy(() -> FrameSampling.qwen3Vl(0, 30, 2, 4, 768))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> assertThat(e.reason()).isEqualTo(RejectReason.VIDEO_TOO_SHORT));
        // one frame: no pair of frames for Qwen2-VL's temporal patch
        assertThatThrownBy(() -> FrameSampling.qwen2Vl(1, 30, 2, 4, 768, 2))
                .isInstanceOf(RejectedRecordException.class);
    }

    private static int[] ints(Object list) {
        return ((List<?>) list).stream().mapToInt(v -> ((Number) v).intValue()).toArray();
    }
}
