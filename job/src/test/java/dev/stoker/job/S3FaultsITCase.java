package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import dev.stoker.connectors.s3.FaultInjectingBlobStore;
import dev.stoker.connectors.s3.FaultInjectingBlobStore.Body;
import dev.stoker.connectors.s3.LocalS3Server;
import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.Set;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.plugin.PluginUtils;
import org.apache.flink.runtime.testutils.MiniClusterResourceConfiguration;
import org.apache.flink.test.junit5.MiniClusterExtension;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * S3 misbehaviour played by the test S3 server ({@link FaultInjectingBlobStore} as S3Proxy
 * middleware) against the whole job: slow and stalled GETs (the async-timeout case of
 * ../shared/data/bad-inputs). The job fails on any restart (restart strategy none, see {@link
 * JobRun}) and checks its own accounting.
 */
class S3FaultsITCase {
    private static final String BUCKET = "sft-test";

    @RegisterExtension
    @Order(1)
    static final LocalS3Server S3 = new LocalS3Server();

    @RegisterExtension
    @Order(2)
    static final MiniClusterExtension MINI_CLUSTER =
            new MiniClusterExtension(
                    new MiniClusterResourceConfiguration.Builder()
                            .setNumberTaskManagers(1)
                            .setNumberSlotsPerTaskManager(2)
                            .build());

    private Path outputRoot;

    @BeforeAll
    static void initializeS3FileSystem() {
        S3.createBucket(BUCKET);
        FileSystem.initialize(
                s3Config(), PluginUtils.createPluginManagerFromRootFolder(s3Config()));
    }

    @AfterAll
    static void resetFileSystems() {
        FileSystem.initialize(new Configuration(), null);
    }

    private static Configuration s3Config() {
        return Configuration.fromMap(S3.flinkS3Options());
    }

    @BeforeEach
    void createOutput() throws IOException {
        outputRoot = JobRun.createOutputRoot();
    }

    @AfterEach
    void deleteOutputAndFaults() throws IOException {
        S3.faults().clearAnswers();
        JobRun.deleteOutputRoot(outputRoot);
    }

    /**
     * The async-timeout case, its faults.json played by the server: img_001 sends no first byte for
     * 120 s, img_002 trickles at 10 bytes/s, img_003 is 3 s late once. With stoker.fetch.timeout 5
     * s and capacity 16, the records of img_001 and img_002 become FETCH_TIMEOUT dead letters
     * within about the timeout (the whole job ends far below 120 s), img_000 and img_003 records
     * are batched, the job does not restart, and rows + dead letters = 40. (The job always uses
     * unorderedWait; there is no ordered mode to test.)
     */
    @Test
    void stalledAndTricklingGetsBecomeFetchTimeoutsWithinTheTimeout() throws Exception {
        Path local = SharedData.dataDir().resolve("bad-inputs/async-timeout");
        String prefix = "async-timeout";
        S3.uploadDirectory(local, BUCKET, prefix);
        FaultInjectingBlobStore faults = S3.faults();
        String images = prefix + "/images/";
        faults.bodyAlways(BUCKET, images + "img_001.jpg", Body.firstByteAfter(120_000));
        faults.bodyAlways(BUCKET, images + "img_002.jpg", Body.trickle(10));
        faults.bodyNext(BUCKET, images + "img_003.jpg", Body.firstByteAfter(3_000));

        Configuration options = s3Config();
        options.set(StokerOptions.FETCH_TIMEOUT, Duration.ofSeconds(5));
        options.set(StokerOptions.FETCH_CAPACITY, 16);
        long start = System.nanoTime();
        JobRun.Result run = JobRun.run("s3://" + BUCKET + "/" + prefix, outputRoot, 2, 4, options);
        Duration took = Duration.ofNanos(System.nanoTime() - start);
        run.assertAccounted();

        assertThat(took)
                .as("the job waits about the 5 s timeout for stalled GETs, not their 120 s")
                .isLessThan(Duration.ofSeconds(60));
        Map<Long, String> records = StokerJobITCase.readRecords(local.resolve("train.jsonl"));
        assertThat(records).hasSize(40);
        assertThat(run.samples().size() + run.deadLetters().size()).isEqualTo(40);
        Set<Long> batched = run.samplesByIndex().keySet();
        Map<Long, JsonNode> deadLetters = new java.util.HashMap<>();
        run.deadLetters().forEach(dl -> deadLetters.put(dl.get("sample_index").asLong(), dl));
        records.forEach(
                (index, image) -> {
                    switch (image) {
                        case "images/img_001.jpg", "images/img_002.jpg" -> {
                            JsonNode dl = deadLetters.get(index);
                            assertThat(dl)
                                    .as("dead letter of record %d (%s)", index, image)
                                    .isNotNull();
                            assertThat(dl.get("stage").asText()).isEqualTo("fetch");
                            assertThat(dl.get("reason").asText())
                                    .as("reason of record %d (%s)", index, image)
                                    .isEqualTo("FETCH_TIMEOUT");
                        }
                        default ->
                                assertThat(batched)
                                        .as("record %d (%s) is written", index, image)
                                        .contains(index);
                    }
                });
    }
}
