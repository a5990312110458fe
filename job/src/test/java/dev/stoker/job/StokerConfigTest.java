package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.IllegalConfigurationException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

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
    void packedRowsDefaultToMaxSeqLenAndMustHoldTheLongestSample() {
        Configuration conf = packing(true, null);
        StokerConfig.validate(conf);
        assertThat(StokerConfig.packingMaxTokens(conf, 4096)).isEqualTo(4096);
        assertThat(StokerConfig.packingMaxTokens(packing(true, 8192), 4096)).isEqualTo(8192);
        assertThatThrownBy(() -> StokerConfig.packingMaxTokens(packing(true, 2048), 4096))
                .isInstanceOf(IllegalConfigurationException.class)
                .hasMessageContaining(
                        "stoker.packing.max-tokens (2048) must be at least the longest maximum"
                                + " sequence length (4096: stoker.max-seq-len or a mixture"
                                + " source's max_seq_len)");
    }

    /** A job with max-seq-len 4096, packing on or off, and the row size when given. */
    private static Configuration packing(boolean enabled, Integer maxTokens) {
        Configuration conf =
                args(
                        "--stoker.dataset.path",
                        "/d",
                        "--stoker.tokenizer.path",
                        "/t",
                        "--stoker.max-seq-len",
                        "4096",
                        "--stoker.packing.enabled",
                        String.valueOf(enabled));
        if (maxTokens != null) {
            conf.set(StokerOptions.PACKING_MAX_TOKENS, maxTokens);
        }
        return conf;
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
        assertThatThrownBy(
                        () ->
                                StokerConfig.validate(
                                        args(
                                                "--stoker.dataset.path",
                                                "/d",
                                                "--stoker.tokenizer.path",
                                                "/t",
                                                "--stoker.video.max-bytes",
                                                "2gb")))
                .hasMessageContaining(
                        "stoker.video.max-bytes must be between 1 byte and 2147483639 bytes");
        assertThatThrownBy(
                        () ->
                                StokerConfig.validate(
                                        args(
                                                "--stoker.dataset.path",
                                                "/d",
                                                "--stoker.tokenizer.path",
                                                "/t",
                                                "--stoker.video.spill-dir",
                                                "spill")))
                .isInstanceOf(IllegalConfigurationException.class)
                .hasMessageContaining(
                        "stoker.video.spill-dir 'spill' must be an absolute local path");
        assertThat(StokerConfig.spillDirectory("/mnt/ssd/./spill/")).isEqualTo("/mnt/ssd/spill");
    }

    private static Configuration withImageRoot(String imageRoot) {
        return args(
                "--stoker.dataset.path",
                "s3://b/annotations",
                "--stoker.tokenizer.path",
                "/t",
                "--stoker.image.root",
                imageRoot);
    }

    @Test
    void imageRootDefaultsToTheDatasetRootAsListed() {
        Configuration conf = args("--stoker.dataset.path", "/d", "--stoker.tokenizer.path", "/t");
        StokerConfig.validate(conf);
        StokerConfig.checkImageRoot(conf);
        assertThat(StokerConfig.imageRoot(conf, "file:/d")).isEqualTo("file:/d");
    }

    /**
     * Either scheme with either dataset: an s3:// root is kept as given (the image fetch has its
     * own S3 client), a local path becomes an absolute file: URI.
     */
    @Test
    void imageRootIsAnS3UriOrAnAbsoluteFileUri(@TempDir Path dir) throws Exception {
        Configuration s3 = withImageRoot("s3://b/images");
        StokerConfig.validate(s3);
        StokerConfig.checkImageRoot(s3);
        assertThat(StokerConfig.imageRoot(s3, "s3://b/annotations")).isEqualTo("s3://b/images");

        Path images = Files.createDirectories(dir.resolve("my images"));
        Configuration local = withImageRoot(images.toString());
        StokerConfig.validate(local);
        StokerConfig.checkImageRoot(local);
        String root = StokerConfig.imageRoot(local, "s3://b/annotations");
        assertThat(root).startsWith("file:/").endsWith("/my%20images/");
        assertThat(Path.of(URI.create(root))).isEqualTo(images);

        Path relative = Path.of("").toAbsolutePath().relativize(images);
        assertThat(StokerConfig.imageRoot(withImageRoot(relative.toString()), "/d"))
                .isEqualTo(root);
    }

    @ParameterizedTest
    @CsvSource(
            delimiter = '|',
            value = {
                "s3:///images | must name a bucket",
                "s3:images | is not a directory URI",
                "s3://b/images?versionId=1 | has a query or fragment",
                "s3://b/im ages | is not a valid URI or path",
                "' ' | is empty"
            })
    void badImageRootIsRejectedAtStartUpNamingOptionAndValue(String value, String why) {
        assertThatThrownBy(() -> StokerConfig.validate(withImageRoot(value)))
                .isInstanceOf(IllegalConfigurationException.class)
                .hasMessageContaining("stoker.image.root '" + value + "' " + why);
    }

    @Test
    void localImageRootMustBeAnExistingDirectory(@TempDir Path dir) throws Exception {
        Path missing = dir.resolve("missing");
        Path file = Files.writeString(dir.resolve("file.txt"), "x");
        for (Path p : new Path[] {missing, file}) {
            Configuration conf = withImageRoot(p.toString());
            StokerConfig.validate(conf);
            assertThatThrownBy(() -> StokerConfig.checkImageRoot(conf))
                    .isInstanceOf(IllegalConfigurationException.class)
                    .hasMessageContaining(
                            "stoker.image.root '" + p + "' is not an existing directory");
        }
        Configuration unknownScheme = withImageRoot("nofs://host/images");
        StokerConfig.validate(unknownScheme);
        assertThatThrownBy(() -> StokerConfig.checkImageRoot(unknownScheme))
                .isInstanceOf(IllegalConfigurationException.class)
                .hasMessageContaining("stoker.image.root 'nofs://host/images' cannot be read");
    }
}
