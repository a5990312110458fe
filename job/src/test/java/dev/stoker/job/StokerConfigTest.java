package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.IllegalConfigurationException;
import org.junit.jupiter.api.Test;

class StokerConfigTest {

    private static Configuration args(String... args) {
        return StokerConfig.fromArgs(args);
    }

    @Test
    void programArgumentsBecomeTypedOptions() {
        Configuration conf =
                args(
                        "--stoker.dataset.path",
                        "/d",
                        "--stoker.tokenizer.path",
                        "/t",
                        "--stoker.dp-world-size",
                        "8",
                        "--stoker.fetch.timeout",
                        "5s",
                        "--rest.port",
                        "0");
        StokerConfig.validate(conf);
        assertThat(conf.get(StokerOptions.DP_WORLD_SIZE)).isEqualTo(8);
        assertThat(conf.get(StokerOptions.FETCH_TIMEOUT)).hasSeconds(5);
        assertThat(conf.get(StokerOptions.MICRO_BATCH_SIZE)).isEqualTo(4);
        assertThat(StokerConfig.jobDir(conf)).isEqualTo("/dev/shm/stoker/stoker");
        assertThat(StokerConfig.deadLetterDir(conf))
                .isEqualTo("/dev/shm/stoker/stoker/dead-letters");
    }

    @Test
    void misspelledStokerOptionIsRejectedByName() {
        Configuration conf =
                args(
                        "--stoker.dataset.path",
                        "/d",
                        "--stoker.tokenizer.path",
                        "/t",
                        "--stoker.world-size",
                        "8");
        assertThatThrownBy(() -> StokerConfig.validate(conf))
                .isInstanceOf(IllegalConfigurationException.class)
                .hasMessageContaining("stoker.world-size");
    }

    @Test
    void missingRequiredOptionAndBadValuesAreNamed() {
        assertThatThrownBy(() -> StokerConfig.validate(args("--stoker.tokenizer.path", "/t")))
                .hasMessageContaining("--stoker.dataset.path");
        assertThatThrownBy(
                        () ->
                                StokerConfig.validate(
                                        args(
                                                "--stoker.dataset.path",
                                                "/d",
                                                "--stoker.tokenizer.path",
                                                "/t",
                                                "--stoker.micro-batch-size",
                                                "0")))
                .hasMessageContaining("stoker.micro-batch-size must be >= 1");
        assertThatThrownBy(
                        () ->
                                StokerConfig.validate(
                                        args(
                                                "--stoker.dataset.path",
                                                "/d",
                                                "--stoker.tokenizer.path",
                                                "/t",
                                                "--stoker.job-name",
                                                "../x")))
                .hasMessageContaining("stoker.job-name");
    }
}
