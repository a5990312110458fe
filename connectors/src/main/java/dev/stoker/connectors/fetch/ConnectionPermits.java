package dev.stoker.connectors.fetch;

import java.util.ArrayDeque;
import java.util.concurrent.CompletableFuture;

/**
 * The HTTP connections of one S3 client as permits: a GET takes one before it is handed to the
 * client and gives it back when it settles, so the client never queues a request for a pooled
 * connection while the request's attempt and total timeouts run, and the time a GET spends waiting
 * for a connection is known (and named) separately. Waiting GETs are served first come, first
 * served, without blocking a thread.
 */
final class ConnectionPermits {
    private final int permits;
    private final ArrayDeque<CompletableFuture<Void>> waiting = new ArrayDeque<>();
    private int inUse;

    /**
     * @param permits the client's HTTP connections; at least 1
     * @throws IllegalArgumentException if {@code permits < 1}
     */
    ConnectionPermits(int permits) {
        if (permits < 1) {
            throw new IllegalArgumentException("HTTP connections must be >= 1: " + permits);
        }
        this.permits = permits;
    }

    /** A future completing once this caller holds a permit; give it back with {@link #release}. */
    synchronized CompletableFuture<Void> acquire() {
        if (inUse < permits) {
            inUse++;
            return CompletableFuture.completedFuture(null);
        }
        CompletableFuture<Void> turn = new CompletableFuture<>();
        waiting.add(turn);
        return turn;
    }

    /** Takes a permit if one is free and no GET waits for one; for optional requests (hedges). */
    synchronized boolean tryAcquire() {
        if (inUse < permits && waiting.isEmpty()) {
            inUse++;
            return true;
        }
        return false;
    }

    /**
     * Gives a permit back, handing it to the longest-waiting GET if there is one. That GET goes on
     * on the common pool, not on the releasing thread (typically an HTTP client I/O thread).
     */
    void release() {
        CompletableFuture<Void> next;
        synchronized (this) {
            next = waiting.poll();
            if (next == null) {
                inUse--;
            }
        }
        if (next != null) {
            next.completeAsync(() -> null);
        }
    }

    /** GETs waiting for a connection now. */
    synchronized int waiting() {
        return waiting.size();
    }

    /** The number of connections. */
    int permits() {
        return permits;
    }
}
