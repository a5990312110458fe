package dev.stoker.connectors.source;

import dev.stoker.connectors.feedback.AckFeed;
import java.io.IOException;
import java.io.Serializable;
import org.apache.flink.util.InstantiationUtil;

/**
 * Bounded prefetch: batch {@code step} may be produced only while every rank has at most {@code
 * depth} written-but-unconsumed batches, i.e. {@code step <= min over ranks of consumed step +
 * depth}, with the consumed steps polled from an {@link AckFeed} of this generation.
 *
 * <p>The source's split enumerator (on the JobManager) polls the feed every {@link
 * AckFeed#pollPeriodMs} ms and hands out a step's split only within the bound, so the readers idle
 * instead of a blocked sink, and checkpoints keep completing while the trainer is the bottleneck.
 * Where the feed reads from (the JobManager's own {@code /dev/shm}, or the GPU nodes over HTTP)
 * decides where the source and the sinks may run.
 */
public final class PrefetchGate implements Serializable {
    private static final long serialVersionUID = 2L;

    private final AckFeed feed;
    private final String generation;
    private final int depth;
    private final long firstStep;

    /**
     * @param feed where the ranks' acknowledgements are read
     * @param generation this generation's stamp
     * @param depth batches each rank may have written ahead of its reader; {@code 0} or less means
     *     unbounded (no trainer feedback is awaited, the feed is never polled)
     * @param firstStep the first step of this generation
     */
    public PrefetchGate(AckFeed feed, String generation, int depth, long firstStep) {
        this.feed = feed;
        this.generation = generation;
        this.depth = depth;
        this.firstStep = firstStep;
    }

    /**
     * A fresh feed for one enumerator: a copy of the configured one, so an enumerator created after
     * a failover never shares a feed (its threads, its last values) with the closed one.
     *
     * @throws IllegalStateException if the feed cannot be copied (it is serializable by contract)
     */
    AckFeed openFeed() {
        try {
            return InstantiationUtil.clone(feed, feed.getClass().getClassLoader());
        } catch (IOException | ClassNotFoundException e) {
            throw new IllegalStateException("Cannot copy the ack feed " + feed, e);
        }
    }

    public String generation() {
        return generation;
    }

    public long firstStep() {
        return firstStep;
    }

    public boolean isBounded() {
        return depth > 0;
    }

    /**
     * The highest step that may be produced while the ranks have acknowledged {@code consumed}.
     *
     * @param consumed per global rank, its last acknowledged step ({@link AckFeed#poll})
     * @return {@code min(consumed) + depth}, or {@link Long#MAX_VALUE} when unbounded
     */
    public long highestAllowedStep(long[] consumed) {
        if (!isBounded()) {
            return Long.MAX_VALUE;
        }
        long min = Long.MAX_VALUE;
        for (long step : consumed) {
            min = Math.min(min, step);
        }
        return min + depth;
    }

    /** The highest step allowed before any acknowledgement: {@code firstStep - 1 + depth}. */
    long initialAllowedStep() {
        return isBounded() ? firstStep - 1 + depth : Long.MAX_VALUE;
    }
}
