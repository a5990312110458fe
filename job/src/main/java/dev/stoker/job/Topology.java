package dev.stoker.job;

import dev.stoker.connectors.feedback.AckFeed;
import dev.stoker.connectors.feedback.LocalAckFeed;
import dev.stoker.connectors.feedback.NodeAcks;
import dev.stoker.connectors.feedback.RemoteAckFeed;
import dev.stoker.connectors.protocol.ShmLayout;
import java.net.URL;
import java.util.ArrayList;
import java.util.List;
import org.apache.flink.api.common.operators.SlotSharingGroup;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.IllegalConfigurationException;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.util.NetUtils;

/**
 * The shape of the training job and where the job's subtasks run, from the {@code
 * stoker.topology.*} options: N GPU nodes of R ranks each (W = N x R; global rank = node x R +
 * local rank), one sink per node, and the slot sharing groups that pin the CPU stages and each
 * node's sink (docs/multi-node.md).
 */
final class Topology {
    /** Where the subtasks may run ({@link StokerOptions#TOPOLOGY_PLACEMENT}). */
    enum Placement {
        /** Any slot: no resource requests (the embedded MiniCluster, a single-node cluster). */
        ANY,
        /**
         * CPU stages on TaskManagers declaring {@value #CPU_RESOURCE}, node n's sink on node n's.
         */
        EDGE
    }

    /** External resource only CPU TaskManagers declare. */
    static final String CPU_RESOURCE = "stoker-cpu";

    /** The single-node sink's uid and name (also the prefix of its REST metric ids). */
    static final String SINGLE_SINK = "arrow-shm-sink";

    final int nodes;
    final int ranksPerNode;
    final Placement placement;
    private final List<NodeAcks> ackAddresses;
    private final Configuration conf;

    private Topology(
            int nodes,
            int ranksPerNode,
            Placement placement,
            List<NodeAcks> ackAddresses,
            Configuration conf) {
        this.nodes = nodes;
        this.ranksPerNode = ranksPerNode;
        this.placement = placement;
        this.ackAddresses = ackAddresses;
        this.conf = conf;
    }

    /**
     * The topology of {@code conf}.
     *
     * @throws IllegalConfigurationException naming the option: nodes not positive or not dividing
     *     {@code stoker.dp-world-size}, an ack address that is not {@code host:port} or whose ports
     *     {@code port .. port + R - 1} leave the port range, a number of ack addresses other than
     *     the nodes, or several EDGE-placed nodes without ack addresses
     */
    static Topology of(Configuration conf) {
        int nodes = conf.get(StokerOptions.TOPOLOGY_NODES);
        int world = conf.get(StokerOptions.DP_WORLD_SIZE);
        if (nodes < 1 || world % nodes != 0) {
            throw new IllegalConfigurationException(
                    StokerOptions.TOPOLOGY_NODES.key()
                            + " must be >= 1 and divide "
                            + StokerOptions.DP_WORLD_SIZE.key()
                            + " ("
                            + world
                            + "), got "
                            + nodes);
        }
        int ranks = world / nodes;
        Placement placement = conf.get(StokerOptions.TOPOLOGY_PLACEMENT);
        List<String> addresses = conf.get(StokerOptions.TOPOLOGY_ACK_ADDRESSES);
        String key = StokerOptions.TOPOLOGY_ACK_ADDRESSES.key();
        if (!addresses.isEmpty() && addresses.size() != nodes) {
            throw new IllegalConfigurationException(
                    key + " needs one host:port per node (" + nodes + "), got " + addresses);
        }
        if (addresses.isEmpty() && nodes > 1 && placement == Placement.EDGE) {
            throw new IllegalConfigurationException(
                    key
                            + " is required with "
                            + nodes
                            + " nodes and placement EDGE: the source's gate on the JobManager cannot"
                            + " read the acks of other hosts' /dev/shm");
        }
        List<NodeAcks> acks = new ArrayList<>();
        for (int n = 0; n < addresses.size(); n++) {
            URL url;
            try {
                url = NetUtils.getCorrectHostnamePort(addresses.get(n).trim());
            } catch (IllegalArgumentException e) {
                throw new IllegalConfigurationException(
                        key
                                + ": node "
                                + n
                                + "'s address "
                                + addresses.get(n)
                                + " is not host:port",
                        e);
            }
            if (url.getPort() < 1 || url.getPort() + ranks - 1 > 65535) {
                throw new IllegalConfigurationException(
                        key
                                + ": node "
                                + n
                                + " needs ports "
                                + url.getPort()
                                + " .. "
                                + (url.getPort() + ranks - 1)
                                + " (one per rank), outside 1 .. 65535");
            }
            acks.add(new NodeAcks(url.getHost(), url.getPort(), n * ranks, ranks));
        }
        return new Topology(nodes, ranks, placement, List.copyOf(acks), conf);
    }

    /** Whether each node gets its own sink ({@link #sinkName}); else one sink for all ranks. */
    boolean perNodeSinks() {
        return nodes > 1 || placement == Placement.EDGE;
    }

    /** Name and uid of node {@code node}'s sink. */
    String sinkName(int node) {
        return perNodeSinks() ? SINGLE_SINK + "-node-" + node : SINGLE_SINK;
    }

    /** The node whose sink writes global rank {@code rank}. */
    int nodeOf(int rank) {
        return nodeOf(rank, ranksPerNode);
    }

    /**
     * The node of global rank {@code rank} with {@code ranksPerNode} ranks per node: ranks {@code n
     * x R .. n x R + R - 1} are node n's (torchrun's numbering).
     */
    static int nodeOf(int rank, int ranksPerNode) {
        return rank / ranksPerNode;
    }

    /** External resource only node {@code node}'s edge TaskManager declares. */
    static String nodeResource(int node) {
        return "stoker-node-" + node;
    }

    /**
     * Where the prefetch gate reads the ranks' acks: the nodes' ack servers, or the local files.
     */
    AckFeed ackFeed(ShmLayout layout, int worldSize, long firstStep) {
        return ackAddresses.isEmpty()
                ? new LocalAckFeed(layout, worldSize, firstStep)
                : new RemoteAckFeed(
                        layout.generation(),
                        ackAddresses,
                        worldSize,
                        firstStep,
                        conf.get(StokerOptions.TOPOLOGY_ACK_POLL_INTERVAL).toMillis());
    }

    /** Where node {@code node}'s sink serves its acks, or {@code null} when it serves none. */
    NodeAcks nodeAcks(int node) {
        return ackAddresses.isEmpty() ? null : ackAddresses.get(node);
    }

    /** The CPU stages' slot sharing group, or {@code null} with placement ANY. */
    SlotSharingGroup cpuGroup() {
        return placement == Placement.ANY
                ? null
                : group(
                        "cpu",
                        CPU_RESOURCE,
                        conf.get(StokerOptions.CPU_SLOT_CPU_CORES),
                        conf.get(StokerOptions.CPU_SLOT_TASK_HEAP),
                        conf.get(StokerOptions.CPU_SLOT_TASK_OFF_HEAP),
                        conf.get(StokerOptions.CPU_SLOT_MANAGED));
    }

    /** Node {@code node}'s sink's slot sharing group, or {@code null} with placement ANY. */
    SlotSharingGroup edgeGroup(int node) {
        return placement == Placement.ANY
                ? null
                : group(
                        "edge-" + node,
                        nodeResource(node),
                        conf.get(StokerOptions.EDGE_SLOT_CPU_CORES),
                        conf.get(StokerOptions.EDGE_SLOT_TASK_HEAP),
                        conf.get(StokerOptions.EDGE_SLOT_TASK_OFF_HEAP),
                        conf.get(StokerOptions.EDGE_SLOT_MANAGED));
    }

    /** A group that states CPU and every kind of memory (none "unknown") and one resource. */
    private static SlotSharingGroup group(
            String name,
            String resource,
            double cpuCores,
            MemorySize heap,
            MemorySize offHeap,
            MemorySize managed) {
        return SlotSharingGroup.newBuilder(name)
                .setCpuCores(cpuCores)
                .setTaskHeapMemory(heap)
                .setTaskOffHeapMemory(offHeap)
                .setManagedMemory(managed)
                .setExternalResource(resource, 1.0)
                .build();
    }
}
