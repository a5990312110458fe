package dev.stoker.connectors.source;

import org.apache.flink.api.connector.source.SourceSplit;

/**
 * One global step of the batch plan as a source split: the {@code W*B} slots of step {@link #step}
 * over all ranks, read in slot order. {@link #recordsEmitted} is the checkpointed progress: how
 * many of the step's records were already emitted (padding slots are not records).
 */
public final class StepSplit implements SourceSplit {
    final long step;
    final int recordsEmitted;

    StepSplit(long step, int recordsEmitted) {
        this.step = step;
        this.recordsEmitted = recordsEmitted;
    }

    @Override
    public String splitId() {
        return "step-" + step;
    }

    @Override
    public String toString() {
        return splitId() + " (" + recordsEmitted + " records emitted)";
    }
}
