package dev.stoker.operators.video;

import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;

/**
 * The frame-index rules in circulation for Qwen-VL video, each with the float arithmetic of its
 * source so that the same indices come out: the number of frames to sample from a video's frame
 * count and frame rate ({@link VideoMetadata#totalFrames()}, {@link VideoMetadata#fps()}), and
 * which frames. Indices are positions in decode output order ({@link VideoDecoder}), ascending.
 */
public final class FrameSampling {
    /** The frame rate Qwen3-VL assumes when the video has none. */
    static final double QWEN3_DEFAULT_VIDEO_FPS = 24;

    private FrameSampling() {}

    /**
     * Qwen2-VL and Qwen2.5-VL: transformers 5.23.0 {@code
     * models/qwen2_vl/video_processing_qwen2_vl.py}, {@code Qwen2VLVideoProcessor.sample_frames}
     * with {@code fps} given and {@code num_frames} not: {@code max_frames = floor(min(max_frames,
     * total) / temporal_patch_size) * temporal_patch_size}; {@code n = total / video_fps * fps}
     * (float64); {@code n = min(max(n, min_frames), max_frames, total)}; {@code n = floor(n /
     * temporal_patch_size) * temporal_patch_size}; indices {@code torch.arange(0, total, total /
     * n).int()}: a float32 arange (torch's default dtype) whose length is {@code ceil(total /
     * step)} in float64 (so it can be {@code n + 1} long, the last index then being {@code total}
     * or more, which the decoder does not find, as in the reference) and whose values are {@code
     * float32(i * step)} truncated toward zero.
     *
     * @param totalFrames the container's frame count
     * @param videoFps the video's average frame rate (finite and positive; the reference's PyAV
     *     loader fails before sampling when there is none)
     * @param fps the requested frames per second (the processor's {@code fps}, 2.0 by default)
     * @param minFrames the processor's {@code min_frames} (4)
     * @param maxFrames the processor's {@code max_frames} (768)
     * @param temporalPatchSize the processor's {@code temporal_patch_size} (2)
     * @return the frame indices, ascending
     * @throws RejectedRecordException VIDEO_TOO_SHORT when the frame count gives no frame to sample
     *     (the reference divides by zero), CORRUPT_VIDEO when the video has no frame rate
     */
    public static int[] qwen2Vl(
            int totalFrames,
            double videoFps,
            double fps,
            int minFrames,
            int maxFrames,
            int temporalPatchSize)
            throws RejectedRecordException {
        requireRate(videoFps);
        long cap =
                (long) Math.floor((double) Math.min(maxFrames, totalFrames) / temporalPatchSize)
                        * temporalPatchSize;
        double n = totalFrames / videoFps * fps;
        n = Math.min(Math.min(Math.max(n, minFrames), cap), totalFrames);
        long numFrames = (long) Math.floor(n / temporalPatchSize) * temporalPatchSize;
        if (numFrames <= 0) {
            throw new RejectedRecordException(
                    RejectReason.VIDEO_TOO_SHORT,
                    "a video of "
                            + totalFrames
                            + " frames gives no group of "
                            + temporalPatchSize
                            + " frames to sample (Qwen2-VL's sample_frames divides by zero)");
        }
        return floatArange(totalFrames, numFrames);
    }

    /**
     * Qwen2-VL and Qwen2.5-VL with a fixed frame count: the same {@code sample_frames} with {@code
     * num_frames} given: {@code n = round(num_frames / temporal_patch_size) * temporal_patch_size}
     * (Python's round, half to even), then the same float32 arange as {@link #qwen2Vl}.
     *
     * @param totalFrames the container's frame count
     * @param numFrames the requested frame count
     * @param temporalPatchSize the processor's {@code temporal_patch_size} (2)
     * @return the frame indices, ascending
     * @throws RejectedRecordException VIDEO_TOO_SHORT when the rounded count is 0 or more than
     *     {@code totalFrames} (the reference raises)
     */
    public static int[] qwen2VlNumFrames(int totalFrames, int numFrames, int temporalPatchSize)
            throws RejectedRecordException {
        long n = (long) Math.rint((double) numFrames / temporalPatchSize) * temporalPatchSize;
        if (n <= 0 || n > totalFrames) {
            throw new RejectedRecordException(
                    RejectReason.VIDEO_TOO_SHORT,
                    "cannot sample "
                            + n
                            + " frames from a video of "
                            + totalFrames
                            + " (Qwen2-VL's sample_frames)");
        }
        return floatArange(totalFrames, n);
    }

    /**
     * {@code torch.arange(0, total, total / n).int()} on the CPU: float32 (torch's default dtype)
     * values {@code float32(i * step)} with {@code step = total / n} in float64, truncated toward
     * zero; the length is {@code ceil(total / step)} in float64 (torch's {@code arange} size).
     */
    private static int[] floatArange(int totalFrames, long numFrames) {
        double step = (double) totalFrames / numFrames;
        long size = (long) Math.ceil(totalFrames / step);
        int[] indices = new int[(int) size];
        for (int i = 0; i < size; i++) {
            indices[i] = (int) (float) (i * step);
        }
        return indices;
    }

    /**
     * Qwen3-VL: transformers 5.23.0 {@code models/qwen3_vl/video_processing_qwen3_vl.py}, {@code
     * Qwen3VLVideoProcessor.sample_frames} with {@code fps} given and {@code num_frames} not:
     * {@code n = int(total / video_fps * fps)} (float64, truncated), {@code n = min(max(n,
     * min_frames), max_frames, total)}; indices {@code np.linspace(0, total - 1,
     * n).round().astype(int)}: float64 values {@code i * ((total - 1) / (n - 1))}, the last one
     * exactly {@code total - 1}, rounded half to even.
     *
     * @param totalFrames the container's frame count
     * @param videoFps the video's average frame rate, or {@link Double#NaN} when it has none (then
     *     24, as the processor assumes)
     * @param fps the requested frames per second (2.0 by default)
     * @param minFrames the processor's {@code min_frames} (4)
     * @param maxFrames the processor's {@code max_frames} (768)
     * @return the frame indices, ascending
     * @throws RejectedRecordException VIDEO_TOO_SHORT when there is no frame (the reference's
     *     loader then fails on an empty index list)
     */
    public static int[] qwen3Vl(
            int totalFrames, double videoFps, double fps, int minFrames, int maxFrames)
            throws RejectedRecordException {
        double rate = Double.isNaN(videoFps) ? QWEN3_DEFAULT_VIDEO_FPS : videoFps;
        long n = (long) (totalFrames / rate * fps);
        n = Math.min(Math.min(Math.max(n, minFrames), maxFrames), totalFrames);
        return linspace(totalFrames, (int) n, true, "Qwen3-VL");
    }

    /**
     * Qwen3-VL with a fixed frame count: the same {@code sample_frames} with {@code num_frames}
     * given: {@code np.linspace(0, total - 1, num_frames).round().astype(int)}, no clamping.
     *
     * @param totalFrames the container's frame count
     * @param numFrames the requested frame count
     * @return the frame indices, ascending
     * @throws RejectedRecordException VIDEO_TOO_SHORT when there is no frame to sample
     */
    public static int[] qwen3VlNumFrames(int totalFrames, int numFrames)
            throws RejectedRecordException {
        return linspace(totalFrames, numFrames, true, "Qwen3-VL");
    }

    /**
     * The LLaMA-Factory / torchtitan rule: {@code np.linspace(0, total - 1, n).astype(int)},
     * float64 values truncated toward zero.
     *
     * @param totalFrames the container's frame count
     * @param numFrames how many frames to sample, at most {@code totalFrames}
     * @return the frame indices, ascending
     * @throws RejectedRecordException VIDEO_TOO_SHORT when there is no frame to sample
     */
    public static int[] linspaceFloor(int totalFrames, int numFrames)
            throws RejectedRecordException {
        return linspace(totalFrames, numFrames, false, "linspace");
    }

    /** numpy 2.3 {@code linspace(0, total - 1, num)} (endpoint), rounded or truncated. */
    private static int[] linspace(int totalFrames, int num, boolean round, String rule)
            throws RejectedRecordException {
        if (num <= 0 || totalFrames <= 0) {
            throw new RejectedRecordException(
                    RejectReason.VIDEO_TOO_SHORT,
                    "a video of "
                            + totalFrames
                            + " frames gives no frame to sample ("
                            + rule
                            + ")");
        }
        double stop = totalFrames - 1;
        int[] indices = new int[num];
        if (num == 1) {
            return indices;
        }
        double step = stop / (num - 1);
        for (int i = 0; i < num; i++) {
            double y = i == num - 1 ? stop : i * step;
            indices[i] = (int) (round ? Math.rint(y) : y);
        }
        return indices;
    }

    private static void requireRate(double videoFps) throws RejectedRecordException {
        if (!(videoFps > 0) || Double.isInfinite(videoFps)) {
            throw new RejectedRecordException(
                    RejectReason.CORRUPT_VIDEO,
                    "the video has no average frame rate (the reference's PyAV loader fails on it)");
        }
    }
}
