package dev.stoker.operators.video;

import java.util.Arrays;
import java.util.Comparator;
import java.util.stream.IntStream;

/**
 * A video stream's packets in decode order, read by one demux pass without decoding ({@link
 * VideoDecoder}): each packet's presentation timestamp and keyframe flag. It gives the frame count
 * of a container that stores none, and the {@link Plan} that lets the decoder skip the groups of
 * pictures holding no sampled frame.
 *
 * @param pts each packet's presentation timestamp in the stream's time base ({@code AV_NOPTS_VALUE}
 *     where the container has none)
 * @param key whether each packet is a keyframe ({@code AV_PKT_FLAG_KEY}: a point where decoding can
 *     start, IDR/CRA/open-GOP I-frame, VP9/AV1 key frame)
 */
record PacketScan(long[] pts, boolean[] key) {
    /** FFmpeg's {@code AV_NOPTS_VALUE}. */
    static final long NO_PTS = Long.MIN_VALUE;

    /**
     * Skipping is used only when it leaves out at least this share of the packets up to the last
     * frame needed.
     */
    static final double MIN_SKIPPED_SHARE = 0.25;

    /** The number of packets, one per frame. */
    int count() {
        return pts.length;
    }

    /**
     * Where decoding starts for each sampled frame, when the decoder may skip to keyframes.
     *
     * @param sortedPts the packets' timestamps in ascending order: a frame's index is the rank of
     *     its timestamp (its position in display order, which is the reference's output order)
     * @param frames the sampled frame indices below {@link #count()}, ascending, distinct
     * @param starts for each of {@code frames}, the decode-order position of the keyframe packet
     *     from which that frame decodes completely (its own group of pictures, or the one before
     *     for a leading frame of an open GOP, which references it); non-decreasing
     * @param skippedPackets how many packets up to the last needed one are not decoded
     */
    record Plan(long[] sortedPts, int[] frames, int[] starts, int skippedPackets) {
        /** The frame index of a decoded frame's timestamp; -1 when no packet has it. */
        int indexOf(long framePts) {
            if (framePts == NO_PTS) {
                return -1;
            }
            int r = Arrays.binarySearch(sortedPts, framePts);
            return r >= 0 ? r : -1;
        }
    }

    /**
     * The plan for decoding the frames at {@code wanted}, or {@code null} when the decoder should
     * decode sequentially from the start, as the reference does: when the packet index is not clean
     * (no packets; the first one not a keyframe; a packet without a timestamp; two packets with one
     * timestamp; a stored frame count that differs from the packets), or when skipping would leave
     * out less than {@value #MIN_SKIPPED_SHARE} of the packets.
     *
     * @param wanted the sampled frame indices, ascending (duplicates and negatives are ignored)
     * @param storedFrames the container's frame count, 0 when it stores none
     */
    Plan plan(int[] wanted, int storedFrames) {
        int n = count();
        if (n == 0 || !key[0] || (storedFrames > 0 && storedFrames != n)) {
            return null;
        }
        long[] sorted = pts.clone();
        Arrays.sort(sorted);
        if (sorted[0] == NO_PTS) {
            return null;
        }
        for (int r = 1; r < n; r++) {
            if (sorted[r] == sorted[r - 1]) {
                return null;
            }
        }
        int[] packetOfIndex =
                IntStream.range(0, n)
                        .boxed()
                        .sorted(Comparator.comparingLong(i -> pts[i]))
                        .mapToInt(Integer::intValue)
                        .toArray();
        int[] gopStart = new int[n];
        for (int i = 0; i < n; i++) {
            gopStart[i] = key[i] ? i : gopStart[i - 1];
        }
        int[] frames = Arrays.stream(wanted).filter(w -> w >= 0 && w < n).distinct().toArray();
        if (frames.length == 0) {
            return null;
        }
        int[] starts = new int[frames.length];
        int decoded = 0;
        int runEnd = -1;
        int last = -1;
        for (int k = 0; k < frames.length; k++) {
            int p = packetOfIndex[frames[k]];
            int s = gopStart[p];
            if (pts[p] < pts[s]) { // shown before its keyframe: a leading frame of an open GOP
                if (s == 0) {
                    return null;
                }
                s = gopStart[s - 1];
            }
            if (k > 0 && s < starts[k - 1]) {
                return null;
            }
            starts[k] = s;
            // packets decoded: the union of [s, p] over the frames, in decode order
            int from = Math.max(s, runEnd + 1);
            if (p >= from) {
                decoded += p - from + 1;
                runEnd = p;
            }
            last = Math.max(last, p);
        }
        int skipped = (last + 1) - decoded;
        if (skipped < MIN_SKIPPED_SHARE * (last + 1)) {
            return null;
        }
        return new Plan(sorted, frames, starts, skipped);
    }
}
