package dev.stoker.operators.pack;

/**
 * The rotary positions of one sample on its own, as transformers' Qwen-VL models compute them.
 *
 * <p>Matches {@code get_rope_index} of {@code Qwen2VLModel}, {@code Qwen2_5_VLModel} and {@code
 * Qwen3VLModel} (transformers 5.23.0) for one unpadded sample: runs of text tokens count on by one
 * on all three M-RoPE axes (temporal, height, width); a run of {@code <|image_pad|>} tokens of an
 * image with grid {@code (1, h, w)} gets, with {@code p} the next position, temporal {@code p},
 * height {@code p + i} and width {@code p + j} for its {@code (h / merge) x (w / merge)} tokens in
 * row-major order {@code (i, j)}; the next position after it is {@code p + max(h, w) / merge}. A
 * video's run is placed the same way with its temporal patches on the temporal axis as {@link
 * VideoTime} says (and the next position is again {@code p + max(h, w) / merge}, whatever the
 * temporal patches: transformers 5.23.0 does not add them). The text axis that packed sequences add
 * in front ({@code position_ids} of shape {@code (4, rows, L)}, from which the models tell the
 * packed samples apart) counts {@code 0 .. n-1}.
 */
public final class MropePositions {
    /** Rows of {@link #of}'s result: text, temporal, height, width. */
    public static final int AXES = 4;

    private MropePositions() {}

    /** How a model places a video's temporal patches on the M-RoPE temporal axis. */
    public enum VideoTime {
        /**
         * Qwen2-VL ({@code Qwen2VLModel.get_rope_index}): temporal patch {@code t} at {@code p +
         * t}; the whole video is one run of {@code <|video_pad|>} tokens with its grid.
         */
        PATCH_INDEX,
        /**
         * Qwen2.5-VL ({@code Qwen2_5_VLModel.get_rope_index}): temporal patch {@code t} at {@code p
         * + (long) (t * interval)}, {@code interval = tokens_per_second * second_per_grid_t} in
         * float32 (the model multiplies the float32 {@code second_per_grid_ts} tensor), truncated.
         */
        ABSOLUTE_TIME,
        /**
         * Qwen3-VL ({@code Qwen3VLModel.get_rope_index}): each temporal patch is a run of its own
         * (the timestamps separate them) placed as a grid {@code (1, h, w)}.
         */
        TIMESTAMPED
    }

    /**
     * Positions of a sample with still images only: {@link #of(long[], long[], long[], double[],
     * long, long, int, VideoTime, int)} without videos.
     *
     * @throws IllegalArgumentException as that method
     */
    public static long[][] of(
            long[] inputIds, long[] imageGridThw, long imageTokenId, int mergeSize) {
        return of(
                inputIds,
                imageGridThw,
                new long[0],
                new double[0],
                imageTokenId,
                -1,
                mergeSize,
                VideoTime.PATCH_INDEX,
                1);
    }

    /**
     * @param inputIds the sample's token ids, length {@code n}
     * @param imageGridThw flattened {@code (images, 3)} grids, in placeholder order
     * @param videoGridThw flattened {@code (videos, 3)} grids, in placeholder order
     * @param secondPerGridTs seconds per temporal patch per video (read by {@link
     *     VideoTime#ABSOLUTE_TIME} only)
     * @param imageTokenId id of {@code <|image_pad|>}
     * @param videoTokenId id of {@code <|video_pad|>}
     * @param mergeSize side of the block of patches merged into one token
     * @param videoTime the model's temporal placement of videos
     * @param tokensPerSecond {@code vision_config.tokens_per_second} ({@link
     *     VideoTime#ABSOLUTE_TIME} only)
     * @return {@code [4][n]} int64 positions: text, temporal, height, width
     * @throws IllegalArgumentException if the image or video tokens do not match the grids (a run
     *     whose length is not its grid's tokens, more runs than grids, or grids left over)
     */
    public static long[][] of(
            long[] inputIds,
            long[] imageGridThw,
            long[] videoGridThw,
            double[] secondPerGridTs,
            long imageTokenId,
            long videoTokenId,
            int mergeSize,
            VideoTime videoTime,
            int tokensPerSecond) {
        int n = inputIds.length;
        long[][] pos = new long[AXES][n];
        long next = 0;
        int image = 0;
        int video = 0;
        int videoPatch = 0; // TIMESTAMPED: temporal patches of the current video already placed
        int t = 0;
        while (t < n) {
            pos[0][t] = t;
            boolean isImage = inputIds[t] == imageTokenId;
            boolean isVideo = !isImage && inputIds[t] == videoTokenId;
            if (!isImage && !isVideo) {
                pos[1][t] = next;
                pos[2][t] = next;
                pos[3][t] = next;
                next++;
                t++;
                continue;
            }
            long[] grids = isImage ? imageGridThw : videoGridThw;
            int index = isImage ? image : video;
            String what = isImage ? "image" : "video";
            if (3 * index + 2 >= grids.length) {
                throw new IllegalArgumentException(
                        what
                                + " token run at token "
                                + t
                                + " has no "
                                + what
                                + "_grid_thw entry ("
                                + grids.length / 3
                                + " grids)");
            }
            long gridT = grids[3 * index];
            long gridH = grids[3 * index + 1] / mergeSize;
            long gridW = grids[3 * index + 2] / mergeSize;
            float interval = 1;
            if (isVideo && videoTime == VideoTime.TIMESTAMPED) {
                gridT = 1;
            } else if (isVideo && videoTime == VideoTime.ABSOLUTE_TIME) {
                interval = (float) tokensPerSecond * (float) secondPerGridTs[index];
            }
            long tokens = gridT * gridH * gridW;
            int end = t;
            while (end < n && inputIds[end] == inputIds[t]) {
                end++;
            }
            if (end - t != tokens) {
                throw new IllegalArgumentException(
                        what
                                + " "
                                + index
                                + " has "
                                + (end - t)
                                + " "
                                + what
                                + " tokens at token "
                                + t
                                + ", its grid needs "
                                + tokens);
            }
            int k = t;
            for (long ti = 0; ti < gridT; ti++) {
                long temporal = interval == 1 ? ti : (long) ((float) ti * interval);
                for (long hi = 0; hi < gridH; hi++) {
                    for (long wi = 0; wi < gridW; wi++, k++) {
                        pos[0][k] = k;
                        pos[1][k] = next + temporal;
                        pos[2][k] = next + hi;
                        pos[3][k] = next + wi;
                    }
                }
            }
            next += Math.max(gridH, gridW);
            if (isImage) {
                image++;
            } else {
                videoPatch++; // TIMESTAMPED: the next run is this video's next temporal patch
                if (videoTime != VideoTime.TIMESTAMPED || videoPatch == videoGridThw[3 * video]) {
                    videoPatch = 0;
                    video++;
                }
            }
            t = end;
        }
        if (3 * image != imageGridThw.length) {
            throw new IllegalArgumentException(
                    imageGridThw.length / 3 + " image grids but " + image + " image token runs");
        }
        if (3 * video != videoGridThw.length || videoPatch != 0) {
            throw new IllegalArgumentException(
                    videoGridThw.length / 3
                            + " video grids but "
                            + video
                            + " whole videos of video token runs");
        }
        return pos;
    }
}
