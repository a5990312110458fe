package dev.stoker.operators.video;

import java.io.Serializable;

/**
 * Qwen-VL video preprocessing settings, as a model's Hugging Face video processor holds them
 * ({@code Qwen2VLVideoProcessor} or {@code Qwen3VLVideoProcessor} of transformers 5.23.0 with the
 * checkpoint's config). A preset's values come from {@link
 * dev.stoker.operators.preset.ModelPreset#videoConfig()}, where each preset's defaults are declared
 * and cited; this class declares none of its own.
 *
 * <p>Sizes are in pixels, {@code minPixels}/{@code maxPixels} are the processor's {@code
 * size.shortest_edge}/{@code size.longest_edge} (pixels of one frame for {@link
 * PixelBudget#PER_FRAME}, of all frames together for {@link PixelBudget#WHOLE_VIDEO}); {@code
 * imageMean}/{@code imageStd} are per RGB channel on the 0..1 scale.
 *
 * <p>Mutable bean for configuration; treat an instance as immutable once handed to an operator.
 */
public class QwenVideoConfig implements Serializable {
    private static final long serialVersionUID = 1L;

    /** Over what the {@code smart_resize} pixel bounds count. */
    public enum PixelBudget {
        /**
         * Qwen2-VL / Qwen2.5-VL: one frame's area within {@code [minPixels, maxPixels]} ({@code
         * smart_resize} of {@code models/qwen2_vl/video_processing_qwen2_vl.py}).
         */
        PER_FRAME,
        /**
         * Qwen3-VL: {@code round(T / temporal_patch_size) * temporal_patch_size * h * w} within the
         * bounds ({@code smart_resize} of {@code models/qwen3_vl/video_processing_qwen3_vl.py}).
         */
        WHOLE_VIDEO
    }

    /** Spatial patch side of the vision encoder ({@code patch_size}). */
    public int patchSize;

    /** Frames per temporal patch ({@code temporal_patch_size}). */
    public int temporalPatchSize;

    /** Patches merged per side into one token ({@code merge_size}). */
    public int mergeSize;

    /** {@code size.shortest_edge}: the smallest area in pixels, at least 1. */
    public long minPixels;

    /** {@code size.longest_edge}: the largest area in pixels. */
    public long maxPixels;

    public double[] imageMean;
    public double[] imageStd;

    /** Which {@code smart_resize} the model's video processor runs. */
    public PixelBudget budget;

    /**
     * {@code cap_pixels_per_frame}: also bound the area by an even share of a whole-video budget
     * (qwen-vl-utils' behaviour). Off in every preset: transformers 5.23.0 treats the unset value
     * as {@code False} (with a warning that the default will change).
     */
    public boolean capPixelsPerFrame;

    /**
     * {@code max_video_tokens}: the token budget {@link #capPixelsPerFrame} derives its cap from.
     */
    public int maxVideoTokens;

    /** {@code min_frames}: fewest frames the processor's own frame sampling picks. */
    public int minFrames;

    /** {@code max_frames}: most frames the processor's own frame sampling picks. */
    public int maxFrames;

    /**
     * {@code fps}: frames per second the processor's own frame sampling picks by default, or 0 when
     * its class defines none (Qwen2-VL, Qwen2.5-VL: {@code do_sample_frames} is False there and the
     * caller samples).
     */
    public double fps;

    /**
     * Whether the model takes {@code second_per_grid_ts} (Qwen2.5-VL: {@code
     * Qwen2_5_VLProcessor._process_videos}).
     */
    public boolean secondPerGridTs;

    /** A copy with the same settings (the mean and std arrays copied too). */
    public QwenVideoConfig copy() {
        QwenVideoConfig c = new QwenVideoConfig();
        c.patchSize = patchSize;
        c.temporalPatchSize = temporalPatchSize;
        c.mergeSize = mergeSize;
        c.minPixels = minPixels;
        c.maxPixels = maxPixels;
        c.imageMean = imageMean.clone();
        c.imageStd = imageStd.clone();
        c.budget = budget;
        c.capPixelsPerFrame = capPixelsPerFrame;
        c.maxVideoTokens = maxVideoTokens;
        c.minFrames = minFrames;
        c.maxFrames = maxFrames;
        c.fps = fps;
        c.secondPerGridTs = secondPerGridTs;
        return c;
    }

    /** Side multiple of resized frames in pixels: {@code patchSize * mergeSize}. */
    public int factor() {
        return patchSize * mergeSize;
    }

    /**
     * Length of one {@code pixel_values_videos} row: {@code 3 * temporalPatchSize * patchSize^2}
     * (1176 for Qwen2-VL, 1536 for Qwen3-VL).
     */
    public int patchDim() {
        return 3 * temporalPatchSize * patchSize * patchSize;
    }

    /**
     * Checks the settings a processor relies on.
     *
     * @throws IllegalArgumentException naming the first bad setting
     */
    public void validate() {
        require(patchSize >= 1, "patchSize must be at least 1: " + patchSize);
        require(
                temporalPatchSize >= 1,
                "temporalPatchSize must be at least 1: " + temporalPatchSize);
        require(mergeSize >= 1, "mergeSize must be at least 1: " + mergeSize);
        require(
                minPixels >= 1 && minPixels <= maxPixels,
                "need 1 <= minPixels <= maxPixels: " + minPixels + ", " + maxPixels);
        require(
                imageMean != null
                        && imageMean.length == 3
                        && imageStd != null
                        && imageStd.length == 3,
                "imageMean and imageStd need 3 values each");
        for (double s : imageStd) {
            require(s != 0, "imageStd must not be 0");
        }
        require(budget != null, "budget is not set");
        require(!capPixelsPerFrame || maxVideoTokens >= 1, "maxVideoTokens must be at least 1");
    }

    private static void require(boolean ok, String message) {
        if (!ok) {
            throw new IllegalArgumentException(message);
        }
    }
}
