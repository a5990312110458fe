package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import dev.stoker.testkit.ExpectedFaultFilter;
import dev.stoker.testkit.FaultInjectingBlobStore;
import dev.stoker.testkit.LocalS3Server;
import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.test.junit5.InjectMiniCluster;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.io.TempDir;

/**
 * Runs the whole job against a real S3 server (S3Proxy on 127.0.0.1): the JSONL through Flink's S3
 * filesystem plugin (flink-s3-fs-presto from {@code target/plugins}, as on a cluster), the images
 * through the async S3 client, checkpoints to {@code s3://}. Checks the same accounting as {@link
 * StokerJobITCase} ({@link JobRun.Result#assertAccounted()}): every record is in exactly one batch
 * (of its planned step and rank) or in exactly one dead letter.
 */
@ExtendWith(ExpectedFaultFilter.DeadLettersExpected.class) // bad records on purpose, each asserted
class S3JobITCase {
    private static final int WORLD_SIZE = 2;
    private static final int MICRO_BATCH_SIZE = 3;
    private static final String BUCKET = "sft";
    private static final String DATASET = "llava-style";

    /**
     * In the throttling case the SDK cancels attempts that run past their attempt timeout (and
     * retries them); its Netty client now and then reports the cancellation at the end of its
     * pipeline.
     */
    @RegisterExtension
    @Order(0) // registered before, and removed after, the clusters and servers that log them
    static final ExpectedFaultFilter.Expected CANCELLED_GETS =
            ExpectedFaultFilter.Expected.cancelledS3Gets();

    @RegisterExtension
    @Order(1)
    static final JobTestCluster CLUSTER = JobTestCluster.withS3(2);

    private static final LocalS3Server S3 = CLUSTER.s3();

    private final Set<String> checkpointsSeen = ConcurrentHashMap.newKeySet();

    /** Annotations apart from the images: {@code split/annotations/} and {@code split/media/}. */
    private static final String SPLIT_ANNOTATIONS = "split/annotations";

    private static final String SPLIT_IMAGE_ROOT = "s3://" + BUCKET + "/split/media";

    @TempDir static Path split;

    @BeforeAll
    static void upload() throws IOException {
        Path local = SharedData.dataDir().resolve(DATASET);
        S3.uploadDirectory(local, BUCKET, "complete");
        S3.uploadDirectory(local, BUCKET, "missing-images");
        S3.uploadDirectory(local, BUCKET, "flaky");
        StokerJobITCase.writeAnnotationsWithEscape(split);
        S3.uploadDirectory(split.resolve("annotations"), BUCKET, SPLIT_ANNOTATIONS);
        S3.uploadDirectory(local.resolve("images"), BUCKET, "split/media/images");
    }

    /**
     * Runs the job over {@code s3://sft/<prefix>} with checkpoints on S3, and checks the
     * accounting.
     */
    private JobRun.Result runJob(String prefix) throws Exception {
        return runJob(prefix, new Configuration());
    }

    private JobRun.Result runJob(String prefix, Configuration options) throws Exception {
        Configuration extra = CLUSTER.s3Config();
        extra.addAll(options);
        extra.set(StokerOptions.MAX_PIXELS, 1003520L);
        extra.set(
                CheckpointingOptions.CHECKPOINTS_DIRECTORY,
                "s3://" + BUCKET + "/checkpoints/" + prefix);
        // Flink removes a finished job's checkpoints, so watch for them on S3 while the job runs.
        ScheduledExecutorService watcher = Executors.newSingleThreadScheduledExecutor();
        watcher.scheduleWithFixedDelay(
                () ->
                        S3
                                .client()
                                .listObjectsV2(
                                        r -> r.bucket(BUCKET).prefix("checkpoints/" + prefix + "/"))
                                .join()
                                .contents()
                                .stream()
                                .map(o -> o.key())
                                .filter(k -> k.endsWith("/_metadata"))
                                .forEach(checkpointsSeen::add),
                0,
                100,
                TimeUnit.MILLISECONDS);
        JobRun.Result run;
        try {
            run =
                    JobRun.run(
                            "s3://" + BUCKET + "/" + prefix,
                            CLUSTER.outputRoot(),
                            WORLD_SIZE,
                            MICRO_BATCH_SIZE,
                            extra);
        } finally {
            watcher.shutdownNow();
            watcher.awaitTermination(10, TimeUnit.SECONDS);
        }
        run.assertAccounted();
        for (JsonNode dl : run.deadLetters()) {
            assertThat(dl.get("file").asText())
                    .startsWith("s3://" + BUCKET + "/" + prefix + "/")
                    .endsWith("train.jsonl");
            assertThat(dl.get("line").asLong()).isPositive();
        }
        return run;
    }

    private static Map<Long, String> records() throws IOException {
        return StokerJobITCase.readRecords(SharedData.dataDir().resolve(DATASET + "/train.jsonl"));
    }

    private static List<String> reasons(JobRun.Result run) {
        return run.deadLetters().stream().map(dl -> dl.get("reason").asText()).toList();
    }

    @Test
    void everyRecordFromS3IsBatchedOrDeadLetteredOnceWithCheckpointsOnS3() throws Exception {
        JobRun.Result run = runJob("complete");
        Map<Long, String> records = records();
        Set<Long> batched = run.samplesByIndex().keySet();

        records.forEach(
                (index, images) -> {
                    if (StokerJobITCase.isPlainPhotoRecord(DATASET, images)) {
                        assertThat(batched)
                                .as("plain photo record %d (%s) is written", index, images)
                                .contains(index);
                    }
                });
        assertThat(reasons(run))
                .as("every image object exists, so no record fails in the fetch stage")
                .doesNotContain("IMAGE_NOT_FOUND", "FETCH_FAILED", "FETCH_TIMEOUT");
        assertThat(checkpointsSeen)
                .as("completed checkpoints on S3 (chk-N/_metadata)")
                .isNotEmpty();
    }

    @Test
    void withLatencyAndTenPercentTransientErrorsEverySampleStillArrivesExactlyOnce()
            throws Exception {
        JobRun.Result run;
        S3.faults().setFaults(new FaultInjectingBlobStore.Faults(50, 20, 0.10, "flaky/images/.*"));
        long errorsBefore = S3.faults().injectedErrors();
        long getsBefore = S3.faults().gets();
        try {
            run = runJob("flaky");
        } finally {
            S3.faults().setFaults(FaultInjectingBlobStore.Faults.NONE);
        }
        assertThat(S3.faults().injectedErrors() - errorsBefore)
                .as("injected 503/500 answers in %d GETs", S3.faults().gets() - getsBefore)
                .isPositive();
        Map<Long, String> records = records();
        Set<Long> batched = run.samplesByIndex().keySet();
        assertThat(reasons(run))
                .as("transient errors are retried, so no record fails in the fetch stage")
                .doesNotContain("IMAGE_NOT_FOUND", "FETCH_FAILED", "FETCH_TIMEOUT");
        records.forEach(
                (index, images) -> {
                    if (StokerJobITCase.isPlainPhotoRecord(DATASET, images)) {
                        assertThat(batched)
                                .as("plain photo record %d (%s) is written", index, images)
                                .contains(index);
                    }
                });
    }

    /**
     * The s3-throttling case of ../shared/data/bad-inputs, its faults.json played by the S3 server:
     * img_001 503 SlowDown x3, img_002 503 x2, img_003 500 x1, img_004 503 forever, img_005 403,
     * img_006 404, and 503 SlowDown above 50 GETs/s (10 attempts per GET). (The Retry-After header
     * of img_002 is not reproduced.) Transient errors are retried; the rest become dead letters
     * with their code, a 403 at its first answer (after the attempts the rate limit turned away,
     * when it met it: a CI run saw "after 2 attempt(s)").
     */
    @Test
    void s3ThrottlingCaseRetriesTransientErrorsAndDeadLettersPermanentOnes() throws Exception {
        Path local = SharedData.dataDir().resolve("bad-inputs/s3-throttling");
        String prefix = "s3-throttling";
        S3.uploadDirectory(local, BUCKET, prefix);
        FaultInjectingBlobStore faults = S3.faults();
        String images = prefix + "/images/";
        faults.answerNext(BUCKET, images + "img_001.jpg", 503, 503, 503);
        faults.answerNext(BUCKET, images + "img_002.jpg", 503, 503);
        faults.answerNext(BUCKET, images + "img_003.jpg", 500);
        faults.answerAlways(BUCKET, images + "img_004.jpg", 503);
        faults.answerAlways(BUCKET, images + "img_005.jpg", 403);
        S3.deleteObject(BUCKET, images + "img_006.jpg");
        faults.setRateLimit(50);
        // A bucket throttled at 50 GETs/s needs many attempts: each GET may meet the limit several
        // times before it gets through. 10 (today's default), set so the test does not depend on
        // it.
        Configuration throttled = new Configuration();
        throttled.set(StokerOptions.S3_MAX_ATTEMPTS, 10);
        JobRun.Result run;
        try {
            run = runJob(prefix, throttled);
        } finally {
            faults.clearAnswers();
        }
        Map<Long, String> records = StokerJobITCase.readRecords(local.resolve("train.jsonl"));
        Map<Long, JobRun.Sample> batched = run.samplesByIndex();
        Map<Long, JsonNode> deadLetters = new HashMap<>();
        run.deadLetters().forEach(dl -> deadLetters.put(dl.get("sample_index").asLong(), dl));
        records.forEach(
                (index, image) -> {
                    String key = "s3://" + BUCKET + "/" + prefix + "/" + image;
                    switch (image) {
                        case "images/img_004.jpg" ->
                                assertDeadLetter(
                                        deadLetters.get(index),
                                        index,
                                        "FETCH_FAILED",
                                        key,
                                        "503",
                                        "after 10 attempt(s)");
                        case "images/img_005.jpg" -> {
                            // a 403 ends the retries at once; attempts before it may have met the
                            // bucket's rate limit (503 SlowDown) and been retried, as they should
                            assertDeadLetter(
                                    deadLetters.get(index), index, "FETCH_FAILED", key, "403");
                            assertThat(deadLetters.get(index).get("message").asText())
                                    .as("a 403 is not retried up to the 10 attempts")
                                    .containsPattern("HTTP 403 after [1-9] attempt\\(s\\)");
                        }
                        case "images/img_006.jpg" ->
                                assertDeadLetter(
                                        deadLetters.get(index),
                                        index,
                                        "IMAGE_NOT_FOUND",
                                        key,
                                        "404");
                        default ->
                                assertThat(batched)
                                        .as("record %d (%s) is written", index, image)
                                        .containsKey(index);
                    }
                });
    }

    private static void assertDeadLetter(
            JsonNode dl, long index, String reason, String... messageParts) {
        assertThat(dl).as("dead letter of record %d", index).isNotNull();
        assertThat(dl.get("reason").asText()).as("reason of record %d", index).isEqualTo(reason);
        assertThat(dl.get("message").asText())
                .as("message of record %d", index)
                .contains(messageParts);
    }

    /**
     * {@code s3://sft/split/annotations/train.jsonl} referencing images under {@code
     * s3://sft/split/media/} through {@code stoker.image.root}: the records are batched (their
     * images exist only under the image root) and a path that leaves the image root is {@code
     * UNSAFE_PATH} before any request, although an object exists where it points.
     */
    /**
     * The operator guide's "Watch" table (docs/operator-guide.md) names REST metric ids for a job
     * reading S3 ({@code fetch-images.s3.*}); the running job reports each of them. (The cluster
     * test checks the table's other ids.) The job idles at its prefetch bound (no trainer) until
     * cancelled.
     */
    @Test
    void theReadmesS3MetricIdsAreOnTheRunningJob(@InjectMiniCluster MiniCluster cluster)
            throws Exception {
        List<String> documented =
                OperatorGuide.watchTableMetricIds().stream()
                        .filter(id -> id.startsWith("fetch-images.s3."))
                        .toList();
        assertThat(documented).isNotEmpty();

        Configuration conf =
                JobConfigs.config(
                        "s3://" + BUCKET + "/complete", CLUSTER.outputRoot(), WORLD_SIZE, 2);
        conf.addAll(CLUSTER.s3Config());
        conf.set(StokerOptions.PREFETCH_DEPTH, 1);
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(2);
        env.enableCheckpointing(500);
        StokerJob.build(env, conf);
        JobClient job = env.executeAsync("readme-s3-metrics");
        try {
            MiniClusterRest.awaitAllTasksRunning(cluster, job.getJobID(), Duration.ofSeconds(120));
            String vertex = null;
            for (JsonNode v :
                    MiniClusterRest.get(cluster, "/jobs/" + job.getJobID()).path("vertices")) {
                if (v.path("name").asText().contains("fetch-images")) {
                    vertex = v.path("id").asText();
                }
            }
            assertThat(vertex).as("the vertex with fetch-images").isNotNull();
            String path = "/jobs/" + job.getJobID() + "/vertices/" + vertex + "/subtasks/metrics";
            Set<String> reported = new HashSet<>();
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (!reported.containsAll(documented) && System.nanoTime() < deadline) {
                Thread.sleep(500);
                for (JsonNode metric : MiniClusterRest.get(cluster, path)) {
                    reported.add(metric.path("id").asText());
                }
            }
            assertThat(reported).containsAll(documented);
        } finally {
            job.cancel().get();
        }
    }

    @Test
    void jsonlUnderOnePrefixAndImagesUnderAnother() throws Exception {
        Configuration options = new Configuration();
        options.set(StokerOptions.IMAGE_ROOT, SPLIT_IMAGE_ROOT);
        long getsBefore = S3.faults().gets();
        JobRun.Result run = runJob(SPLIT_ANNOTATIONS, options);
        StokerJobITCase.assertImageRootOutcome(run, split.resolve("annotations/train.jsonl"));
        assertThat(S3.faults().gets() - getsBefore)
                .as("GETs: JSONL and one per image fetched")
                .isGreaterThanOrEqualTo(imagesBatched(run));
    }

    private static long imagesBatched(JobRun.Result run) {
        return run.samples().stream().mapToLong(sample -> sample.gridThw().size()).sum();
    }

    /** Mixed schemes work: local JSONL with an {@code s3://} image root. */
    @Test
    void localJsonlWithAnS3ImageRoot() throws Exception {
        Configuration extra = CLUSTER.s3Config();
        extra.set(StokerOptions.MAX_PIXELS, 1003520L);
        extra.set(StokerOptions.IMAGE_ROOT, SPLIT_IMAGE_ROOT);
        long getsBefore = S3.faults().gets();
        JobRun.Result run =
                JobRun.run(
                        split.resolve("annotations"),
                        CLUSTER.outputRoot(),
                        WORLD_SIZE,
                        MICRO_BATCH_SIZE,
                        extra);
        run.assertAccounted();
        StokerJobITCase.assertImageRootOutcome(run, split.resolve("annotations/train.jsonl"));
        assertThat(S3.faults().gets() - getsBefore)
                .as("every batched image came from S3")
                .isGreaterThanOrEqualTo(imagesBatched(run))
                .isPositive();
    }

    /** Mixed schemes work: JSONL on S3 with a local image root. */
    @Test
    void s3JsonlWithALocalImageRoot() throws Exception {
        Configuration options = new Configuration();
        options.set(StokerOptions.IMAGE_ROOT, SharedData.dataDir().resolve(DATASET).toString());
        JobRun.Result run = runJob(SPLIT_ANNOTATIONS, options);
        StokerJobITCase.assertImageRootOutcome(run, split.resolve("annotations/train.jsonl"));
    }

    @Test
    void deletedImageObjectsBecomeDeadLettersNamingTheKeyAndTheRestIsBatched() throws Exception {
        String prefix = "missing-images";
        List<String> deleted = List.of("images/photos/coffee.png", "images/photos/chelsea_cat.png");
        for (String image : deleted) {
            S3.deleteObject(BUCKET, prefix + "/" + image);
        }
        JobRun.Result run = runJob(prefix);
        Map<Long, String> records = records();
        Set<Long> batched = run.samplesByIndex().keySet();

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
                    run.deadLetters().stream()
                            .filter(d -> d.get("sample_index").asLong() == index)
                            .findFirst()
                            .orElseThrow(
                                    () -> new AssertionError("no dead letter for record " + index));
            assertThat(dl.get("reason").asText()).isEqualTo("IMAGE_NOT_FOUND");
            String image =
                    deleted.stream().filter(records.get(index)::contains).findFirst().orElseThrow();
            assertThat(dl.get("message").asText())
                    .contains("s3://" + BUCKET + "/" + prefix + "/" + image)
                    .contains("404");
        }
        records.forEach(
                (index, images) -> {
                    if (!expectMissing.contains(index)
                            && StokerJobITCase.isPlainPhotoRecord(DATASET, images)) {
                        assertThat(batched)
                                .as("plain photo record %d (%s) is written", index, images)
                                .contains(index);
                    }
                });
    }
}
