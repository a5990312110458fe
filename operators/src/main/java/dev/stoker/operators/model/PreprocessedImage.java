package dev.stoker.operators.model;

/**
 * One image after Qwen-VL preprocessing.
 *
 * <p>{@code pixelValues} is row-major float32 of shape {@code (gridT*gridH*gridW,
 * channels*temporalPatchSize*patchSize*patchSize)}, i.e. {@code (grid_t*grid_h*grid_w, 1176)} for
 * Qwen2-VL, in the Hugging Face {@code Qwen2VLImageProcessor} patch order.
 */
public class PreprocessedImage {
    public float[] pixelValues;
    public int gridT;
    public int gridH;
    public int gridW;

    public PreprocessedImage() {}

    public PreprocessedImage(float[] pixelValues, int gridT, int gridH, int gridW) {
        this.pixelValues = pixelValues;
        this.gridT = gridT;
        this.gridH = gridH;
        this.gridW = gridW;
    }

    /** Number of patch rows: {@code gridT * gridH * gridW}. */
    public int numPatches() {
        return gridT * gridH * gridW;
    }
}
