package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import dev.stoker.testkit.FaultInjectingBlobStore.Faults;
import dev.stoker.testkit.LocalS3Server;
import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.test.junit5.InjectMiniCluster;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The checkpoint-backpressure case of {@code ../shared/data/bad-inputs} (its scenario.json): 2000
 * records over two large photos in S3, 200 ms to the first byte of every image GET, a consumer that
 * takes 2 s per 64-row batch, checkpoints every 10 s with a 60 s timeout. In Stoker the slow
 * consumer is the trainer (two ranks of 32 rows, 2 s per step) and its backpressure is the source's
 * prefetch gate, so no operator blocks on a full queue: at least 3 checkpoints must complete and
 * none expire or fail while the job waits on the trainer, every one of the 2000 records is a sample
 * (the job's own accounting check), and the trainer reads all 32 steps.
 */
class CheckpointBackpressureITCase {
    private static final Logger LOG = LoggerFactory.getLogger(CheckpointBackpressureITCase.class);
    private static final String BUCKET = "backpressure";
    private static final int WORLD_SIZE = 2;
    private static final int MICRO_BATCH_SIZE = 32;
    private static final int RECORDS = 2000;
    private static final long STEP_MILLIS = 2000;

    @RegisterExtension
    @Order(1)
    static final JobTestCluster CLUSTER = JobTestCluster.withS3(2);

    private static final LocalS3Server S3 = CLUSTER.s3();

    @BeforeAll
    static void uploadCase() throws IOException {
        S3.createBucket(BUCKET);
        Path local = SharedData.dataDir().resolve("bad-inputs/checkpoint-backpressure");
        S3.uploadDirectory(local, BUCKET, "case");
        S3.faults().setFaults(new Faults(200, 0, 0, "case/images/.*"));
    }

    @Test
    void checkpointsCompleteWhileTheTrainerHoldsTheJobBack(@InjectMiniCluster MiniCluster cluster)
            throws Exception {
        Configuration conf =
                JobConfigs.config(
                        "s3://" + BUCKET + "/case",
                        CLUSTER.outputRoot(),
                        WORLD_SIZE,
                        MICRO_BATCH_SIZE);
        conf.addAll(CLUSTER.s3Config());
        conf.set(StokerOptions.JOB_NAME, "backpressure");
        // 1400x1400 would stay 1400x1400 (12 MB of pixel values per sample, 750 MB per step);
        // the case is about checkpoints, so keep the batches small
        conf.set(StokerOptions.MAX_PIXELS, 200_704L);
        conf.set(StateBackendOptions.STATE_BACKEND, "rocksdb");
        conf.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, true);
        conf.set(CheckpointingOptions.CHECKPOINTING_TIMEOUT, Duration.ofSeconds(60));
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(2);
        env.enableCheckpointing(10_000);
        StokerJob.Planned planned = StokerJob.build(env, conf);
        long numSteps = planned.plan.numSteps();
        assertThat(numSteps).isEqualTo((RECORDS + 63) / 64);

        Path jobDir = CLUSTER.outputRoot().resolve("backpressure");
        try (TrainerSim trainer =
                new TrainerSim(jobDir, WORLD_SIZE, 0, numSteps - 1, STEP_MILLIS)) {
            JobClient job = env.executeAsync("checkpoint-backpressure");
            List<TrainerSim.Consumed> consumed = trainer.await(600_000);
            assertThat(consumed).hasSize((int) numSteps * WORLD_SIZE);
            JobExecutionResult result = job.getJobExecutionResult().get();
            String counts = AccountingCheck.verify(result, planned.plan, planned.firstStep);
            LOG.info("checkpoint-backpressure: {}", counts);
            assertThat(counts)
                    .contains("read=" + RECORDS)
                    .contains("samples emitted=" + RECORDS)
                    .contains("dead letters=0");

            JsonNode stats =
                    MiniClusterRest.get(cluster, "/jobs/" + job.getJobID() + "/checkpoints");
            LOG.info("checkpoint-backpressure: checkpoints {}", stats.get("counts"));
            List<String> failures = new ArrayList<>();
            for (JsonNode cp : stats.get("history")) {
                String status = cp.get("status").asText();
                if (!status.equals("COMPLETED") && !status.equals("IN_PROGRESS")) {
                    failures.add(status + ": " + cp.path("failure_message").asText());
                }
            }
            assertThat(stats.get("counts").get("completed").asInt()).isGreaterThanOrEqualTo(3);
            // Only the end of the bounded input, when tasks finish one by one, may decline a
            // checkpoint; waiting on the trainer never does.
            // A task declines ("task is closing"), or its TaskManager does when the task finished
            // between the trigger and the request ("... for unknown task ...").
            assertThat(failures)
                    .allMatch(
                            m -> m.contains("task is closing") || m.contains("for unknown task"),
                            "end-of-input only");
            assertThat(trainer.maxFilesPerRank())
                    .as("batch files a rank had in shared memory at once")
                    .isLessThanOrEqualTo(conf.get(StokerOptions.PREFETCH_DEPTH));
        }
    }
}
