package dev.stoker.operators.model;

import org.apache.flink.api.common.typeinfo.TypeInfo;

/**
 * A training sample ready for batching, named as the Hugging Face Qwen-VL processor names its
 * outputs, with its images still as resized RGB bytes. Flink serializes it with {@link
 * TokenizedSampleSerializer} (bulk array copies).
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
     * All images' resized pixels concatenated in image order: each image interleaved uint8 RGB,
     * row-major, shape {@code (grid_h * patch_size, grid_w * patch_size, 3)}. The sink turns them
     * into the batch's {@code pixel_values} ({@code Patchifier}); they travel as bytes because they
     * are 8x smaller than the float32 patches of Qwen2-VL.
     */
    public byte[] resizedRgb;

    /** Flattened {@code (num_images, 3)} int64 array of (grid_t, grid_h, grid_w) per image. */
    public long[] imageGridThw;

    public TokenizedSample() {}

    public TokenizedSample(
            RecordRef ref, long[] inputIds, long[] labels, byte[] resizedRgb, long[] imageGridThw) {
        this.ref = ref;
        this.inputIds = inputIds;
        this.labels = labels;
        this.resizedRgb = resizedRgb;
        this.imageGridThw = imageGridThw;
    }

    public int numImages() {
        return imageGridThw.length / 3;
    }
}
