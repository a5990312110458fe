package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.connectors.feedback.AckFeed;
import dev.stoker.connectors.feedback.LocalAckFeed;
import dev.stoker.connectors.feedback.RemoteAckFeed;
import dev.stoker.connectors.protocol.ShmLayout;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.IllegalConfigurationException;
import org.apache.flink.runtime.clusterframework.types.ResourceProfile;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.graph.StreamGraph;
import org.apache.flink.streaming.api.graph.StreamNode;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The {@code stoker.topology.*} options: what they refuse, and the job graph they give (built by
 * {@link StokerJob#build}, not executed): per-node sinks with their parallelism, routing and slot
 * sharing groups, as docs/multi-node.md describes.
 */
class TopologyTest {
    private static final Path LLAVA = SharedData.dataDir().resolve("llava-style");

    @TempDir Path output;

    private Configuration conf(int world) {
        return JobConfigs.config(LLAVA.toString(), output, world, 2);
    }

    /** Operator name -> "group parallelism" of the built job's stream graph. */
    private static Map<String, String> groups(StreamGraph graph) {
        Map<String, String> out = new TreeMap<>();
        for (StreamNode node : graph.getStreamNodes()) {
            out.put(
                    node.getOperatorName(),
                    node.getSlotSharingGroup() + " " + node.getParallelism());
        }
        return out;
    }

    private static StreamGraph build(Configuration conf) throws Exception {
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(3);
        StokerJob.build(env, conf);
        return env.getStreamGraph();
    }

    @Test
    void singleNodeKeepsOneSinkWithTheUidOfBefore() throws Exception {
        Map<String, String> g = groups(build(conf(4)));
        assertThat(g).containsEntry("arrow-shm-sink: Writer", "default 3");
        assertThat(g.keySet()).noneMatch(name -> name.startsWith("route-node"));
        assertThat(g.values()).allMatch(v -> v.startsWith("default "));
    }

    @Test
    void edgePlacementPinsTheCpuStagesAndEachNodesSink() throws Exception {
        Configuration conf = conf(4);
        conf.set(StokerOptions.TOPOLOGY_NODES, 2);
        conf.set(StokerOptions.TOPOLOGY_PLACEMENT, Topology.Placement.EDGE);
        conf.set(StokerOptions.TOPOLOGY_ACK_ADDRESSES, List.of("gpu0:7070", "gpu1:7070"));
        StreamGraph graph = build(conf);
        Map<String, String> g = groups(graph);
        assertThat(g)
                .containsEntry("arrow-shm-sink-node-0: Writer", "edge-0 2")
                .containsEntry("arrow-shm-sink-node-1: Writer", "edge-1 2")
                .containsEntry("route-node-0", "cpu 3")
                .containsEntry("route-node-1", "cpu 3");
        g.forEach(
                (name, group) -> {
                    if (!name.startsWith("arrow-shm-sink-node-")) {
                        assertThat(group).as(name).startsWith("cpu ");
                    }
                });
        ResourceProfile cpu = graph.getSlotSharingGroupResource("cpu").orElseThrow();
        assertThat(cpu.getExtendedResources()).containsOnlyKeys("stoker-cpu");
        assertThat(cpu.getTaskHeapMemory().getBytes()).isEqualTo(192L << 20);
        ResourceProfile edge1 = graph.getSlotSharingGroupResource("edge-1").orElseThrow();
        assertThat(edge1.getExtendedResources()).containsOnlyKeys("stoker-node-1");
        assertThat(edge1.getCpuCores().getValue().doubleValue()).isEqualTo(0.5);
    }

    @Test
    void badShapesAndAddressesAreRefusedNamingTheOption() {
        Configuration odd = conf(4);
        odd.set(StokerOptions.TOPOLOGY_NODES, 3);
        assertThatThrownBy(() -> Topology.of(odd))
                .isInstanceOf(IllegalConfigurationException.class)
                .hasMessageContaining("stoker.topology.nodes must be >= 1 and divide");
        Configuration count = conf(4);
        count.set(StokerOptions.TOPOLOGY_NODES, 2);
        count.set(StokerOptions.TOPOLOGY_ACK_ADDRESSES, List.of("gpu0:7070"));
        assertThatThrownBy(() -> Topology.of(count))
                .hasMessageContaining("one host:port per node (2)");
        Configuration port = conf(4);
        port.set(StokerOptions.TOPOLOGY_NODES, 2);
        port.set(StokerOptions.TOPOLOGY_ACK_ADDRESSES, List.of("gpu0:7070", "gpu1"));
        assertThatThrownBy(() -> Topology.of(port))
                .hasMessageContaining("node 1's address gpu1 is not host:port");
        Configuration range = conf(4);
        range.set(StokerOptions.TOPOLOGY_NODES, 2);
        range.set(StokerOptions.TOPOLOGY_ACK_ADDRESSES, List.of("gpu0:7070", "gpu1:65535"));
        assertThatThrownBy(() -> Topology.of(range)).hasMessageContaining("65535 .. 65536");
        Configuration blind = conf(4);
        blind.set(StokerOptions.TOPOLOGY_NODES, 2);
        blind.set(StokerOptions.TOPOLOGY_PLACEMENT, Topology.Placement.EDGE);
        assertThatThrownBy(() -> Topology.of(blind))
                .hasMessageContaining("stoker.topology.ack-addresses is required");
    }

    @Test
    void theGateAsksTheNodesAtTheConfiguredPeriodAndReadsLocalFilesOtherwise() {
        ShmLayout layout = new ShmLayout("/dev/shm/stoker/job", "g1");
        Configuration remote = conf(4);
        remote.set(StokerOptions.TOPOLOGY_NODES, 2);
        remote.set(StokerOptions.TOPOLOGY_ACK_ADDRESSES, List.of("gpu0:7070", "gpu1:7070"));
        try (AckFeed feed = Topology.of(remote).ackFeed(layout, 4, 0)) {
            assertThat(feed).isInstanceOf(RemoteAckFeed.class);
            assertThat(feed.pollPeriodMs()).isEqualTo(100);
        }
        remote.set(StokerOptions.TOPOLOGY_ACK_POLL_INTERVAL, Duration.ofMillis(250));
        try (AckFeed feed = Topology.of(remote).ackFeed(layout, 4, 0)) {
            assertThat(feed.pollPeriodMs()).isEqualTo(250);
        }
        try (AckFeed feed = Topology.of(conf(4)).ackFeed(layout, 4, 0)) {
            assertThat(feed).isInstanceOf(LocalAckFeed.class);
            assertThat(feed.pollPeriodMs()).isEqualTo(20);
        }
    }

    @Test
    void ranksFollowTorchrunsOrder() {
        Configuration conf = conf(8);
        conf.set(StokerOptions.TOPOLOGY_NODES, 2);
        Topology t = Topology.of(conf);
        assertThat(t.ranksPerNode).isEqualTo(4);
        assertThat(List.of(t.nodeOf(0), t.nodeOf(3), t.nodeOf(4), t.nodeOf(7)))
                .containsExactly(0, 0, 1, 1);
    }
}
