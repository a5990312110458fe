package dev.stoker.connectors.feedback;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.operators.json.Json;
import java.io.IOException;
import java.io.InputStream;
import java.net.HttpURLConnection;
import java.net.URI;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.RejectedExecutionException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The ranks' acknowledgements asked from each GPU node's {@link AckServer}s over HTTP: for a job
 * whose ranks live on other hosts than the JobManager. Each poll asks every node once, all nodes at
 * the same time, on a thread per node; a node whose server does not answer (its edge TaskManager
 * restarting, the node lost) keeps its ranks' last known steps, so the gate stays closed for them
 * instead of opening. An answer of another generation (an older job's server) is ignored.
 *
 * <p>Node {@code n}'s sink subtask {@code k} serves on {@code port + k}; a poll asks one of them
 * and moves on to the next after a failure. The gate polls every {@code pollPeriodMs} ms ({@code
 * stoker.topology.ack-poll-interval}): one request per node each time. Timeouts: {@value
 * #CONNECT_TIMEOUT_MS} ms to connect, {@value #READ_TIMEOUT_MS} ms to read.
 */
public final class RemoteAckFeed implements AckFeed {
    private static final long serialVersionUID = 1L;
    private static final Logger LOG = LoggerFactory.getLogger(RemoteAckFeed.class);
    private static final ObjectMapper JSON = Json.mapper();
    static final int CONNECT_TIMEOUT_MS = 250;
    static final int READ_TIMEOUT_MS = 500;

    private final String generation;
    private final List<NodeAcks> nodes;
    private final int worldSize;
    private final long firstStep;
    private final long pollPeriodMs;

    private transient long[] last;
    private transient int[] nextSubtask;
    private transient boolean[] answering;
    private transient boolean[] answered;
    private transient ExecutorService executor;

    /** Set by {@link #close()}; a poll already scheduled then returns the last known steps. */
    private transient volatile boolean closed;

    /**
     * @param generation this generation's stamp; answers of another one are ignored
     * @param nodes every GPU node, together covering ranks {@code 0 .. worldSize - 1}
     * @param firstStep the first step of this generation
     * @param pollPeriodMs how often the gate polls, in ms (positive)
     * @throws IllegalArgumentException if {@code pollPeriodMs} is not positive
     */
    public RemoteAckFeed(
            String generation,
            List<NodeAcks> nodes,
            int worldSize,
            long firstStep,
            long pollPeriodMs) {
        if (pollPeriodMs < 1) {
            throw new IllegalArgumentException(
                    "the ack poll period must be at least 1 ms, got " + pollPeriodMs);
        }
        this.generation = generation;
        this.nodes = List.copyOf(nodes);
        this.worldSize = worldSize;
        this.firstStep = firstStep;
        this.pollPeriodMs = pollPeriodMs;
    }

    @Override
    public long pollPeriodMs() {
        return pollPeriodMs;
    }

    @Override
    public long[] poll() {
        if (executor == null) {
            last = new long[worldSize];
            Arrays.fill(last, firstStep - 1);
            nextSubtask = new int[nodes.size()];
            answering = new boolean[nodes.size()];
            Arrays.fill(answering, true);
            answered = new boolean[nodes.size()];
            executor =
                    Executors.newFixedThreadPool(
                            nodes.size(),
                            r -> {
                                Thread t = new Thread(r, "stoker-ack-feed");
                                t.setDaemon(true);
                                return t;
                            });
        }
        List<Future<JsonNode>> answers = new ArrayList<>();
        for (int n = 0; n < nodes.size(); n++) {
            NodeAcks node = nodes.get(n);
            int port = node.port() + nextSubtask[n];
            try {
                answers.add(executor.submit(() -> ask(node.host(), port)));
            } catch (RejectedExecutionException e) {
                if (closed) { // the enumerator closed the feed while this poll was scheduled
                    return last.clone();
                }
                throw e;
            }
        }
        for (int n = 0; n < nodes.size(); n++) {
            NodeAcks node = nodes.get(n);
            try {
                merge(node, answers.get(n).get());
                answered[n] = true;
                if (!answering[n]) {
                    LOG.info("Acks of node {} ({}) answer again", n, node.host());
                    answering[n] = true;
                }
            } catch (ExecutionException e) {
                if (answering[n] && !answered[n]) {
                    LOG.info(
                            "Acks of node {} ({}:{}): no answer yet ({}); its sinks may not be up",
                            n,
                            node.host(),
                            node.port() + nextSubtask[n],
                            e.getCause().toString());
                    answering[n] = false;
                } else if (answering[n]) {
                    LOG.warn(
                            "Acks of node {} ({}:{}) did not answer ({}); its ranks keep their last"
                                    + " known steps until it does",
                            n,
                            node.host(),
                            node.port() + nextSubtask[n],
                            e.getCause().toString());
                    answering[n] = false;
                }
                nextSubtask[n] = (nextSubtask[n] + 1) % node.ranks();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                break;
            }
        }
        return last.clone();
    }

    private void merge(NodeAcks node, JsonNode answer) throws ExecutionException {
        if (!generation.equals(answer.path(AckServer.GENERATION).asText())) {
            throw new ExecutionException(
                    new IOException(
                            "answers for generation "
                                    + answer.path(AckServer.GENERATION).asText()
                                    + ", not "
                                    + generation));
        }
        JsonNode steps = answer.path(AckServer.CONSUMED_STEPS);
        for (int rank = node.firstRank(); rank < node.firstRank() + node.ranks(); rank++) {
            JsonNode step = steps.get(String.valueOf(rank));
            if (step != null && step.canConvertToLong()) {
                last[rank] = Math.max(last[rank], step.asLong());
            }
        }
    }

    private static JsonNode ask(String host, int port) throws IOException {
        HttpURLConnection http =
                (HttpURLConnection)
                        URI.create("http://" + host + ":" + port + AckServer.PATH)
                                .toURL()
                                .openConnection();
        http.setConnectTimeout(CONNECT_TIMEOUT_MS);
        http.setReadTimeout(READ_TIMEOUT_MS);
        try {
            int status = http.getResponseCode();
            if (status != 200) {
                throw new IOException("HTTP " + status);
            }
            try (InputStream in = http.getInputStream()) {
                return JSON.readTree(in);
            }
        } catch (IOException e) {
            http.disconnect();
            throw e;
        }
    }

    @Override
    public void close() {
        closed = true;
        if (executor != null) {
            executor.shutdownNow();
        }
    }
}
