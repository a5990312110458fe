package dev.stoker.job;

import org.apache.flink.runtime.testutils.MiniClusterResourceConfiguration;
import org.apache.flink.test.junit5.MiniClusterExtension;

/** MiniClusters for the job ITs, declared once instead of in every test class. */
final class MiniClusters {
    private MiniClusters() {}

    /**
     * A MiniCluster of one TaskManager with {@code slots} slots, for {@code @RegisterExtension}.
     */
    static MiniClusterExtension oneTaskManager(int slots) {
        return new MiniClusterExtension(
                new MiniClusterResourceConfiguration.Builder()
                        .setNumberTaskManagers(1)
                        .setNumberSlotsPerTaskManager(slots)
                        .build());
    }
}
