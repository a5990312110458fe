package dev.stoker.job;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.FilterFunction;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.operators.SlotSharingGroup;
import org.apache.flink.api.connector.source.lib.NumberSequenceSource;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;

/**
 * The multi-node topology reduced to its placement (issue 21, point 2), submitted to a standalone
 * cluster by {@link PlacementITCase}: a CPU stage (source, a throttled map and one router per node,
 * chained) in slot sharing group {@code cpu}, which requests {@code stoker-cpu: 1} per slot, and
 * per node {@code n} a sink of {@code ranks} subtasks in group {@code edge-n}, which requests
 * {@code stoker-node-n: 1} per slot. Records go to node {@code value % nodes}, keyed by local rank
 * {@code value / nodes % ranks} (routing by logical stream, never by host; {@code keyBy} as the
 * job's sink is keyed today, since {@code partitionCustom} is refused with unaligned checkpoints,
 * which flink-conf/config.yaml enables). Every group states CPU and all memory kinds, so none is
 * "hybrid" (partly unspecified); the edge groups have managed memory for the keyed sink's RocksDB
 * backend.
 *
 * <p>Arguments: {@code NODES RANKS_PER_NODE CPU_PARALLELISM}. Runs until cancelled, emitting about
 * 200 records/s per CPU subtask.
 */
public final class PlacementSpikeJob {
    /** Name of the external resource only CPU TaskManagers declare. */
    static final String CPU_RESOURCE = "stoker-cpu";

    private PlacementSpikeJob() {}

    /** Name of the external resource only the edge TaskManager of node {@code node} declares. */
    static String nodeResource(int node) {
        return "stoker-node-" + node;
    }

    /** Operator (and job vertex) name of node {@code node}'s sink. */
    static String sinkName(int node) {
        return "sink-node-" + node;
    }

    private static SlotSharingGroup group(String name, String resource, int managedMemoryMb) {
        return SlotSharingGroup.newBuilder(name)
                .setCpuCores(0.25)
                .setTaskHeapMemoryMB(32)
                .setTaskOffHeapMemoryMB(0)
                .setManagedMemoryMB(managedMemoryMb)
                .setExternalResource(resource, 1.0)
                .build();
    }

    public static void main(String[] args) throws Exception {
        int nodes = Integer.parseInt(args[0]);
        int ranks = Integer.parseInt(args[1]);
        int cpuParallelism = Integer.parseInt(args[2]);
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        SlotSharingGroup cpu = group("cpu", CPU_RESOURCE, 0);
        DataStream<Long> records =
                env.fromSource(
                                new NumberSequenceSource(0, Long.MAX_VALUE),
                                WatermarkStrategy.noWatermarks(),
                                "numbers")
                        .setParallelism(cpuParallelism)
                        .slotSharingGroup(cpu)
                        .map(new Throttle())
                        .name("cpu-stage")
                        .setParallelism(cpuParallelism)
                        .slotSharingGroup(cpu);
        for (int n = 0; n < nodes; n++) {
            records.filter(new ForNode(n, nodes))
                    .name("route-node-" + n)
                    .setParallelism(cpuParallelism)
                    .slotSharingGroup(cpu)
                    .keyBy(new LocalRank(nodes, ranks))
                    .sinkTo(new DiscardingSink<>())
                    .name(sinkName(n))
                    .uid(sinkName(n))
                    .setParallelism(ranks)
                    .slotSharingGroup(group("edge-" + n, nodeResource(n), 32));
        }
        env.execute("placement-spike");
    }

    /** Passes records on at about 200/s (the cluster's two cores are shared). */
    private static final class Throttle implements MapFunction<Long, Long> {
        @Override
        public Long map(Long value) throws InterruptedException {
            Thread.sleep(5);
            return value;
        }
    }

    /** Keeps the records of one node. */
    private static final class ForNode implements FilterFunction<Long> {
        private final int node;
        private final int nodes;

        ForNode(int node, int nodes) {
            this.node = node;
            this.nodes = nodes;
        }

        @Override
        public boolean filter(Long value) {
            return value % nodes == node;
        }
    }

    /** The local rank a record goes to on its node. */
    private static final class LocalRank implements KeySelector<Long, Integer> {
        private final int nodes;
        private final int ranks;

        LocalRank(int nodes, int ranks) {
            this.nodes = nodes;
            this.ranks = ranks;
        }

        @Override
        public Integer getKey(Long value) {
            return (int) (value / nodes % ranks);
        }
    }
}
