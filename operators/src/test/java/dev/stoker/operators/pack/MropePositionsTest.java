package dev.stoker.operators.pack;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import org.junit.jupiter.api.Test;

/**
 * One sample's positions, worked by hand from transformers 5.23's get_rope_index (the real-model
 * test, python/tests/model/test_packing.py, checks them against the model itself; with videos,
 * VideoTokenParityTest against get_rope_index's goldens), and refusals.
 */
class MropePositionsTest {
    private static final long IMG = 151655;

    @Test
    void textCountsOnAndAnImageTakesItsGridThenMaxSideOfPositions() {
        // 2 text tokens, an image of grid (1, 4, 6) = 2 x 3 merged tokens, 2 text tokens
        long[] ids = {10, 11, IMG, IMG, IMG, IMG, IMG, IMG, 12, 13};
        long[][] pos = MropePositions.of(ids, new long[] {1, 4, 6}, IMG, 2);
        assertThat(pos[0]).containsExactly(0, 1, 2, 3, 4, 5, 6, 7, 8, 9);
        assertThat(pos[1]).containsExactly(0, 1, 2, 2, 2, 2, 2, 2, 5, 6);
        assertThat(pos[2]).containsExactly(0, 1, 2, 2, 2, 3, 3, 3, 5, 6);
        assertThat(pos[3]).containsExactly(0, 1, 2, 3, 4, 2, 3, 4, 5, 6);
    }

    @Test
    void twoImagesEachStartAtTheNextPosition() {
        // image (1, 2, 2) = 1 token at p=1, next p=2; text; image (1, 4, 2) = 2 tokens at p=3
        long[] ids = {10, IMG, 11, IMG, IMG};
        long[][] pos = MropePositions.of(ids, new long[] {1, 2, 2, 1, 4, 2}, IMG, 2);
        assertThat(pos[1]).containsExactly(0, 1, 2, 3, 3);
        assertThat(pos[2]).containsExactly(0, 1, 2, 3, 4);
        assertThat(pos[3]).containsExactly(0, 1, 2, 3, 3);
    }

    @Test
    void imageTokensThatDoNotMatchTheGridsAreRefused() {
        assertThatThrownBy(
                        () ->
                                MropePositions.of(
                                        new long[] {IMG, IMG}, new long[] {1, 2, 2}, IMG, 2))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("has 2 image tokens at token 0, its grid needs 1");
        assertThatThrownBy(() -> MropePositions.of(new long[] {IMG}, new long[0], IMG, 2))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("no image_grid_thw entry");
        assertThatThrownBy(() -> MropePositions.of(new long[] {1}, new long[] {1, 2, 2}, IMG, 2))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("1 image grids but 0 image token runs");
    }

    @Test
    void videoTokensThatDoNotMatchTheirGridsAreRefused() {
        long vid = 151656;
        // Qwen3-VL: a video of grid (2, 2, 2) needs two runs of 1 token; one run is not all of it
        long[] oneRun = {10, vid, 11};
        assertThatThrownBy(
                        () ->
                                MropePositions.of(
                                        oneRun,
                                        new long[0],
                                        new long[] {2, 2, 2},
                                        new double[] {1},
                                        IMG,
                                        vid,
                                        2,
                                        MropePositions.VideoTime.TIMESTAMPED,
                                        0))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("1 video grids but 0 whole videos");
        // Qwen2-VL: the same grid is one run of 2 tokens
        assertThatThrownBy(
                        () ->
                                MropePositions.of(
                                        oneRun,
                                        new long[0],
                                        new long[] {2, 2, 2},
                                        new double[] {1},
                                        IMG,
                                        vid,
                                        2,
                                        MropePositions.VideoTime.PATCH_INDEX,
                                        0))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("video 0 has 1 video tokens at token 1, its grid needs 2");
    }
}
