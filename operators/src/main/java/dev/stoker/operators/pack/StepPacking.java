package dev.stoker.operators.pack;

import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

/**
 * How one step's samples are spread over the DP ranks and packed into rows: a pure function of the
 * samples' sizes and slot indices, whatever order they arrived in.
 *
 * <ol>
 *   <li><b>Balance.</b> The step's samples (its {@code W*B} slots less the dead-lettered and
 *       padding ones) are taken largest first (tokens, then image patches, descending; then slot
 *       index ascending) and each goes to the rank with the fewest tokens so far (ties: fewest
 *       patches, then lowest rank). That is greedy list scheduling, so every two ranks' token
 *       counts differ by at most the largest sample's tokens; image patches (the vision encoder's
 *       work) follow the tokens they bring and are not bounded separately.
 *   <li><b>Fill.</b> A rank the balance leaves empty (the step has fewer than {@code W} samples)
 *       gets a copy of the step's last sample in that order (the smallest), listed as back-filled;
 *       a step with no sample gives every rank an empty batch.
 *   <li><b>Pack.</b> Each rank's samples, in that order, go first-fit into rows of at most {@code
 *       maxTokens} tokens (first-fit decreasing); a sample is never split. Rows keep their samples
 *       in placement order.
 * </ol>
 *
 * <p>Token counts include each image's {@code <|image_pad|>} tokens.
 */
public final class StepPacking {
    private StepPacking() {}

    /** A sample's size: tokens (input_ids length) and image patches (sum of t*h*w). */
    private record Sized(TokenizedSample sample, int tokens, long patches) {}

    private static final Comparator<Sized> LARGEST_FIRST =
            Comparator.comparingInt(Sized::tokens)
                    .reversed()
                    .thenComparing(Comparator.comparingLong(Sized::patches).reversed())
                    .thenComparingLong(s -> s.sample().ref.sampleIndex);

    /**
     * @param step the global step
     * @param worldSize DP ranks W
     * @param microBatchSize B, the plan's slots per rank ({@link TrainingBatch#slots})
     * @param maxTokens most tokens per packed row
     * @param samples the step's samples, any order, none null
     * @return the W packed batches, index = rank, each with {@link TrainingBatch#rowOf} set
     * @throws IllegalArgumentException if a sample has more than {@code maxTokens} tokens (the
     *     job's stoker.max-seq-len must not exceed the row size)
     */
    public static TrainingBatch[] pack(
            long step,
            int worldSize,
            int microBatchSize,
            int maxTokens,
            List<TokenizedSample> samples) {
        List<Sized> order = new ArrayList<>(samples.size());
        for (TokenizedSample s : samples) {
            if (s.inputIds.length > maxTokens) {
                throw new IllegalArgumentException(
                        s.ref
                                + ": "
                                + s.inputIds.length
                                + " tokens do not fit a packed row of "
                                + maxTokens
                                + " (stoker.packing.max-tokens)");
            }
            order.add(new Sized(s, s.inputIds.length, patches(s)));
        }
        order.sort(LARGEST_FIRST);

        List<List<Sized>> perRank = new ArrayList<>(worldSize);
        long[] tokens = new long[worldSize];
        long[] patchLoad = new long[worldSize];
        for (int r = 0; r < worldSize; r++) {
            perRank.add(new ArrayList<>());
        }
        for (Sized s : order) {
            int best = 0;
            for (int r = 1; r < worldSize; r++) {
                if (tokens[r] < tokens[best]
                        || (tokens[r] == tokens[best] && patchLoad[r] < patchLoad[best])) {
                    best = r;
                }
            }
            perRank.get(best).add(s);
            tokens[best] += s.tokens();
            patchLoad[best] += s.patches();
        }

        TrainingBatch[] batches = new TrainingBatch[worldSize];
        for (int r = 0; r < worldSize; r++) {
            List<Sized> mine = perRank.get(r);
            int[] backfilled = new int[0];
            if (mine.isEmpty() && !order.isEmpty()) {
                mine = List.of(order.get(order.size() - 1));
                backfilled = new int[] {0};
            }
            batches[r] = rows(step, r, microBatchSize, maxTokens, mine, backfilled);
        }
        return batches;
    }

    /** First-fit of {@code mine} (largest first) into rows of at most {@code maxTokens}. */
    private static TrainingBatch rows(
            long step,
            int rank,
            int microBatchSize,
            int maxTokens,
            List<Sized> mine,
            int[] backfilled) {
        List<List<Sized>> rows = new ArrayList<>();
        List<Integer> used = new ArrayList<>();
        for (Sized s : mine) {
            int row = 0;
            while (row < rows.size() && used.get(row) + s.tokens() > maxTokens) {
                row++;
            }
            if (row == rows.size()) {
                rows.add(new ArrayList<>());
                used.add(0);
            }
            rows.get(row).add(s);
            used.set(row, used.get(row) + s.tokens());
        }
        TokenizedSample[] samples = new TokenizedSample[mine.size()];
        int[] rowOf = new int[mine.size()];
        int k = 0;
        for (int row = 0; row < rows.size(); row++) {
            for (Sized s : rows.get(row)) {
                samples[k] = s.sample();
                rowOf[k++] = row;
            }
        }
        TrainingBatch batch = new TrainingBatch(step, rank, microBatchSize, samples, backfilled);
        batch.rowOf = rowOf;
        return batch;
    }

    /**
     * Vision patches of {@code s}: the sum of {@code t*h*w} over its image and video grids (the
     * vision tower's work).
     */
    public static long patches(TokenizedSample s) {
        return gridPatches(s.imageGridThw) + gridPatches(s.videoGridThw);
    }

    private static long gridPatches(long[] thw) {
        long p = 0;
        for (int i = 0; i + 2 < thw.length; i += 3) {
            p += thw[i] * thw[i + 1] * thw[i + 2];
        }
        return p;
    }
}
