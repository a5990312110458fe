package dev.stoker.connectors.feedback;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import dev.stoker.connectors.protocol.Ack;
import dev.stoker.connectors.protocol.ShmLayout;
import dev.stoker.operators.json.Json;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/**
 * Serves the acknowledgements of one GPU node's ranks over HTTP, so the source's split enumerator
 * on another host can gate prefetch ({@link RemoteAckFeed}). Runs in each edge sink subtask of the
 * node, which reads its node's {@code ack.json} files on every request.
 *
 * <p>{@code GET /v1/acks} answers {@code 200} with {@code {"generation": "<stamp>",
 * "consumed_steps": {"<global rank>": <last acknowledged step>, ...}}} for the node's ranks, a rank
 * without an ack giving {@code first_step - 1}; any other method answers {@code 405}. One daemon
 * thread serves the requests; {@link #close} stops it.
 */
public final class AckServer implements AutoCloseable {
    static final String PATH = "/v1/acks";
    static final String GENERATION = "generation";
    static final String CONSUMED_STEPS = "consumed_steps";

    private static final ObjectMapper JSON = Json.mapper();

    private final HttpServer server;
    private final ExecutorService executor;
    private final ShmLayout layout;
    private final int[] ranks;
    private final long firstStep;

    private AckServer(
            HttpServer server,
            ExecutorService executor,
            ShmLayout layout,
            int[] ranks,
            long firstStep) {
        this.server = server;
        this.executor = executor;
        this.layout = layout;
        this.ranks = ranks.clone();
        this.firstStep = firstStep;
    }

    /**
     * Listens on {@code host:port} and serves the acks of {@code ranks}.
     *
     * @param host an address of this host (the node's address in {@code
     *     stoker.topology.ack-addresses}); a host of another machine cannot be bound
     * @param ranks the global DP ranks of this node
     * @throws IOException naming the address if it cannot be resolved or bound (in use, or not an
     *     address of this host: the subtask runs on the wrong node)
     */
    public static AckServer start(
            String host, int port, ShmLayout layout, int[] ranks, long firstStep)
            throws IOException {
        InetSocketAddress address = new InetSocketAddress(host, port);
        if (address.isUnresolved()) {
            throw new IOException("Cannot resolve the ack address " + host + ":" + port);
        }
        HttpServer server;
        try {
            server = HttpServer.create(address, 0);
        } catch (IOException e) {
            throw new IOException(
                    "Cannot serve acks on "
                            + host
                            + ":"
                            + port
                            + " ("
                            + e
                            + "): the port is in use, or the address is not one of this host's"
                            + " (the sink runs on another node than stoker.topology.ack-addresses"
                            + " names)",
                    e);
        }
        ExecutorService executor =
                Executors.newSingleThreadExecutor(
                        r -> {
                            Thread t = new Thread(r, "stoker-ack-server-" + port);
                            t.setDaemon(true);
                            return t;
                        });
        AckServer acks = new AckServer(server, executor, layout, ranks, firstStep);
        server.setExecutor(executor);
        server.createContext(PATH, acks::handle);
        server.start();
        return acks;
    }

    /** The port it listens on. */
    public int port() {
        return server.getAddress().getPort();
    }

    private void handle(HttpExchange exchange) throws IOException {
        try (exchange) {
            if (!"GET".equals(exchange.getRequestMethod())) {
                exchange.sendResponseHeaders(405, -1);
                return;
            }
            ObjectNode body = JSON.createObjectNode();
            body.put(GENERATION, layout.generation());
            ObjectNode steps = body.putObject(CONSUMED_STEPS);
            for (int rank : ranks) {
                steps.put(String.valueOf(rank), Ack.consumedStep(layout, rank, firstStep));
            }
            byte[] bytes = JSON.writeValueAsBytes(body);
            exchange.getResponseHeaders().set("Content-Type", "application/json");
            exchange.sendResponseHeaders(200, bytes.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(bytes);
            }
        }
    }

    @Override
    public void close() {
        server.stop(0);
        executor.shutdownNow();
    }
}
