package dev.stoker.operators.model;

/**
 * An image referenced by a record: its path relative to the image root and optional per-image pixel
 * bounds (messages-style {@code min_pixels}/{@code max_pixels}, as qwen-vl-utils accepts).
 */
public class ImageRef {
    /**
     * Path relative to the image root ({@code stoker.image.root}, by default the dataset root), as
     * written in the record: no Unicode normalization.
     */
    public String path;

    /** Per-image {@code min_pixels} override, or 0 for the configured default. */
    public long minPixels;

    /** Per-image {@code max_pixels} override, or 0 for the configured default. */
    public long maxPixels;

    public ImageRef() {}

    public ImageRef(String path, long minPixels, long maxPixels) {
        this.path = path;
        this.minPixels = minPixels;
        this.maxPixels = maxPixels;
    }
}
