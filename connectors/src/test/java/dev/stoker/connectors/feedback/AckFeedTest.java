package dev.stoker.connectors.feedback;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.connectors.protocol.ShmLayout;
import dev.stoker.testkit.ExpectedFaultFilter;
import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.io.TempDir;

/**
 * The gate's two feeds on real files and real HTTP on loopback: node 0's ranks 0-1 and node 1's
 * ranks 2-3, each node with its own job directory (its own /dev/shm).
 */
class AckFeedTest {
    /** Node outages the tests cause: RemoteAckFeed warns once per node that stops answering. */
    @RegisterExtension
    @Order(0) // registered before, and removed after, the clusters and servers that log them
    static final ExpectedFaultFilter.Expected NODE_OUTAGES =
            ExpectedFaultFilter.Expected.ackServersNotAnswering();

    @TempDir Path node0;
    @TempDir Path node1;

    private static ShmLayout layout(Path jobDir, String generation) {
        return new ShmLayout(jobDir.toString(), generation);
    }

    private static void ack(ShmLayout layout, int rank, long step) throws IOException {
        Files.createDirectories(layout.rankDir(rank));
        Files.writeString(
                layout.ackFile(rank),
                "{\"consumed_step\": " + step + ", \"data_wait_s\": 0.5}",
                StandardCharsets.UTF_8);
    }

    private static int freePorts(int count) throws IOException {
        // a base port with `count` free ports after it (probed, then released)
        for (int attempt = 0; attempt < 50; attempt++) {
            int base;
            try (ServerSocket s = new ServerSocket(0)) {
                base = s.getLocalPort();
            }
            if (base + count > 65535) {
                continue;
            }
            boolean free = true;
            for (int k = 1; k < count && free; k++) {
                try (ServerSocket s = new ServerSocket(base + k)) {
                    free = true;
                } catch (IOException e) {
                    free = false;
                }
            }
            if (free) {
                return base;
            }
        }
        throw new IOException("no run of " + count + " free ports");
    }

    @Test
    void localFeedReadsEveryRanksAckAndNeverGoesBack() throws IOException {
        ShmLayout layout = layout(node0, "g1");
        try (LocalAckFeed feed = new LocalAckFeed(layout, 3, 5)) {
            assertThat(feed.poll()).containsExactly(4, 4, 4);
            ack(layout, 0, 7);
            ack(layout, 2, 6);
            assertThat(feed.poll()).containsExactly(7, 4, 6);
            Files.writeString(layout.ackFile(0), "{not json");
            assertThat(feed.poll())
                    .as("an unreadable ack keeps the last value")
                    .containsExactly(7, 4, 6);
        }
    }

    @Test
    void remoteFeedAsksEachNodesServerAndKeepsALostNodesLastSteps() throws IOException {
        ShmLayout gen = layout(node0, "g1");
        ShmLayout gen1 = layout(node1, "g1");
        int port0 = freePorts(2);
        int port1 = freePorts(2);
        List<NodeAcks> nodes =
                List.of(
                        new NodeAcks("127.0.0.1", port0, 0, 2),
                        new NodeAcks("127.0.0.1", port1, 2, 2));
        ack(gen, 0, 3);
        ack(gen, 1, 2);
        // node 1's acks live in its own directory; rank 0's entry there must be ignored
        ack(gen1, 0, 99);
        ack(gen1, 3, 8);
        assertThatThrownBy(() -> new RemoteAckFeed("g1", nodes, 4, 0, 0))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("at least 1 ms");
        try (RemoteAckFeed feed = new RemoteAckFeed("g1", nodes, 4, 0, 100)) {
            assertThat(feed.pollPeriodMs()).isEqualTo(100);
            assertThat(feed.poll()).as("no server up").containsExactly(-1, -1, -1, -1);
            try (AckServer s0 = AckServer.start("127.0.0.1", port0, gen, new int[] {0, 1}, 0);
                    AckServer s1 =
                            AckServer.start("127.0.0.1", port1 + 1, gen1, new int[] {2, 3, 0}, 0)) {
                // the failed first poll moved both nodes on to subtask 1: node 1's answers (and
                // only for its own ranks: not the 99 of rank 0 its server also reports), node 0's
                // subtask 1 is down, so the next poll asks its subtask 0
                assertThat(feed.poll()).containsExactly(-1, -1, -1, 8);
                assertThat(feed.poll()).containsExactly(3, 2, -1, 8);
            }
            ack(gen, 0, 10);
            assertThat(feed.poll())
                    .as("servers gone: last known steps")
                    .containsExactly(3, 2, -1, 8);
            // a server of another generation is not believed
            try (AckServer other =
                    AckServer.start("127.0.0.1", port0, layout(node0, "g0"), new int[] {0, 1}, 0)) {
                ack(layout(node0, "g0"), 0, 50);
                assertThat(feed.poll()[0]).isEqualTo(3);
            }
            // the enumerator closes the feed while a poll is still scheduled: that poll returns
            // the last known steps instead of failing on the shut-down pool (which was logged as
            // a warning at every job end of a multi-node run)
            feed.close();
            assertThat(feed.poll()).containsExactly(3, 2, -1, 8);
        }
    }

    @Test
    void aServerOnAnAddressOfAnotherHostFailsNamingIt() {
        // 192.0.2.1 (TEST-NET-1) is never an address of this host
        assertThatThrownBy(
                        () ->
                                AckServer.start(
                                        "192.0.2.1", 7070, layout(node0, "g1"), new int[] {0}, 0))
                .isInstanceOf(IOException.class)
                .hasMessageContaining("192.0.2.1:7070")
                .hasMessageContaining("stoker.topology.ack-addresses");
    }
}
