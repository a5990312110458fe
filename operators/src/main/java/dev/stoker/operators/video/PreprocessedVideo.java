package dev.stoker.operators.video;

import java.util.OptionalDouble;

/**
 * The model inputs of one video as its Hugging Face processor returns them ({@link
 * QwenVideoProcessor#process}).
 *
 * <p>{@code pixelValuesVideos}: float32, row-major {@code (gridT * gridH * gridW, 3 *
 * temporal_patch_size * patch_size^2)}, one row per patch in the processor's order. {@code
 * secondPerGridT}: seconds per temporal patch ({@code second_per_grid_ts}), present only for a
 * model that takes it (Qwen2.5-VL).
 */
public final class PreprocessedVideo {
    private final float[] pixelValuesVideos;
    private final ResizedVideo resized;
    private final OptionalDouble secondPerGridT;

    PreprocessedVideo(
            float[] pixelValuesVideos, ResizedVideo resized, OptionalDouble secondPerGridT) {
        this.pixelValuesVideos = pixelValuesVideos;
        this.resized = resized;
        this.secondPerGridT = secondPerGridT;
    }

    /** {@code pixel_values_videos} of this video, row-major (not a copy). */
    public float[] pixelValuesVideos() {
        return pixelValuesVideos;
    }

    /** The resized frames the rows were made from, with the grid. */
    public ResizedVideo resized() {
        return resized;
    }

    /** {@code video_grid_thw}: {@code {gridT, gridH, gridW}}. */
    public int[] gridThw() {
        return new int[] {resized.gridT(), resized.gridH(), resized.gridW()};
    }

    /**
     * {@code second_per_grid_ts}: {@code temporal_patch_size / sampled_fps} in seconds, or empty
     * when the model takes none (Qwen2-VL, Qwen3-VL).
     */
    public OptionalDouble secondPerGridT() {
        return secondPerGridT;
    }
}
