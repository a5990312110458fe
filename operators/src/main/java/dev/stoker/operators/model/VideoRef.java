package dev.stoker.operators.model;

/**
 * A video referenced by a record: its path relative to the media root (resolved like an image path)
 * and optional per-video overrides of the sampling, as a messages-style video part may carry them
 * (qwen-vl-utils' {@code fps}, {@code min_pixels}, {@code max_pixels}). A value of 0 means the
 * configured default.
 */
public class VideoRef {
    /** Path relative to the media root, as written in the record: no Unicode normalization. */
    public String path;

    /** Frames per second to sample, or 0 for the configured default. */
    public double fps;

    /** Per-frame {@code min_pixels} override, or 0 for the configured default. */
    public long minPixels;

    /** Per-frame {@code max_pixels} override, or 0 for the configured default. */
    public long maxPixels;

    public VideoRef() {}

    public VideoRef(String path, double fps, long minPixels, long maxPixels) {
        this.path = path;
        this.fps = fps;
        this.minPixels = minPixels;
        this.maxPixels = maxPixels;
    }
}
