package dev.stoker.operators.model;

/**
 * One video after frame sampling and its model's video-processor resize, before normalisation and
 * patchification: the video counterpart of {@link PreprocessedImage}.
 *
 * <p>{@code resizedRgb} is interleaved uint8 RGB, frame-major then row-major, of shape {@code
 * (frames, gridH * patchSize, gridW * patchSize, 3)}: exactly that many bytes. {@code frames} is
 * the number of sampled frames, not padded; {@code gridT = ceil(frames / temporal_patch_size)}, the
 * last temporal patch repeating the last frame as the Hugging Face processor's patchify pads it.
 * {@code gridT}, {@code gridH}, {@code gridW} are the video's {@code video_grid_thw} row.
 */
public class SampledVideo {
    public byte[] resizedRgb;
    public int frames;
    public int gridT;
    public int gridH;
    public int gridW;

    /** The decoded frames' indices in the stream (0-based, ascending), one per sampled frame. */
    public int[] frameIndices;

    /** The container's average frame rate (frames per second) that the sampling read. */
    public double videoFps;

    /** Frames per second of the sampled frames (the rate the processor reports for them). */
    public double sampledFps;

    /**
     * Seconds per temporal patch ({@code second_per_grid_ts}: temporal_patch_size / sampledFps).
     */
    public double secondPerGridT;

    public SampledVideo() {}

    /** Number of {@code pixel_values_videos} rows: {@code gridT * gridH * gridW}. */
    public int numPatches() {
        return gridT * gridH * gridW;
    }
}
