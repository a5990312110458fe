package dev.stoker.job;

import dev.stoker.connectors.fetch.S3ClientSettings;
import dev.stoker.testkit.LocalS3Server;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.plugin.PluginUtils;

/**
 * Flink's S3 filesystem for tests, as on a cluster: the plugin from FLINK_PLUGINS_DIR
 * (target/plugins), given the test server's {@code s3.*} keys; and the image fetch's settings for
 * it.
 */
final class S3FileSystems {
    private S3FileSystems() {}

    /** The {@code s3.*} options that point Flink and the image fetch at {@code s3}. */
    static Configuration config(LocalS3Server s3) {
        return Configuration.fromMap(s3.flinkS3Options());
    }

    /**
     * Image-fetch client settings for {@code s3}: the job's own, built from {@link #config}'s
     * {@code s3.*} options (endpoint, keys, path-style) and the {@code stoker.s3.*} defaults.
     */
    static S3ClientSettings clientSettings(LocalS3Server s3) {
        return JobPlan.s3Settings(config(s3));
    }

    /** Initializes Flink's filesystems with the S3 plugin configured for {@code s3}. */
    static void use(LocalS3Server s3) {
        Configuration conf = config(s3);
        FileSystem.initialize(conf, PluginUtils.createPluginManagerFromRootFolder(conf));
    }

    /** Back to Flink's default filesystems (no plugins). */
    static void reset() {
        FileSystem.initialize(new Configuration(), null);
    }
}
