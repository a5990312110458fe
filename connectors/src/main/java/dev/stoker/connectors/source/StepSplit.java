package dev.stoker.connectors.source;

import org.apache.flink.api.connector.source.SourceSplit;

/**
 * One global step of the batch plan as a source split: the {@code W*B} slots of step {@link #step}
 * over all ranks, read in slot order, for one shared-memory generation. {@link #elementsEmitted} is
 * the checkpointed progress: how many of the step's slots (records and padding markers) were
 * already emitted.
 */
public final class StepSplit implements SourceSplit {
    final String generation;
    final long step;
    final int elementsEmitted;

    StepSplit(String generation, long step, int elementsEmitted) {
        this.generation = generation;
        this.step = step;
        this.elementsEmitted = elementsEmitted;
    }

    @Override
    public String splitId() {
        return "step-" + step;
    }

    @Override
    public String toString() {
        return splitId() + " of generation " + generation + " (" + elementsEmitted + " emitted)";
    }
}
