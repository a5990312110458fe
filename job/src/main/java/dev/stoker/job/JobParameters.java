package dev.stoker.job;

import java.util.Map;
import java.util.TreeMap;
import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.GlobalConfiguration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.ParameterTool;

/**
 * Puts the job's effective Stoker options (defaults included) and the {@code s3.*} keys it was
 * given into the job's global parameters, which the web UI shows under the job's "Configuration"
 * tab ("User Configuration"; REST {@code GET /jobs/<id>/config}, field {@code user-config}).
 * Sensitive values (keys Flink considers secret, such as {@code stoker.s3.secret-key}) are masked.
 */
final class JobParameters {
    static final String MASK = "******";

    private JobParameters() {}

    static void publish(StreamExecutionEnvironment env, Configuration conf) {
        env.getConfig().setGlobalJobParameters(ParameterTool.fromMap(shown(conf)));
    }

    static Map<String, String> shown(Configuration conf) {
        Configuration effective = new Configuration();
        for (ConfigOption<?> option : StokerConfig.options()) {
            copy(conf, effective, option);
        }
        Map<String, String> shown = new TreeMap<>(effective.toMap());
        conf.toMap().forEach((k, v) -> shown.putIfAbsent(k, v));
        shown.keySet().removeIf(k -> !k.startsWith("stoker.") && !k.startsWith("s3."));
        shown.replaceAll((k, v) -> GlobalConfiguration.isSensitive(k) ? MASK : v);
        return shown;
    }

    private static <T> void copy(Configuration from, Configuration to, ConfigOption<T> option) {
        from.getOptional(option)
                .or(() -> java.util.Optional.ofNullable(option.defaultValue()))
                .ifPresent(v -> to.set(option, v));
    }
}
