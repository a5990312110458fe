package dev.stoker.operators.pack;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

/** Balance, packing and determinism of {@link StepPacking} on long-tailed random sizes. */
class StepPackingTest {
    private static final int MAX_TOKENS = 4096;

    private static TokenizedSample sample(long index, int tokens, long gridH, long gridW) {
        long[] thw = gridH == 0 ? new long[0] : new long[] {1, gridH, gridW};
        return new TokenizedSample(
                new RecordRef("file:/d.jsonl", index + 1, index, "r" + index),
                new long[tokens],
                new long[tokens],
                new byte[0],
                thw);
    }

    /** A step's samples with log-normal token counts (long tail), capped at the row size. */
    private static List<TokenizedSample> step(Random random, int count) {
        List<TokenizedSample> samples = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            int tokens = (int) Math.min(MAX_TOKENS, Math.exp(6 + 1.2 * random.nextGaussian()));
            long side = 2L * (1 + random.nextInt(16));
            samples.add(
                    sample(1000 + i, Math.max(1, tokens), random.nextBoolean() ? side : 0, side));
        }
        return samples;
    }

    private static long tokens(TrainingBatch b) {
        long n = 0;
        for (TokenizedSample s : b.samples) {
            n += s.inputIds.length;
        }
        return n;
    }

    @Test
    void everySampleLandsOnceRowsFitAndRanksDifferByAtMostTheLargestSample() {
        Random random = new Random(7);
        for (int trial = 0; trial < 200; trial++) {
            int world = 1 + random.nextInt(8);
            List<TokenizedSample> samples = step(random, world + random.nextInt(world * 8));
            TrainingBatch[] batches = StepPacking.pack(3, world, 4, MAX_TOKENS, samples);
            assertThat(batches).hasSize(world);
            List<TokenizedSample> seen = new ArrayList<>();
            long largest = 0;
            for (TokenizedSample s : samples) {
                largest = Math.max(largest, s.inputIds.length);
            }
            long min = Long.MAX_VALUE;
            long max = 0;
            for (int r = 0; r < world; r++) {
                TrainingBatch b = batches[r];
                assertThat(b.step).isEqualTo(3);
                assertThat(b.rank).isEqualTo(r);
                assertThat(b.backfilledSlots).isEmpty();
                assertThat(b.rowOf).hasSize(b.samples.length);
                int[] rowTokens = new int[b.rowOf[b.rowOf.length - 1] + 1];
                for (int k = 0; k < b.samples.length; k++) {
                    assertThat(b.rowOf[k])
                            .isBetween(
                                    k == 0 ? 0 : b.rowOf[k - 1], k == 0 ? 0 : b.rowOf[k - 1] + 1);
                    rowTokens[b.rowOf[k]] += b.samples[k].inputIds.length;
                    seen.add(b.samples[k]);
                }
                for (int t : rowTokens) {
                    assertThat(t).isPositive().isLessThanOrEqualTo(MAX_TOKENS);
                }
                min = Math.min(min, tokens(b));
                max = Math.max(max, tokens(b));
            }
            assertThat(seen).containsExactlyInAnyOrderElementsOf(samples);
            assertThat(max - min).isLessThanOrEqualTo(largest);
        }
    }

    @Test
    void thePackingDoesNotDependOnArrivalOrder() {
        Random random = new Random(11);
        List<TokenizedSample> samples = step(random, 40);
        TrainingBatch[] first = StepPacking.pack(0, 4, 10, MAX_TOKENS, samples);
        for (int shuffle = 0; shuffle < 20; shuffle++) {
            List<TokenizedSample> again = new ArrayList<>(samples);
            Collections.shuffle(again, random);
            TrainingBatch[] second = StepPacking.pack(0, 4, 10, MAX_TOKENS, again);
            for (int r = 0; r < 4; r++) {
                assertThat(second[r].samples).containsExactly(first[r].samples);
                assertThat(second[r].rowOf).containsExactly(first[r].rowOf);
            }
        }
    }

    @Test
    void ranksLeftWithoutASampleGetACopyOfTheSmallestAndAnEmptyStepGivesEmptyBatches() {
        TokenizedSample big = sample(1, 300, 0, 0);
        TokenizedSample small = sample(2, 20, 0, 0);
        TrainingBatch[] batches = StepPacking.pack(5, 4, 2, 512, List.of(small, big));
        assertThat(batches[0].samples).containsExactly(big);
        assertThat(batches[1].samples).containsExactly(small);
        for (int r = 2; r < 4; r++) {
            assertThat(batches[r].samples).containsExactly(small);
            assertThat(batches[r].backfilledSlots).containsExactly(0);
        }
        for (TrainingBatch b : StepPacking.pack(5, 3, 2, 512, List.of())) {
            assertThat(b.samples).isEmpty();
            assertThat(b.rowOf).isEmpty();
        }
    }

    @Test
    void samplesShareRowsFirstFitLargestFirst() {
        // tokens 60, 50, 40, 30 into rows of 100 on one rank: [60, 40], [50, 30]
        List<TokenizedSample> samples =
                List.of(
                        sample(1, 30, 0, 0),
                        sample(2, 60, 0, 0),
                        sample(3, 40, 0, 0),
                        sample(4, 50, 0, 0));
        TrainingBatch b = StepPacking.pack(0, 1, 4, 100, samples)[0];
        assertThat(b.samples).extracting(s -> s.inputIds.length).containsExactly(60, 40, 50, 30);
        assertThat(b.rowOf).containsExactly(0, 0, 1, 1);
    }

    @Test
    void aSampleLongerThanARowIsRefusedNamingIt() {
        assertThatThrownBy(() -> StepPacking.pack(0, 2, 1, 100, List.of(sample(9, 101, 0, 0))))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("r9")
                .hasMessageContaining("101 tokens do not fit a packed row of 100");
    }
}
