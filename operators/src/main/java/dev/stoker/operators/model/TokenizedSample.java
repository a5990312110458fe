package dev.stoker.operators.model;

import org.apache.flink.api.common.typeinfo.TypeInfo;

/**
 * A training sample ready for batching, named as the Hugging Face Qwen-VL processor names its
 * outputs, with its images and videos still as resized RGB bytes. Flink serializes it with {@link
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

    /**
     * All videos' resized frames concatenated in video order ({@link SampledVideo#resizedRgb}):
     * each video interleaved uint8 RGB, frame-major then row-major, shape {@code (frames, grid_h *
     * patch_size, grid_w * patch_size, 3)}, its frames not padded to the temporal patch. The sink
     * turns them into the batch's {@code pixel_values_videos}. Empty without videos.
     */
    public byte[] videoRgb = new byte[0];

    /** Flattened {@code (num_videos, 3)} int64 array of (grid_t, grid_h, grid_w) per video. */
    public long[] videoGridThw = new long[0];

    /**
     * Frames of each video in {@link #videoRgb} ({@link SampledVideo#frames}, not padded: {@code
     * grid_t = ceil(frames / temporal_patch_size)}).
     */
    public int[] videoFrames = new int[0];

    /**
     * Seconds per temporal patch of each video ({@link SampledVideo#secondPerGridT}, Qwen2.5-VL's
     * {@code second_per_grid_ts}).
     */
    public double[] secondPerGridTs = new double[0];

    public TokenizedSample() {}

    public TokenizedSample(
            RecordRef ref, long[] inputIds, long[] labels, byte[] resizedRgb, long[] imageGridThw) {
        this.ref = ref;
        this.inputIds = inputIds;
        this.labels = labels;
        this.resizedRgb = resizedRgb;
        this.imageGridThw = imageGridThw;
    }

    /** Sets the video fields (arrays taken over, not copied); returns this sample. */
    public TokenizedSample withVideos(
            byte[] videoRgb, long[] videoGridThw, int[] videoFrames, double[] secondPerGridTs) {
        this.videoRgb = videoRgb;
        this.videoGridThw = videoGridThw;
        this.videoFrames = videoFrames;
        this.secondPerGridTs = secondPerGridTs;
        return this;
    }

    public int numImages() {
        return imageGridThw.length / 3;
    }

    public int numVideos() {
        return videoGridThw.length / 3;
    }
}
