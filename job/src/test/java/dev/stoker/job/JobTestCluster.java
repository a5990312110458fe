package dev.stoker.job;

import dev.stoker.testkit.LocalS3Server;
import java.io.IOException;
import java.nio.file.Path;
import org.apache.flink.client.program.ClusterClient;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.testutils.MiniClusterResourceConfiguration;
import org.apache.flink.test.junit5.MiniClusterExtension;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.AfterEachCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.BeforeEachCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolver;

/**
 * The job ITs' test bed as one JUnit extension, registered {@code static} with
 * {@code @RegisterExtension}: a Flink MiniCluster, optionally the local S3 server with Flink's S3
 * filesystem plugin configured for it (as on a cluster: flink-s3-fs-presto from {@code
 * FLINK_PLUGINS_DIR}, i.e. {@code target/plugins}), and a fresh output root under {@code /dev/shm}
 * for each test. Parameters of type {@link MiniCluster} ({@code @InjectMiniCluster}) and {@link
 * ClusterClient} resolve as with Flink's {@link MiniClusterExtension}.
 *
 * <p>The order lives here, once: the S3 server starts and Flink's filesystems are initialized for
 * it before the MiniCluster starts; after each test its output root is deleted; at the end the
 * MiniCluster closes first (its JobMasters discard completed checkpoints on {@code s3://} while
 * they shut down), then the filesystems are reset, then the server stops. A test class's own
 * {@code @BeforeAll} runs after this extension's, so it can upload to {@link #s3()}.
 */
final class JobTestCluster
        implements BeforeAllCallback,
                AfterAllCallback,
                BeforeEachCallback,
                AfterEachCallback,
                ParameterResolver {
    private final LocalS3Server s3;
    private final MiniClusterExtension miniCluster;
    private Path outputRoot;

    private JobTestCluster(LocalS3Server s3, MiniClusterResourceConfiguration config) {
        this.s3 = s3;
        this.miniCluster = new MiniClusterExtension(config);
    }

    /** One TaskManager with {@code slots} slots, local files only. */
    static JobTestCluster local(int slots) {
        return new JobTestCluster(null, oneTaskManager(slots, new Configuration()));
    }

    /** One TaskManager with {@code slots} slots and {@code clusterConfig}, local files only. */
    static JobTestCluster local(int slots, Configuration clusterConfig) {
        return new JobTestCluster(null, oneTaskManager(slots, clusterConfig));
    }

    /** One TaskManager with {@code slots} slots, and the local S3 server. */
    static JobTestCluster withS3(int slots) {
        return new JobTestCluster(new LocalS3Server(), oneTaskManager(slots, new Configuration()));
    }

    private static MiniClusterResourceConfiguration oneTaskManager(
            int slots, Configuration clusterConfig) {
        return new MiniClusterResourceConfiguration.Builder()
                .setConfiguration(clusterConfig)
                .setNumberTaskManagers(1)
                .setNumberSlotsPerTaskManager(slots)
                .build();
    }

    /**
     * The local S3 server.
     *
     * @throws IllegalStateException if this cluster was made without one ({@link #local})
     */
    LocalS3Server s3() {
        if (s3 == null) {
            throw new IllegalStateException("this JobTestCluster has no S3 server (use withS3)");
        }
        return s3;
    }

    /** The {@code s3.*} options that point Flink and the image fetch at {@link #s3()}. */
    Configuration s3Config() {
        return S3FileSystems.config(s3());
    }

    /** This test's output root, a fresh directory under {@code /dev/shm}. */
    Path outputRoot() {
        return outputRoot;
    }

    /** Deletes this test's output root and makes a fresh one, returned. */
    Path freshOutputRoot() throws IOException {
        JobRun.deleteOutputRoot(outputRoot);
        outputRoot = JobRun.createOutputRoot();
        return outputRoot;
    }

    @Override
    public void beforeAll(ExtensionContext context) throws Exception {
        if (s3 != null) {
            s3.beforeAll(context);
            S3FileSystems.use(s3);
        }
        miniCluster.beforeAll(context);
    }

    @Override
    public void beforeEach(ExtensionContext context) throws Exception {
        miniCluster.beforeEach(context);
        outputRoot = JobRun.createOutputRoot();
    }

    @Override
    public void afterEach(ExtensionContext context) throws Exception {
        try {
            JobRun.deleteOutputRoot(outputRoot);
        } finally {
            miniCluster.afterEach(context);
        }
    }

    @Override
    public void afterAll(ExtensionContext context) throws Exception {
        try {
            miniCluster.afterAll(context);
        } finally {
            if (s3 != null) {
                S3FileSystems.reset();
                s3.afterAll(context);
            }
        }
    }

    @Override
    public boolean supportsParameter(ParameterContext parameter, ExtensionContext context) {
        return miniCluster.supportsParameter(parameter, context);
    }

    @Override
    public Object resolveParameter(ParameterContext parameter, ExtensionContext context) {
        return miniCluster.resolveParameter(parameter, context);
    }
}
