package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import dev.stoker.connectors.fetch.TransientFailurePolicy;
import dev.stoker.testkit.ExpectedFaultFilter;
import dev.stoker.testkit.FaultInjectingBlobStore;
import dev.stoker.testkit.FaultInjectingBlobStore.Body;
import dev.stoker.testkit.LocalS3Server;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.io.TempDir;

/**
 * S3 misbehaviour played by the test S3 server ({@link FaultInjectingBlobStore} as S3Proxy
 * middleware) against the whole job: slow and stalled GETs (the async-timeout case of
 * ../shared/data/bad-inputs). The job fails on any restart (restart strategy none, see {@link
 * JobRun}) and checks its own accounting, except where a test asks for restarts (the FAIL_OVER
 * policy for transient failures).
 */
@ExtendWith(ExpectedFaultFilter.DeadLettersExpected.class) // bad records on purpose, each asserted
class S3FaultsITCase {
    private static final String BUCKET = "sft-test";

    /** The FAIL_OVER case fails a source task on purpose with a transient fetch failure. */
    @RegisterExtension
    @Order(0) // registered before, and removed after, the clusters and servers that log them
    static final ExpectedFaultFilter.Expected FAILOVER =
            ExpectedFaultFilter.Expected.sourceTaskFailures(
                    "dev.stoker.connectors.fetch.TransientFetchException");

    /**
     * GETs the job gives up on (fetch timeout, a failed-over task) are cancelled; the AWS SDK's
     * Netty client then reports "Request cancelled" at the end of its channel pipeline.
     */
    @RegisterExtension
    @Order(0) // registered before, and removed after, the clusters and servers that log them
    static final ExpectedFaultFilter.Expected CANCELLED_GETS =
            ExpectedFaultFilter.Expected.cancelledS3Gets();

    @RegisterExtension
    @Order(1)
    static final JobTestCluster CLUSTER = JobTestCluster.withS3(2);

    private static final LocalS3Server S3 = CLUSTER.s3();

    @BeforeAll
    static void createBucket() {
        S3.createBucket(BUCKET);
    }

    @AfterEach
    void clearFaults() {
        S3.faults().clearAnswers();
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

        Configuration options = CLUSTER.s3Config();
        options.set(StokerOptions.FETCH_TIMEOUT, Duration.ofSeconds(5));
        options.set(StokerOptions.FETCH_CAPACITY, 16);
        long start = System.nanoTime();
        JobRun.Result run =
                JobRun.run("s3://" + BUCKET + "/" + prefix, CLUSTER.outputRoot(), 2, 4, options);
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

    private static final int RECORDS_PER_FILE = 1500;
    private static final int KEYS = 300;
    private static final int NOT_FOUND_KEYS = 20; // keys 0..19: never uploaded, 404
    private static final int FORBIDDEN_KEYS = 10; // keys 20..29: always 403
    private static final List<String> PHOTOS =
            List.of(
                    "hopper.jpg",
                    "extreme_ironing.jpg",
                    "flower2.jpg",
                    "waterview.jpg",
                    "rocket.jpg");

    /**
     * Issue 7's fault-injection run: 3000 records in two JSONL files over 300 image keys (copies of
     * the llava-style photos, each key used by 10 records), 10% of all image GETs answered 503
     * SlowDown or 500 InternalError, 20 keys missing (404) and 10 forbidden (403 always). Every
     * record is batched exactly once or dead-lettered exactly once ({@link
     * JobRun.Result#assertAccounted()}, and the job's own accounting check and accumulators), the
     * dead letters are exactly the 300 records of the permanent keys, with IMAGE_NOT_FOUND (404) or
     * FETCH_FAILED (403) naming the key, and every other record is batched.
     */
    @Test
    void tenPercentTransientErrorsAndPermanentOnesKeepTheAccountingExact(@TempDir Path tmp)
            throws Exception {
        String prefix = "fault-injection";
        Path images = Files.createDirectories(tmp.resolve("images"));
        Path photos = SharedData.dataDir().resolve("llava-style/images/photos");
        for (int k = NOT_FOUND_KEYS; k < KEYS; k++) {
            Files.copy(photos.resolve(PHOTOS.get(k % PHOTOS.size())), images.resolve(key(k)));
        }
        // (file name, line) -> image key index
        Map<String, Integer> keyOf = new HashMap<>();
        for (String file : List.of("part-a.jsonl", "part-b.jsonl")) {
            List<String> lines = new ArrayList<>();
            for (int line = 1; line <= RECORDS_PER_FILE; line++) {
                int record = lines.size() + (file.equals("part-a.jsonl") ? 0 : RECORDS_PER_FILE);
                int k = (record * 7) % KEYS; // each key 10 times, spread over both files
                keyOf.put(file + ":" + line, k);
                lines.add(
                        "{\"id\": \"fi-"
                                + record
                                + "\", \"image\": \"images/"
                                + key(k)
                                + "\", \"conversations\": [{\"from\": \"human\", \"value\":"
                                + " \"<image>\\nWhat is shown?\"}, {\"from\": \"gpt\", \"value\":"
                                + " \"A photo.\"}]}");
            }
            Files.write(tmp.resolve(file), lines, StandardCharsets.UTF_8);
        }
        S3.uploadDirectory(tmp, BUCKET, prefix);
        FaultInjectingBlobStore faults = S3.faults();
        for (int k = NOT_FOUND_KEYS; k < NOT_FOUND_KEYS + FORBIDDEN_KEYS; k++) {
            faults.answerAlways(BUCKET, prefix + "/images/" + key(k), 403);
        }
        faults.setFaults(new FaultInjectingBlobStore.Faults(0, 0, 0.10, prefix + "/images/.*"));
        long errorsBefore = faults.injectedErrors();
        long getsBefore = faults.gets();

        Configuration options = CLUSTER.s3Config();
        options.set(StokerOptions.MAX_PIXELS, 3136L * 4);
        // 10 attempts: a GET fails 10 times in a row at 10% with probability 1e-10, not 1e-5
        options.set(StokerOptions.S3_MAX_ATTEMPTS, 10);
        options.set(StokerOptions.FETCH_TIMEOUT, Duration.ofSeconds(60));
        long start = System.nanoTime();
        JobRun.Result run;
        try {
            run = JobRun.run("s3://" + BUCKET + "/" + prefix, CLUSTER.outputRoot(), 2, 8, options);
        } finally {
            faults.setFaults(FaultInjectingBlobStore.Faults.NONE);
        }
        Duration took = Duration.ofNanos(System.nanoTime() - start);
        run.assertAccounted();
        assertThat(run.plan().numRecords()).isEqualTo(2L * RECORDS_PER_FILE);
        long gets = faults.gets() - getsBefore;
        long injected = faults.injectedErrors() - errorsBefore;
        assertThat(injected - (long) FORBIDDEN_KEYS * 10)
                .as("transient 503/500 answers injected into %d GETs (%s)", gets, took)
                .isGreaterThan(gets / 20);

        Map<String, JsonNode> deadLetters = new HashMap<>();
        for (JsonNode dl : run.deadLetters()) {
            String file = dl.get("file").asText();
            String where =
                    file.substring(file.lastIndexOf('/') + 1) + ":" + dl.get("line").asLong();
            assertThat(deadLetters.put(where, dl)).as("one dead letter for %s", where).isNull();
        }
        Set<String> batched = new java.util.HashSet<>();
        for (JobRun.Sample s : run.samples()) {
            String where = s.location().substring(s.location().lastIndexOf('/') + 1);
            assertThat(batched.add(where)).as("one sample for %s", where).isTrue();
        }
        int expectedDeadLetters = 0;
        for (Map.Entry<String, Integer> e : keyOf.entrySet()) {
            int k = e.getValue();
            String url = "s3://" + BUCKET + "/" + prefix + "/images/" + key(k);
            JsonNode dl = deadLetters.get(e.getKey());
            if (k < NOT_FOUND_KEYS + FORBIDDEN_KEYS) {
                expectedDeadLetters++;
                assertThat(dl).as("dead letter of %s (%s)", e.getKey(), url).isNotNull();
                assertThat(batched).doesNotContain(e.getKey());
                assertThat(dl.get("stage").asText()).isEqualTo("fetch");
                assertThat(dl.get("reason").asText())
                        .as("reason of %s", e.getKey())
                        .isEqualTo(k < NOT_FOUND_KEYS ? "IMAGE_NOT_FOUND" : "FETCH_FAILED");
                assertThat(dl.get("message").asText())
                        .contains(url)
                        .contains(k < NOT_FOUND_KEYS ? "404" : "403");
            } else {
                assertThat(dl).as("no dead letter for %s (%s)", e.getKey(), url).isNull();
                assertThat(batched).as("%s (%s) is batched", e.getKey(), url).contains(e.getKey());
            }
        }
        assertThat(expectedDeadLetters).isEqualTo(300);
        assertThat(run.deadLetters()).hasSize(expectedDeadLetters);
        assertThat(run.samples()).hasSize(2 * RECORDS_PER_FILE - expectedDeadLetters);
    }

    /**
     * Under {@code stoker.fetch.transient-failures=FAIL_OVER} a GET that still fails after the
     * client's retries fails the task instead of emptying a slot: with one GET at a time, 2
     * attempts per GET and img_001 answering 503 four times, two GETs exhaust their retries, the
     * job fails over twice and every img_001 record still arrives. A 404 stays a dead letter: it is
     * permanent.
     */
    @Test
    void failOverPolicyRetriesTransientFailuresThroughRestarts() throws Exception {
        Path local = SharedData.dataDir().resolve("bad-inputs/s3-throttling");
        String prefix = "fail-over";
        S3.uploadDirectory(local, BUCKET, prefix);
        FaultInjectingBlobStore faults = S3.faults();
        faults.answerNext(BUCKET, prefix + "/images/img_001.jpg", 503, 503, 503, 503);
        faults.answerAlways(BUCKET, prefix + "/images/img_006.jpg", 404);
        long errorsBefore = faults.injectedErrors();

        Configuration options = CLUSTER.s3Config();
        options.set(StokerOptions.FETCH_TRANSIENT_FAILURES, TransientFailurePolicy.FAIL_OVER);
        options.set(StokerOptions.S3_MAX_ATTEMPTS, 2);
        options.set(StokerOptions.FETCH_CAPACITY, 1);
        options.set(RestartStrategyOptions.RESTART_STRATEGY, "fixed-delay");
        options.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS, 5);
        options.set(
                RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_DELAY, Duration.ofMillis(100));
        JobRun.Result run =
                JobRun.run("s3://" + BUCKET + "/" + prefix, CLUSTER.outputRoot(), 2, 4, options);
        run.assertAccounted();

        assertThat(faults.injectedErrors() - errorsBefore)
                .as("the four 503 answers were all served")
                .isGreaterThanOrEqualTo(4);
        assertThat(run.deadLetters())
                .as("only the 404 records are dead letters")
                .isNotEmpty()
                .allMatch(dl -> dl.get("reason").asText().equals("IMAGE_NOT_FOUND"))
                .allMatch(dl -> dl.get("message").asText().contains("img_006.jpg"));
        Map<Long, String> records = StokerJobITCase.readRecords(local.resolve("train.jsonl"));
        long img001 = records.values().stream().filter(i -> i.contains("img_001")).count();
        assertThat(img001).isPositive();
        assertThat(
                        run.samples().stream()
                                .filter(smp -> records.get(smp.sampleIndex()).contains("img_001"))
                                .count())
                .as("every img_001 record arrived")
                .isEqualTo(img001);
    }

    private static String key(int k) {
        return String.format("k%03d.jpg", k);
    }

    /**
     * Broken bodies through the same middleware, on the async-timeout dataset (40 records, 10 per
     * image): img_000's next two GETs break with a connection reset after 100 bytes and img_001's
     * next two end cleanly after 100 bytes, short of their Content-Length; both are retried and all
     * their records are batched. img_002 always resets and img_003 is always truncated: their
     * records are FETCH_FAILED dead letters naming the key, after the client's 5 attempts (set
     * here: the default's 10 would only make the always-broken GETs retry longer).
     */
    @Test
    void resetAndTruncatedBodiesAreRetriedThenDeliveredOrDeadLettered() throws Exception {
        Path local = SharedData.dataDir().resolve("bad-inputs/async-timeout");
        String prefix = "broken-bodies";
        S3.uploadDirectory(local, BUCKET, prefix);
        FaultInjectingBlobStore faults = S3.faults();
        String images = prefix + "/images/";
        faults.bodyNext(BUCKET, images + "img_000.jpg", Body.resetAfter(100), Body.resetAfter(100));
        faults.bodyNext(
                BUCKET, images + "img_001.jpg", Body.truncatedAfter(100), Body.truncatedAfter(100));
        faults.bodyAlways(BUCKET, images + "img_002.jpg", Body.resetAfter(100));
        faults.bodyAlways(BUCKET, images + "img_003.jpg", Body.truncatedAfter(500));
        long getsBefore = faults.gets();

        Configuration options = CLUSTER.s3Config();
        options.set(StokerOptions.S3_MAX_ATTEMPTS, 5);
        JobRun.Result run =
                JobRun.run("s3://" + BUCKET + "/" + prefix, CLUSTER.outputRoot(), 2, 4, options);
        run.assertAccounted();

        Map<Long, String> records = StokerJobITCase.readRecords(local.resolve("train.jsonl"));
        Set<Long> batched = run.samplesByIndex().keySet();
        Map<Long, JsonNode> deadLetters = new HashMap<>();
        run.deadLetters().forEach(dl -> deadLetters.put(dl.get("sample_index").asLong(), dl));
        records.forEach(
                (index, image) -> {
                    switch (image) {
                        case "images/img_002.jpg", "images/img_003.jpg" -> {
                            JsonNode dl = deadLetters.get(index);
                            assertThat(dl)
                                    .as("dead letter of record %d (%s)", index, image)
                                    .isNotNull();
                            assertThat(dl.get("stage").asText()).isEqualTo("fetch");
                            assertThat(dl.get("reason").asText())
                                    .as("reason of record %d (%s)", index, image)
                                    .isEqualTo("FETCH_FAILED");
                            assertThat(dl.get("message").asText())
                                    .contains("s3://" + BUCKET + "/" + prefix + "/" + image)
                                    .contains("after 5 attempt(s)");
                        }
                        default ->
                                assertThat(batched)
                                        .as("record %d (%s) is written", index, image)
                                        .contains(index);
                    }
                });
        assertThat(run.deadLetters()).hasSize(20);
        assertThat(faults.gets() - getsBefore)
                .as(
                        "GETs: 40 records, 4 retries of the broken first answers, 4 more per"
                                + " always-broken record")
                .isGreaterThanOrEqualTo(40 + 4 + 20 * 4);
    }
}
