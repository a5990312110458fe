package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import dev.stoker.connectors.s3.FaultInjectingBlobStore;
import dev.stoker.connectors.s3.LocalS3Server;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.plugin.PluginUtils;
import org.apache.flink.runtime.testutils.MiniClusterResourceConfiguration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.test.junit5.MiniClusterExtension;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Runs the whole job against a real S3 server (S3Proxy on 127.0.0.1): the JSONL through Flink's S3
 * filesystem plugin (flink-s3-fs-presto from {@code target/plugins}, as on a cluster), the images
 * through the async S3 client, checkpoints to {@code s3://}. Checks the same accounting as {@link
 * StokerJobITCase}: every record is in exactly one batch or in the dead letters, once.
 */
class S3JobITCase {
    private static final int WORLD_SIZE = 2;
    private static final int MICRO_BATCH_SIZE = 3;
    private static final String BUCKET = "sft";
    private static final String DATASET = "llava-style";

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
    private final Set<String> checkpointsSeen = ConcurrentHashMap.newKeySet();

    @BeforeAll
    static void uploadAndInitializeS3FileSystem() throws IOException {
        Path local = SharedData.dataDir().resolve(DATASET);
        S3.uploadDirectory(local, BUCKET, "complete");
        S3.uploadDirectory(local, BUCKET, "missing-images");
        S3.uploadDirectory(local, BUCKET, "flaky");
        // As on a cluster: the S3 plugin from FLINK_PLUGINS_DIR (target/plugins), given the s3.* keys.
        FileSystem.initialize(s3Config(), PluginUtils.createPluginManagerFromRootFolder(s3Config()));
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
        outputRoot = Files.createTempDirectory(Path.of("/dev/shm"), "stoker-s3-itcase-");
    }

    @AfterEach
    void deleteOutput() throws IOException {
        try (Stream<Path> walk = Files.walk(outputRoot)) {
            walk.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        }
    }

    private Path runJob(String prefix) throws Exception {
        Configuration conf = s3Config();
        conf.set(StokerOptions.DATASET_PATH, "s3://" + BUCKET + "/" + prefix);
        conf.set(StokerOptions.TOKENIZER_PATH, SharedData.dataDir().resolve("tokenizers/qwen3").toString());
        conf.set(StokerOptions.OUTPUT_ROOT, outputRoot.toString());
        conf.set(StokerOptions.JOB_NAME, "s3-itcase");
        conf.set(StokerOptions.DP_WORLD_SIZE, WORLD_SIZE);
        conf.set(StokerOptions.MICRO_BATCH_SIZE, MICRO_BATCH_SIZE);
        conf.set(StokerOptions.MAX_PIXELS, 1003520L);
        conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, "s3://" + BUCKET + "/checkpoints/" + prefix);
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none"); // any failure fails the test
        // The checkpoint storage is read from the environment's own configuration.
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(2);
        env.enableCheckpointing(300);
        StokerJob.build(env, conf);
        // Flink removes a finished job's checkpoints, so watch for them on S3 while the job runs.
        ScheduledExecutorService watcher = Executors.newSingleThreadScheduledExecutor();
        watcher.scheduleWithFixedDelay(
                () -> S3.client().listObjectsV2(r -> r.bucket(BUCKET).prefix("checkpoints/" + prefix + "/")).join()
                        .contents().stream()
                        .map(o -> o.key())
                        .filter(k -> k.endsWith("/_metadata"))
                        .forEach(checkpointsSeen::add),
                0, 100, TimeUnit.MILLISECONDS);
        try {
            env.execute("stoker-s3-itcase-" + prefix);
        } finally {
            watcher.shutdownNow();
            watcher.awaitTermination(10, TimeUnit.SECONDS);
        }
        return outputRoot.resolve("s3-itcase");
    }

    /** Batched sample indices, after checking batch placement and the exactly-once accounting. */
    private static List<Long> checkAccounting(Path jobDir, Map<Long, String> records, List<JsonNode> deadLetters)
            throws IOException {
        long numRecords = records.size();
        long numSteps = (numRecords + WORLD_SIZE * MICRO_BATCH_SIZE - 1) / (WORLD_SIZE * MICRO_BATCH_SIZE);
        List<Long> batched = new ArrayList<>();
        for (int rank = 0; rank < WORLD_SIZE; rank++) {
            for (long step = 0; step < numSteps; step++) {
                Path file = jobDir.resolve("rank-" + rank).resolve(String.format("step-%010d.arrow", step));
                assertThat(file).as("batch (step %d, rank %d)", step, rank).exists();
                for (long index : StokerJobITCase.sampleIndices(file)) {
                    assertThat(index / MICRO_BATCH_SIZE % WORLD_SIZE).as("rank of sample %d", index).isEqualTo(rank);
                    assertThat(index / (WORLD_SIZE * MICRO_BATCH_SIZE)).as("step of sample %d", index).isEqualTo(step);
                    batched.add(index);
                }
            }
        }
        Set<Long> accounted = new HashSet<>(batched);
        for (JsonNode dl : deadLetters) {
            assertThat(dl.get("file").asText()).startsWith("s3://" + BUCKET + "/").endsWith("train.jsonl");
            assertThat(dl.get("line").asLong()).isPositive();
            accounted.add(dl.get("sample_index").asLong());
        }
        assertThat(batched.size() + deadLetters.size()).as("written + dead-lettered = records read").isEqualTo(numRecords);
        assertThat(accounted).hasSize((int) numRecords);
        assertThat(accounted).allMatch(i -> i >= 0 && i < numRecords);
        return batched;
    }

    @Test
    void everyRecordFromS3IsBatchedOrDeadLetteredOnceWithCheckpointsOnS3() throws Exception {
        Path jobDir = runJob("complete");
        Map<Long, String> records = StokerJobITCase.readRecords(SharedData.dataDir().resolve(DATASET + "/train.jsonl"));
        List<JsonNode> deadLetters = StokerJobITCase.readDeadLetters(jobDir.resolve("dead-letters"));
        List<Long> batched = checkAccounting(jobDir, records, deadLetters);

        records.forEach(
                (index, images) -> {
                    if (StokerJobITCase.isPlainPhotoRecord(DATASET, images)) {
                        assertThat(batched).as("plain photo record %d (%s) is written", index, images).contains(index);
                    }
                });
        assertThat(deadLetters)
                .as("every image object exists, so no record fails in the fetch stage")
                .extracting(dl -> dl.get("reason").asText())
                .doesNotContain("IMAGE_NOT_FOUND", "FETCH_FAILED", "FETCH_TIMEOUT");
        assertThat(checkpointsSeen).as("completed checkpoints on S3 (chk-N/_metadata)").isNotEmpty();
    }

    @Test
    void withLatencyAndTenPercentTransientErrorsEverySampleStillArrivesExactlyOnce() throws Exception {
        Path jobDir;
        S3.faults().setFaults(new FaultInjectingBlobStore.Faults(50, 20, 0.10, "flaky/images/.*"));
        long errorsBefore = S3.faults().injectedErrors();
        try {
            jobDir = runJob("flaky");
        } finally {
            S3.faults().setFaults(FaultInjectingBlobStore.Faults.NONE);
        }
        assertThat(S3.faults().injectedErrors() - errorsBefore).as("injected 503/500 answers").isPositive();
        Map<Long, String> records = StokerJobITCase.readRecords(SharedData.dataDir().resolve(DATASET + "/train.jsonl"));
        List<JsonNode> deadLetters = StokerJobITCase.readDeadLetters(jobDir.resolve("dead-letters"));
        List<Long> batched = checkAccounting(jobDir, records, deadLetters);
        assertThat(deadLetters)
                .as("transient errors are retried, so no record fails in the fetch stage")
                .extracting(dl -> dl.get("reason").asText())
                .doesNotContain("IMAGE_NOT_FOUND", "FETCH_FAILED", "FETCH_TIMEOUT");
        records.forEach(
                (index, images) -> {
                    if (StokerJobITCase.isPlainPhotoRecord(DATASET, images)) {
                        assertThat(batched).as("plain photo record %d (%s) is written", index, images).contains(index);
                    }
                });
    }

    @Test
    void deletedImageObjectsBecomeDeadLettersNamingTheKeyAndTheRestIsBatched() throws Exception {
        String prefix = "missing-images";
        List<String> deleted = List.of("images/photos/coffee.png", "images/photos/chelsea_cat.png");
        for (String image : deleted) {
            S3.deleteObject(BUCKET, prefix + "/" + image);
        }
        Path jobDir = runJob(prefix);
        Map<Long, String> records = StokerJobITCase.readRecords(SharedData.dataDir().resolve(DATASET + "/train.jsonl"));
        List<JsonNode> deadLetters = StokerJobITCase.readDeadLetters(jobDir.resolve("dead-letters"));
        List<Long> batched = checkAccounting(jobDir, records, deadLetters);

        Set<Long> expectMissing = new HashSet<>();
        records.forEach(
                (index, images) -> {
                    if (deleted.stream().anyMatch(images::contains)) {
                        expectMissing.add(index);
                    }
                });
        assertThat(expectMissing).isNotEmpty();
        for (long index : expectMissing) {
            JsonNode dl =
                    deadLetters.stream()
                            .filter(d -> d.get("sample_index").asLong() == index)
                            .findFirst()
                            .orElseThrow(() -> new AssertionError("no dead letter for record " + index));
            assertThat(dl.get("reason").asText()).isEqualTo("IMAGE_NOT_FOUND");
            String image = deleted.stream().filter(records.get(index)::contains).findFirst().orElseThrow();
            assertThat(dl.get("message").asText()).contains("s3://" + BUCKET + "/" + prefix + "/" + image).contains("404");
        }
        records.forEach(
                (index, images) -> {
                    if (!expectMissing.contains(index) && StokerJobITCase.isPlainPhotoRecord(DATASET, images)) {
                        assertThat(batched).as("plain photo record %d (%s) is written", index, images).contains(index);
                    }
                });
    }
}
