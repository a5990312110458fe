package dev.stoker.connectors.feedback;

import dev.stoker.connectors.protocol.Ack;
import dev.stoker.connectors.protocol.ShmLayout;
import java.util.Arrays;

/**
 * The ranks' acknowledgements read from this generation's {@code ack.json} files under the local
 * job directory: for a job whose ranks all live on the node of the JobManager (the embedded
 * MiniCluster, a single-node cluster), where the enumerator sees the same {@code /dev/shm} as the
 * sink.
 */
public final class LocalAckFeed implements AckFeed {
    private static final long serialVersionUID = 1L;

    /** Period of the polls, in ms: reading a node's few ack files costs microseconds. */
    static final long POLL_PERIOD_MS = 20;

    private final ShmLayout layout;
    private final int worldSize;
    private final long firstStep;
    private long[] last;

    /**
     * @param layout this generation's directory layout
     * @param worldSize global DP ranks W
     * @param firstStep the first step of this generation
     */
    public LocalAckFeed(ShmLayout layout, int worldSize, long firstStep) {
        this.layout = layout;
        this.worldSize = worldSize;
        this.firstStep = firstStep;
    }

    @Override
    public long[] poll() {
        if (last == null) {
            last = new long[worldSize];
            Arrays.fill(last, firstStep - 1);
        }
        for (int rank = 0; rank < worldSize; rank++) {
            // a rename in progress can make one read fail: keep what was read before
            last[rank] = Math.max(last[rank], Ack.consumedStep(layout, rank, firstStep));
        }
        return last.clone();
    }

    @Override
    public long pollPeriodMs() {
        return POLL_PERIOD_MS;
    }

    @Override
    public void close() {}
}
