package dev.stoker.operators.image;

/**
 * A decoded 8-bit RGB image.
 *
 * <p>{@code pixels} is interleaved uint8 RGB, row-major: the sample of channel {@code c} (0 = red,
 * 1 = green, 2 = blue) at column {@code x}, row {@code y} is {@code pixels[(y * width + x) * 3 + c]
 * & 0xFF}; the array holds at least {@code width * height * 3} bytes (a reused decode or resize
 * buffer may be longer; bytes past that are not part of the image). Width and height are in pixels,
 * both at least 1. The array is shared, not copied.
 */
public final class RgbImage {
    private final int width;
    private final int height;
    private final byte[] pixels;

    /**
     * @param width width in pixels, at least 1
     * @param height height in pixels, at least 1
     * @param pixels interleaved RGB bytes, at least {@code width * height * 3} of them
     * @throws IllegalArgumentException if a size is not positive or the array is too short
     */
    public RgbImage(int width, int height, byte[] pixels) {
        if (width < 1 || height < 1) {
            throw new IllegalArgumentException(
                    "image size must be positive: " + width + "x" + height);
        }
        if (pixels.length < (long) width * height * 3) {
            throw new IllegalArgumentException(
                    "expected at least "
                            + (long) width * height * 3
                            + " bytes for "
                            + width
                            + "x"
                            + height
                            + " RGB, got "
                            + pixels.length);
        }
        this.width = width;
        this.height = height;
        this.pixels = pixels;
    }

    public int width() {
        return width;
    }

    public int height() {
        return height;
    }

    /** The interleaved RGB bytes (not a copy), at least {@code width * height * 3} of them. */
    public byte[] pixels() {
        return pixels;
    }

    /** Channel {@code c} (0..2) at ({@code x}, {@code y}) as an unsigned value 0..255. */
    public int get(int x, int y, int c) {
        return pixels[(y * width + x) * 3 + c] & 0xFF;
    }
}
