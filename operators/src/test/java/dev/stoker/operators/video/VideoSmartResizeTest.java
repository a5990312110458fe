package dev.stoker.operators.video;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import org.junit.jupiter.api.Test;

/**
 * Cases worked by hand from the transformers 5.23.0 formulas; the goldens of {@code
 * QwenVideoProcessorTest} check the sizes of real clips against the processors themselves.
 */
class VideoSmartResizeTest {
    @Test
    void perFrameRoundsASideBelowHalfAFactorToZeroAndScalesUpByMinPixels() throws Exception {
        // round(10/28) = 0, so 0 * 308 < 3136: beta = sqrt(3136 / 3000) = 1.0224,
        // ceil(10 * beta / 28) = 1 -> 28, ceil(300 * beta / 28) = 11 -> 308
        assertThat(VideoSmartResize.perFrame(10, 300, 28, 3136, 12_845_056))
                .containsExactly(28, 308);
        // round(90/28) = 3 -> 84, round(160/28) = 6 -> 168; 84 * 168 is within the bounds
        assertThat(VideoSmartResize.perFrame(90, 160, 28, 3136, 12_845_056))
                .containsExactly(84, 168);
    }

    @Test
    void wholeVideoCountsTheFramesRoundedToTheTemporalPatch() throws Exception {
        // t_bar = round(5/2) * 2 = 4 (half to even); 4 * 96 * 160 = 61440 is within 4096..409600
        assertThat(VideoSmartResize.wholeVideo(5, 90, 160, 2, 32, 4096, 409_600))
                .containsExactly(96, 160);
        // 8 frames: 8 * 96 * 160 = 122880 > 100000: beta = sqrt(8 * 90 * 160 / 100000) = 1.0733,
        // floor(90 / beta / 32) = 2 -> 64, floor(160 / beta / 32) = 4 -> 128
        assertThat(VideoSmartResize.wholeVideo(8, 90, 160, 2, 32, 4096, 100_000))
                .containsExactly(64, 128);
    }

    @Test
    void wholeVideoScalesASideBelowTheFactorUpFirst() throws Exception {
        // scale = max(32/20, 32/41) = 1.6: 20x41 counts as 32x65; t_bar = round(1.5) * 2 = 4,
        // 32 x round(65/32) * 32 = 32x64, 4 * 32 * 64 = 8192 >= 4096
        assertThat(VideoSmartResize.wholeVideo(3, 20, 41, 2, 32, 4096, 25_165_824))
                .containsExactly(32, 64);
    }

    @Test
    void refusesFewerFramesThanTheTemporalPatchAndExtremeAspectRatios() {
        assertThatThrownBy(() -> VideoSmartResize.wholeVideo(1, 64, 64, 2, 32, 4096, 25_165_824))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> assertThat(e.reason()).isEqualTo(RejectReason.VIDEO_TOO_SHORT))
                .hasMessageContaining("1 frame(s)")
                .hasMessageContaining("at least 2");
        assertThatThrownBy(() -> VideoSmartResize.perFrame(2, 401, 28, 3136, 12_845_056))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> assertThat(e.reason()).isEqualTo(RejectReason.EXTREME_ASPECT_RATIO))
                .hasMessageContaining("401x2");
    }
}
