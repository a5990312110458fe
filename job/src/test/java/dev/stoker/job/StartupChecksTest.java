package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.IllegalConfigurationException;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The checks {@code main()} makes before submitting ({@link StartupChecks}), through {@link
 * StokerJob#build}: nothing is executed.
 */
class StartupChecksTest {
    private static final Path LLAVA = SharedData.dataDir().resolve("llava-style");
    private static final Path TOKENIZER = SharedData.dataDir().resolve("tokenizers/qwen3");

    private static Configuration conf(Path output) {
        return JobConfigs.config(LLAVA.toString(), output, 2, 2);
    }

    private static void build(Configuration conf) throws Exception {
        StokerJob.build(StreamExecutionEnvironment.getExecutionEnvironment(), conf);
    }

    @Test
    void relativeLocalPathsBecomeAbsoluteAgainstTheClientsWorkingDirectory(@TempDir Path out)
            throws Exception {
        Path cwd = Path.of("").toAbsolutePath();
        Configuration conf = conf(out);
        conf.set(
                StokerOptions.TOKENIZER_PATH,
                cwd.relativize(TOKENIZER.toAbsolutePath()).toString());
        conf.set(StokerOptions.DATASET_PATH, cwd.relativize(LLAVA.toAbsolutePath()).toString());
        conf.set(StokerOptions.OUTPUT_ROOT, "file://" + out.resolve("shm/../shm"));
        conf.set(StokerOptions.DEAD_LETTER_PATH, "dead/letters");
        build(conf);
        assertThat(conf.get(StokerOptions.TOKENIZER_PATH))
                .isEqualTo(TOKENIZER.toAbsolutePath().normalize().toString());
        assertThat(conf.get(StokerOptions.DATASET_PATH))
                .isEqualTo(LLAVA.toAbsolutePath().normalize().toString());
        assertThat(conf.get(StokerOptions.OUTPUT_ROOT)).isEqualTo(out.resolve("shm").toString());
        assertThat(conf.get(StokerOptions.DEAD_LETTER_PATH))
                .isEqualTo(cwd.resolve("dead/letters").toString());
    }

    @Test
    void aTokenizerPathThatIsNotLocalIsRejected(@TempDir Path out) {
        Configuration conf = conf(out);
        conf.set(StokerOptions.TOKENIZER_PATH, "s3://models/qwen3");
        assertThatThrownBy(() -> build(conf))
                .isInstanceOf(IllegalConfigurationException.class)
                .hasMessageContaining("--stoker.tokenizer.path 's3://models/qwen3'")
                .hasMessageContaining("must be a local directory");
    }

    @Test
    void aTokenizerThatDoesNotLoadIsRejectedNamingTheOptionAndValue(@TempDir Path out)
            throws IOException {
        Path empty = Files.createDirectories(out.resolve("no-tokenizer"));
        Configuration conf = conf(out);
        conf.set(StokerOptions.TOKENIZER_PATH, empty.toString());
        assertThatThrownBy(() -> build(conf))
                .isInstanceOf(IllegalConfigurationException.class)
                .hasMessageContaining("--stoker.tokenizer.path '" + empty + "'")
                .hasMessageContaining("does not load")
                .hasMessageContaining("tokenizer.json");
    }

    @Test
    void aDatasetThatDoesNotListIsRejectedNamingTheOptionAndValue(@TempDir Path out) {
        Path missing = out.resolve("no-such-dataset");
        Configuration conf = conf(out);
        conf.set(StokerOptions.DATASET_PATH, missing.toString());
        assertThatThrownBy(() -> build(conf))
                .isInstanceOf(IllegalConfigurationException.class)
                .hasMessageContaining("--stoker.dataset.path '" + missing + "'")
                .hasMessageContaining("cannot be listed");
    }

    @Test
    void anS3ImageRootThatDoesNotAnswerIsRejectedNamingTheOptionAndValue(@TempDir Path out)
            throws IOException {
        int closedPort;
        try (ServerSocket s = new ServerSocket(0)) {
            closedPort = s.getLocalPort();
        }
        Configuration conf = conf(out);
        conf.set(StokerOptions.IMAGE_ROOT, "s3://images/llava");
        conf.set(StokerOptions.S3_ENDPOINT, "http://127.0.0.1:" + closedPort);
        conf.set(StokerOptions.S3_ACCESS_KEY, "k");
        conf.set(StokerOptions.S3_SECRET_KEY, "s");
        conf.set(StokerOptions.S3_MAX_ATTEMPTS, 1);
        assertThatThrownBy(() -> build(conf))
                .isInstanceOf(IllegalConfigurationException.class)
                .hasMessageContaining("--stoker.image.root 's3://images/llava'")
                .hasMessageContaining("is not reachable")
                .hasMessageContaining("127.0.0.1:" + closedPort);
    }
}
