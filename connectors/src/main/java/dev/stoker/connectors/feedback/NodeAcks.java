package dev.stoker.connectors.feedback;

import java.io.Serializable;

/**
 * Where one GPU node serves its ranks' acknowledgements: its edge sink subtask {@code k} listens on
 * {@code host:port + k} ({@link AckServer}), for the global ranks {@code firstRank .. firstRank +
 * ranks - 1}.
 *
 * @param host the node's address (a name or IP literal)
 * @param port the port of its sink subtask 0
 * @param firstRank its first global DP rank
 * @param ranks its ranks, which is also its number of sink subtasks
 */
public record NodeAcks(String host, int port, int firstRank, int ranks) implements Serializable {

    /** The global ranks of the node, in order. */
    public int[] globalRanks() {
        int[] out = new int[ranks];
        for (int k = 0; k < ranks; k++) {
            out[k] = firstRank + k;
        }
        return out;
    }
}
