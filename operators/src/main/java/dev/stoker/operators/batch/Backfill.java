package dev.stoker.operators.batch;

import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import java.util.ArrayList;
import java.util.List;

/**
 * Fills the empty slots of a micro-batch deterministically, so every batch has {@code B} rows.
 *
 * <p>A slot is empty when its record was rejected for a deterministic reason (a dead letter) or
 * lies past the end of the epoch (padding). Empty slot {@code k} gets a copy of the first filled
 * slot after it, wrapping around ({@code k+1, k+2, ..., B-1, 0, ...}), the way a distributed
 * sampler pads by repeating samples. The batch lists the back-filled slots so a trainer can weight
 * them out. A batch with no filled slot has zero rows.
 */
public final class Backfill {
    private Backfill() {}

    /**
     * @param step global step
     * @param rank DP rank
     * @param slots the micro-batch's slots in order, {@code null} where empty
     * @return the batch with {@code slots.length} rows, or zero rows when all slots are empty
     */
    public static TrainingBatch fill(long step, int rank, TokenizedSample[] slots) {
        int b = slots.length;
        TokenizedSample[] rows = new TokenizedSample[b];
        List<Integer> backfilled = new ArrayList<>();
        for (int k = 0; k < b; k++) {
            if (slots[k] != null) {
                rows[k] = slots[k];
                continue;
            }
            for (int d = 1; d < b && rows[k] == null; d++) {
                rows[k] = slots[(k + d) % b];
            }
            if (rows[k] == null) {
                return new TrainingBatch(step, rank, b, new TokenizedSample[0], new int[0]);
            }
            backfilled.add(k);
        }
        return new TrainingBatch(
                step, rank, b, rows, backfilled.stream().mapToInt(Integer::intValue).toArray());
    }
}
