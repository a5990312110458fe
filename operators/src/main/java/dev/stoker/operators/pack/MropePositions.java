package dev.stoker.operators.pack;

/**
 * The rotary positions of one sample on its own, as transformers' Qwen-VL models compute them.
 *
 * <p>Matches {@code get_rope_index} of {@code Qwen2VLModel}, {@code Qwen2_5_VLModel} and {@code
 * Qwen3VLModel} (transformers 5.23.0) for one unpadded sample with still images: runs of text
 * tokens count on by one on all three M-RoPE axes (temporal, height, width); a run of {@code
 * <|image_pad|>} tokens of an image with grid {@code (1, h, w)} gets, with {@code p} the next
 * position, temporal {@code p}, height {@code p + i} and width {@code p + j} for its {@code (h /
 * merge) x (w / merge)} tokens in row-major order {@code (i, j)}; the next position after it is
 * {@code p + max(h, w) / merge}. The text axis that packed sequences add in front ({@code
 * position_ids} of shape {@code (4, rows, L)}, from which the models tell the packed samples apart)
 * counts {@code 0 .. n-1}.
 */
public final class MropePositions {
    /** Rows of {@link #of}'s result: text, temporal, height, width. */
    public static final int AXES = 4;

    private MropePositions() {}

    /**
     * @param inputIds the sample's token ids, length {@code n}
     * @param imageGridThw flattened {@code (images, 3)} grids, in placeholder order
     * @param imageTokenId id of {@code <|image_pad|>}
     * @param mergeSize side of the block of patches merged into one token
     * @return {@code [4][n]} int64 positions: text, temporal, height, width
     * @throws IllegalArgumentException if the image tokens do not match the grids (a run of image
     *     tokens whose length is not its grid's {@code t*h*w / merge^2}, more runs than grids, or
     *     grids left over)
     */
    public static long[][] of(
            long[] inputIds, long[] imageGridThw, long imageTokenId, int mergeSize) {
        int n = inputIds.length;
        long[][] pos = new long[AXES][n];
        long next = 0;
        int image = 0;
        int t = 0;
        while (t < n) {
            pos[0][t] = t;
            if (inputIds[t] != imageTokenId) {
                pos[1][t] = next;
                pos[2][t] = next;
                pos[3][t] = next;
                next++;
                t++;
                continue;
            }
            if (3 * image + 2 >= imageGridThw.length) {
                throw new IllegalArgumentException(
                        "image token run at token "
                                + t
                                + " has no image_grid_thw entry ("
                                + image
                                + " grids)");
            }
            long gridT = imageGridThw[3 * image];
            long gridH = imageGridThw[3 * image + 1] / mergeSize;
            long gridW = imageGridThw[3 * image + 2] / mergeSize;
            long tokens = gridT * gridH * gridW;
            int end = t;
            while (end < n && inputIds[end] == imageTokenId) {
                end++;
            }
            if (end - t != tokens) {
                throw new IllegalArgumentException(
                        "image "
                                + image
                                + " has "
                                + (end - t)
                                + " image tokens at token "
                                + t
                                + ", its grid needs "
                                + tokens);
            }
            int k = t;
            for (long ti = 0; ti < gridT; ti++) {
                for (long hi = 0; hi < gridH; hi++) {
                    for (long wi = 0; wi < gridW; wi++, k++) {
                        pos[0][k] = k;
                        pos[1][k] = next + ti;
                        pos[2][k] = next + hi;
                        pos[3][k] = next + wi;
                    }
                }
            }
            next += Math.max(gridH, gridW);
            image++;
            t = end;
        }
        if (3 * image != imageGridThw.length) {
            throw new IllegalArgumentException(
                    imageGridThw.length / 3 + " image grids but " + image + " image token runs");
        }
        return pos;
    }
}
