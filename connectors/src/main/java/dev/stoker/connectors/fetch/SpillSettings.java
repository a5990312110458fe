package dev.stoker.connectors.fetch;

import java.io.Serializable;

/**
 * Which videos the fetch stage writes to local spill files instead of holding them in memory, and
 * where ({@code stoker.video.spill-threshold}, {@code stoker.video.spill-dir}).
 *
 * @param thresholdBytes a video larger than this many bytes is spilled; at least 0
 * @param directory the local directory under which each fetch subtask makes its spill directory (an
 *     absolute path), or null for the TaskManager JVM's {@code java.io.tmpdir}
 */
public record SpillSettings(long thresholdBytes, String directory) implements Serializable {
    private static final long serialVersionUID = 1L;

    /**
     * @throws IllegalArgumentException if {@code thresholdBytes} is negative
     */
    public SpillSettings {
        if (thresholdBytes < 0) {
            throw new IllegalArgumentException("negative spill threshold: " + thresholdBytes);
        }
    }
}
