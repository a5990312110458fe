package dev.stoker.job;

import dev.stoker.connectors.s3.LocalS3Server;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.plugin.PluginUtils;

/**
 * Flink's S3 filesystem for tests, as on a cluster: the plugin from FLINK_PLUGINS_DIR
 * (target/plugins), given the test server's {@code s3.*} keys.
 */
final class S3FileSystems {
    private S3FileSystems() {}

    /** The {@code s3.*} options that point Flink and the image fetch at {@code s3}. */
    static Configuration config(LocalS3Server s3) {
        return Configuration.fromMap(s3.flinkS3Options());
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
