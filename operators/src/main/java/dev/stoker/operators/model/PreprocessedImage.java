package dev.stoker.operators.model;

/**
 * One image after Qwen-VL resizing, before normalisation and patchification.
 *
 * <p>{@code resizedRgb} is interleaved uint8 RGB, row-major, of shape {@code (gridH * patchSize,
 * gridW * patchSize, 3)}: exactly that many bytes. {@code gridT}, {@code gridH}, {@code gridW} are
 * the image's {@code image_grid_thw} row ({@code gridT} is 1 for a still image). Its {@code
 * pixel_values} are {@code Patchifier}'s output for these bytes.
 */
public class PreprocessedImage {
    public byte[] resizedRgb;
    public int gridT;
    public int gridH;
    public int gridW;

    public PreprocessedImage() {}

    public PreprocessedImage(byte[] resizedRgb, int gridT, int gridH, int gridW) {
        this.resizedRgb = resizedRgb;
        this.gridT = gridT;
        this.gridH = gridH;
        this.gridW = gridW;
    }

    /** Number of patch rows: {@code gridT * gridH * gridW}. */
    public int numPatches() {
        return gridT * gridH * gridW;
    }
}
