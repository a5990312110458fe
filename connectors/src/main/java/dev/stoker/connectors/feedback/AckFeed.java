package dev.stoker.connectors.feedback;

import java.io.Serializable;

/**
 * Where the prefetch gate learns how far each rank's trainer has got: the last step each global DP
 * rank acknowledged in this generation ({@code consumed_step} of its {@code ack.json}). Created on
 * the client, shipped with the job, polled by the source's split enumerator on the JobManager.
 *
 * <p>Implementations: {@link LocalAckFeed} reads the ack files of the node the JobManager runs on
 * (one node); {@link RemoteAckFeed} asks each GPU node's edge sinks ({@link AckServer}) over HTTP.
 */
public interface AckFeed extends Serializable, AutoCloseable {

    /**
     * The acknowledged steps now, polled on one thread at a time.
     *
     * @return one value per global DP rank (index = rank): its last acknowledged step, or {@code
     *     firstStep - 1} where none is known. Never lower than an earlier poll's value for the same
     *     rank (acknowledgements only grow within a generation; a node that does not answer keeps
     *     its last known values).
     */
    long[] poll();

    /** How often the gate polls this feed, in ms: its share of the gate's latency. */
    long pollPeriodMs();

    /** Frees what {@link #poll} opened (an HTTP client); idempotent. */
    @Override
    void close();
}
