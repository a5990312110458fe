package dev.stoker.connectors.source;

import dev.stoker.connectors.protocol.Ack;
import dev.stoker.connectors.protocol.ShmLayout;
import java.io.Serializable;

/**
 * Bounded prefetch: batch {@code step} may be produced only while every rank has at most {@code
 * depth} written-but-unconsumed batches, i.e. {@code step <= min over ranks of consumed step +
 * depth}, with the consumed steps read from the readers' {@code ack.json} files of this generation.
 *
 * <p>The source checks the gate before it emits a step's records, so the job backs off through
 * Flink backpressure of an idle source instead of a blocked sink, and checkpoints keep completing
 * while the trainer is the bottleneck. The gate reads files of the node-local job directory, so the
 * source must run on the node of the ranks it feeds.
 */
public final class PrefetchGate implements Serializable {
    private static final long serialVersionUID = 1L;

    private final ShmLayout layout;
    private final int worldSize;
    private final int depth;
    private final long firstStep;

    /**
     * @param depth batches each rank may have written ahead of its reader; {@code 0} or less means
     *     unbounded (no trainer feedback is awaited)
     * @param firstStep the first step of this generation
     */
    public PrefetchGate(ShmLayout layout, int worldSize, int depth, long firstStep) {
        this.layout = layout;
        this.worldSize = worldSize;
        this.depth = depth;
        this.firstStep = firstStep;
    }

    public ShmLayout layout() {
        return layout;
    }

    public long firstStep() {
        return firstStep;
    }

    public boolean isBounded() {
        return depth > 0;
    }

    /** Whether batches of {@code step} may be produced now. */
    public boolean allows(long step) {
        if (!isBounded()) {
            return true;
        }
        long minConsumed = Long.MAX_VALUE;
        for (int rank = 0; rank < worldSize; rank++) {
            minConsumed = Math.min(minConsumed, Ack.consumedStep(layout, rank, firstStep));
        }
        return step <= minConsumed + depth;
    }
}
