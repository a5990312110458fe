package dev.stoker.operators.video;

/**
 * A video's frames after the resize of its Hugging Face video processor, before rescaling and
 * patchifying ({@link QwenVideoProcessor#resize}).
 *
 * <p>{@code rgb} is interleaved uint8 RGB, frame-major then row-major: channel {@code c} of column
 * {@code x}, row {@code y} of frame {@code f} is {@code rgb[((f * height + y) * width + x) * 3 + c]
 * & 0xFF}; exactly {@code frames * height * width * 3} bytes. {@code frames} is the number of
 * frames given, not padded: {@code gridT = ceil(frames / temporal_patch_size)}, the last temporal
 * patch repeating the last frame as the processor's {@code patchify} pads it. The array is shared,
 * not copied.
 */
public final class ResizedVideo {
    private final byte[] rgb;
    private final int frames;
    private final int height;
    private final int width;
    private final int gridT;
    private final int gridH;
    private final int gridW;

    /**
     * @param rgb the frames' bytes, exactly {@code frames * height * width * 3}
     * @param frames number of frames, at least 1
     * @param height frame height in pixels, {@code gridH * patch_size}
     * @param width frame width in pixels, {@code gridW * patch_size}
     * @param gridT temporal patches
     * @param gridH patch rows
     * @param gridW patch columns
     * @throws IllegalArgumentException if the array length does not match
     */
    ResizedVideo(byte[] rgb, int frames, int height, int width, int gridT, int gridH, int gridW) {
        if (rgb.length != (long) frames * height * width * 3) {
            throw new IllegalArgumentException(
                    rgb.length + " bytes for " + frames + " frames of " + width + "x" + height);
        }
        this.rgb = rgb;
        this.frames = frames;
        this.height = height;
        this.width = width;
        this.gridT = gridT;
        this.gridH = gridH;
        this.gridW = gridW;
    }

    /** The resized frames' interleaved RGB bytes (not a copy). */
    public byte[] rgb() {
        return rgb;
    }

    /** Number of frames in {@link #rgb()} (not padded to a multiple of the temporal patch). */
    public int frames() {
        return frames;
    }

    /** Resized frame height in pixels. */
    public int height() {
        return height;
    }

    /** Resized frame width in pixels. */
    public int width() {
        return width;
    }

    /** {@code video_grid_thw[0]}: temporal patches, {@code ceil(frames / temporal_patch_size)}. */
    public int gridT() {
        return gridT;
    }

    /** {@code video_grid_thw[1]}: patch rows, {@code height / patch_size}. */
    public int gridH() {
        return gridH;
    }

    /** {@code video_grid_thw[2]}: patch columns, {@code width / patch_size}. */
    public int gridW() {
        return gridW;
    }

    /** Rows of {@code pixel_values_videos}: {@code gridT * gridH * gridW}. */
    public int rows() {
        return gridT * gridH * gridW;
    }
}
