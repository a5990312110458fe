package dev.stoker.operators.model;

import org.apache.flink.api.common.typeinfo.TypeInfo;

/**
 * A training sample ready for batching, named as the Hugging Face Qwen-VL processor names its
 * outputs. Flink serializes it with {@link TokenizedSampleSerializer} (bulk array copies).
 */
@TypeInfo(TokenizedSampleTypeInfo.Factory.class)
public class TokenizedSample {
    public RecordRef ref;

    /** Token ids of the rendered chat, length L (int64 in the batch). */
    public long[] inputIds;

    /**
     * Same length as {@link #inputIds}: the id on assistant tokens that are trained, -100
     * elsewhere.
     */
    public long[] labels;

    /**
     * All images' patches concatenated in image order: float32, row-major, shape {@code (sum of
     * grid_t*grid_h*grid_w, patchDim)}.
     */
    public float[] pixelValues;

    /** Flattened {@code (num_images, 3)} int64 array of (grid_t, grid_h, grid_w) per image. */
    public long[] imageGridThw;

    public TokenizedSample() {}

    public TokenizedSample(
            RecordRef ref,
            long[] inputIds,
            long[] labels,
            float[] pixelValues,
            long[] imageGridThw) {
        this.ref = ref;
        this.inputIds = inputIds;
        this.labels = labels;
        this.pixelValues = pixelValues;
        this.imageGridThw = imageGridThw;
    }

    public int numImages() {
        return imageGridThw.length / 3;
    }
}
