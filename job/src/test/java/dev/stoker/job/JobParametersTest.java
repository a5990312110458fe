package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.Map;
import org.junit.jupiter.api.Test;

class JobParametersTest {
    @Test
    void effectiveStokerOptionsAndS3KeysAreShownWithSecretsMasked() {
        Map<String, String> shown =
                JobParameters.shown(
                        StokerConfig.fromArgs(
                                new String[] {
                                    "--stoker.dataset.path", "s3://b/sft",
                                    "--stoker.tokenizer.path", "/t",
                                    "--stoker.s3.secret-key", "hunter2",
                                    "--s3.secret-key", "hunter2",
                                    "--s3.endpoint", "http://127.0.0.1:9000",
                                    "--rest.port", "0"
                                }));
        assertThat(shown)
                .containsEntry("stoker.dataset.path", "s3://b/sft")
                // defaults are shown too, in Flink's notation
                .containsEntry("stoker.micro-batch-size", "4")
                .containsEntry("stoker.fetch.timeout", "1 min")
                .containsEntry("s3.endpoint", "http://127.0.0.1:9000")
                .containsEntry("stoker.s3.secret-key", JobParameters.MASK)
                .containsEntry("s3.secret-key", JobParameters.MASK)
                .doesNotContainKey("rest.port");
        assertThat(shown.values()).doesNotContain("hunter2");
    }
}
