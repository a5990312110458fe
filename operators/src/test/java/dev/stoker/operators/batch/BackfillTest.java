package dev.stoker.operators.batch;

import static org.assertj.core.api.Assertions.assertThat;

import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import org.junit.jupiter.api.Test;

class BackfillTest {

    private static TokenizedSample sample(long index) {
        return new TokenizedSample(
                new RecordRef("f.jsonl", index + 1, index, null),
                new long[] {index},
                new long[] {index},
                new byte[0],
                new long[0]);
    }

    @Test
    void fullBatchIsUnchanged() {
        TokenizedSample[] slots = {sample(0), sample(1), sample(2)};
        TrainingBatch batch = Backfill.fill(4, 1, slots);
        assertThat(batch.samples).containsExactly(slots);
        assertThat(batch.backfilledSlots).isEmpty();
        assertThat(batch.step).isEqualTo(4);
        assertThat(batch.rank).isEqualTo(1);
        assertThat(batch.slots).isEqualTo(3);
    }

    @Test
    void emptySlotsCopyTheNextFilledSlotWrappingAround() {
        TokenizedSample a = sample(1);
        TokenizedSample b = sample(3);
        TrainingBatch batch = Backfill.fill(0, 0, new TokenizedSample[] {null, a, null, b, null});
        assertThat(batch.samples).containsExactly(a, a, b, b, a);
        assertThat(batch.backfilledSlots).containsExactly(0, 2, 4);
    }

    @Test
    void batchWithoutAnySampleHasNoRows() {
        TrainingBatch batch = Backfill.fill(2, 0, new TokenizedSample[] {null, null});
        assertThat(batch.samples).isEmpty();
        assertThat(batch.slots).isEqualTo(2);
    }
}
