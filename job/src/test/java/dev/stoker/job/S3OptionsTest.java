package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.connectors.fetch.S3ClientSettings;
import java.time.Duration;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.GlobalConfiguration;
import org.apache.flink.configuration.IllegalConfigurationException;
import org.junit.jupiter.api.Test;

class S3OptionsTest {

    @Test
    void flinkS3KeysAlsoConfigureTheImageFetch() {
        Configuration conf =
                StokerConfig.fromArgs(
                        new String[] {
                            "--s3.endpoint",
                            "http://127.0.0.1:9000",
                            "--s3.path.style.access",
                            "true",
                            "--s3.access-key",
                            "AKIDEXAMPLE",
                            "--s3.secret-key",
                            "wJalrXUtnFEMI-example-secret",
                            "--stoker.fetch.capacity",
                            "48",
                            "--stoker.s3.max-connections",
                            "12"
                        });
        S3ClientSettings s = JobPlan.s3Settings(conf);
        assertThat(s.endpoint()).isEqualTo("http://127.0.0.1:9000");
        assertThat(s.pathStyleAccess()).isTrue();
        assertThat(s.accessKey()).isEqualTo("AKIDEXAMPLE");
        assertThat(s.secretKey()).isEqualTo("wJalrXUtnFEMI-example-secret");
        assertThat(s.maxConnections())
                .as("connections are their own option, not the async capacity")
                .isEqualTo(12);
        assertThat(s.toString()).doesNotContain("wJalrXUtnFEMI-example-secret");
    }

    @Test
    void connectionsDefaultToTheirOwnOptionsDefault() {
        Configuration conf = StokerConfig.fromArgs(new String[] {"--stoker.fetch.capacity", "8"});
        assertThat(JobPlan.s3Settings(conf).maxConnections())
                .isEqualTo(StokerOptions.S3_MAX_CONNECTIONS.defaultValue())
                .isEqualTo(64);
    }

    @Test
    void theReadTimeoutComesFromItsOption() {
        assertThat(JobPlan.s3Settings(new Configuration()).readTimeout())
                .isEqualTo(StokerOptions.S3_READ_TIMEOUT.defaultValue())
                .isEqualTo(java.time.Duration.ofSeconds(2));
        Configuration conf =
                StokerConfig.fromArgs(new String[] {"--stoker.s3.read-timeout", "750ms"});
        assertThat(JobPlan.s3Settings(conf).readTimeout())
                .isEqualTo(java.time.Duration.ofMillis(750));
        assertThatThrownBy(
                        () ->
                                JobPlan.s3Settings(conf).toBuilder()
                                        .readTimeout(java.time.Duration.ofNanos(500_000))
                                        .build())
                .as("the Netty client counts whole ms: 0.5 ms would turn the timeout off")
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("readTimeout must be at least 1 ms");
    }

    @Test
    void theClientSettingsHaveNoDefaultsOfTheirOwn() {
        assertThatThrownBy(() -> S3ClientSettings.builder().region("us-east-1").build())
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("maxConnections");
        assertThat(JobPlan.s3Settings(new Configuration()).maxAttempts())
                .isEqualTo(StokerOptions.S3_MAX_ATTEMPTS.defaultValue());
    }

    @Test
    void stokerKeysWinAndTheDefaultChainIsUsedWithoutKeys() {
        Configuration conf =
                StokerConfig.fromArgs(
                        new String[] {
                            "--s3.endpoint", "http://a:1", "--stoker.s3.endpoint", "http://b:2"
                        });
        S3ClientSettings s = JobPlan.s3Settings(conf);
        assertThat(s.endpoint()).isEqualTo("http://b:2");
        assertThat(s.accessKey()).isNull();
        assertThat(s.credentialsProvider().getClass().getSimpleName())
                .isEqualTo("DefaultCredentialsProvider");
    }

    @Test
    void secretKeysAreSensitiveToFlinkSoTheirValuesAreMasked() {
        assertThat(GlobalConfiguration.isSensitive(StokerOptions.S3_SECRET_KEY.key())).isTrue();
        assertThat(GlobalConfiguration.isSensitive("s3.secret-key")).isTrue();
    }

    @Test
    void requestTimeoutStaysBelowTheOperatorTimeout() {
        Configuration conf =
                StokerConfig.fromArgs(
                        new String[] {
                            "--stoker.dataset.path",
                            "s3://b/p",
                            "--stoker.tokenizer.path",
                            "/t",
                            "--stoker.fetch.timeout",
                            "5s"
                        });
        StokerConfig.validate(conf);
        S3ClientSettings s = JobPlan.s3Settings(conf);
        assertThat(s.requestTimeout()).isEqualTo(Duration.ofMillis(4500));
        assertThat(s.attemptTimeout()).isEqualTo(Duration.ofMillis(4500));

        conf.set(StokerOptions.S3_REQUEST_TIMEOUT, Duration.ofSeconds(5));
        assertThatThrownBy(() -> StokerConfig.validate(conf))
                .isInstanceOf(IllegalConfigurationException.class)
                .hasMessageContaining("stoker.s3.request-timeout");
    }
}
