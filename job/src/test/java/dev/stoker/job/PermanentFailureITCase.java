package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;

import dev.stoker.testkit.ExpectedFaultFilter;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Comparator;
import java.util.stream.Stream;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.runtime.execution.SuppressRestartsException;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.ExceptionUtils;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.io.TempDir;

/**
 * A task that fails for a permanent reason fails the job with that reason instead of restarting
 * forever: the tokenizer is present when {@code main()} checks it (the client) and gone when the
 * TaskManager opens the tokenize operator, under a restart strategy that would otherwise retry
 * every second a thousand times.
 */
class PermanentFailureITCase {
    /**
     * Each source subtask fails to open on purpose (the tokenizer is gone): Flink warns per task.
     */
    @RegisterExtension
    @Order(0) // registered before, and removed after, the clusters and servers that log them
    static final ExpectedFaultFilter.Expected TASKS_FAILING =
            ExpectedFaultFilter.Expected.sourceTaskFailures("java.nio.file.NoSuchFileException");

    @RegisterExtension static final JobTestCluster CLUSTER = JobTestCluster.local(2);

    @Test
    void aTokenizerMissingOnTheTaskManagerFailsTheJobWithoutRestarts(@TempDir Path dir)
            throws Exception {
        Path tokenizer = Files.createDirectories(dir.resolve("tokenizer"));
        Files.copy(
                SharedData.dataDir().resolve("tokenizers/qwen3/tokenizer.json"),
                tokenizer.resolve("tokenizer.json"));
        Path out = Files.createDirectories(dir.resolve("out"));
        Configuration conf =
                JobConfigs.config(
                        SharedData.dataDir().resolve("llava-style").toString(), out, 2, 2);
        conf.set(StokerOptions.TOKENIZER_PATH, tokenizer.toString());
        conf.set(StokerOptions.PREFETCH_DEPTH, 0);
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "fixed-delay");
        conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS, 1000);
        conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_DELAY, Duration.ofSeconds(1));
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(2);
        StokerJob.build(env, conf); // main()'s checks pass: the tokenizer is there
        deleteTree(tokenizer);

        long start = System.nanoTime();
        assertTimeoutPreemptively(
                Duration.ofSeconds(60),
                () ->
                        assertThatThrownBy(() -> env.execute("permanent-failure"))
                                .satisfies(
                                        e -> {
                                            assertThat(
                                                            ExceptionUtils.findThrowable(
                                                                    e,
                                                                    SuppressRestartsException
                                                                            .class))
                                                    .isPresent();
                                            assertThat(ExceptionUtils.stringifyException(e))
                                                    .contains(
                                                            "the tokenizer in "
                                                                    + tokenizer
                                                                    + " does not load")
                                                    .contains("NoSuchFileException")
                                                    .contains("tokenizer.json");
                                        }));
        // with restarts it would run for 1000 x 1 s: the timeout above; without, it fails fast
        assertThat(Duration.ofNanos(System.nanoTime() - start)).isLessThan(Duration.ofSeconds(30));
    }

    private static void deleteTree(Path root) throws IOException {
        try (Stream<Path> paths = Files.walk(root)) {
            for (Path p : paths.sorted(Comparator.reverseOrder()).toList()) {
                Files.delete(p);
            }
        }
    }
}
