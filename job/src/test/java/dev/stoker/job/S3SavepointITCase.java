package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;

import dev.stoker.testkit.LocalS3Server;
import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.apache.flink.api.common.JobStatus;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.StateRecoveryOptions;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.test.junit5.InjectMiniCluster;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Savepoints on S3, as on a cluster: the job reads an {@code s3://} dataset, its trainer stops
 * after step 3, the job is stopped with a savepoint written to {@code s3://} through Flink's S3
 * plugin while it waits at the prefetch bound, and is resumed from that savepoint with the
 * trainer's step; every rank then gets each step exactly once.
 */
class S3SavepointITCase {
    private static final String BUCKET = "sft-savepoints";
    private static final int WORLD_SIZE = 2;
    private static final int DEPTH = 2;

    @RegisterExtension
    @Order(1)
    static final JobTestCluster CLUSTER = JobTestCluster.withS3(2);

    private static final LocalS3Server S3 = CLUSTER.s3();

    @BeforeAll
    static void upload() throws IOException {
        S3.uploadDirectory(SharedData.dataDir().resolve("llava-style"), BUCKET, "data");
    }

    private Configuration config() {
        Configuration conf = CLUSTER.s3Config();
        conf.set(StokerOptions.DATASET_PATH, "s3://" + BUCKET + "/data");
        conf.set(
                StokerOptions.TOKENIZER_PATH,
                SharedData.dataDir().resolve("tokenizers/qwen3").toString());
        conf.set(StokerOptions.OUTPUT_ROOT, CLUSTER.outputRoot().toString());
        conf.set(StokerOptions.JOB_NAME, "s3-savepoint");
        conf.set(StokerOptions.DP_WORLD_SIZE, WORLD_SIZE);
        conf.set(StokerOptions.MICRO_BATCH_SIZE, 2);
        conf.set(StokerOptions.PREFETCH_DEPTH, DEPTH);
        conf.set(StokerOptions.MAX_PIXELS, 200704L);
        conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, "s3://" + BUCKET + "/checkpoints");
        return conf;
    }

    private static JobClient submit(Configuration conf) throws Exception {
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.enableCheckpointing(500);
        StokerJob.build(env, conf);
        return env.executeAsync("s3-savepoint");
    }

    @Test
    void savepointOnS3ThenResumeWithTheTrainersStep(@InjectMiniCluster MiniCluster miniCluster)
            throws Exception {
        long steps = (38 + 3) / 4; // 38 llava-style records, 2 ranks x 2 samples
        long stopAt = 3;
        Path jobDir = CLUSTER.outputRoot().resolve("s3-savepoint");
        List<TrainerSim.Consumed> all = new ArrayList<>();

        JobClient first = submit(config());
        try (TrainerSim trainer = new TrainerSim(jobDir, WORLD_SIZE, 0, stopAt, 0)) {
            all.addAll(trainer.await(180_000));
        }
        MiniClusterRest.awaitAllTasksRunning(
                miniCluster, first.getJobID(), Duration.ofSeconds(120));
        String savepoint =
                first.stopWithSavepoint(
                                false,
                                "s3://" + BUCKET + "/savepoints",
                                SavepointFormatType.CANONICAL)
                        .get();
        assertThat(savepoint).startsWith("s3://" + BUCKET + "/savepoints/");
        assertThat(first.getJobStatus().get()).isEqualTo(JobStatus.FINISHED);
        String key = savepoint.substring(("s3://" + BUCKET + "/").length()) + "/_metadata";
        assertThat(S3.client().headObject(r -> r.bucket(BUCKET).key(key)).join().contentLength())
                .as("savepoint metadata on S3")
                .isPositive();

        Configuration resume = config();
        resume.set(StateRecoveryOptions.SAVEPOINT_PATH, savepoint);
        resume.set(StokerOptions.RESUME_STEP, stopAt);
        JobClient second = submit(resume);
        try (TrainerSim trainer = new TrainerSim(jobDir, WORLD_SIZE, stopAt + 1, steps - 1, 0)) {
            all.addAll(trainer.await(180_000));
        }
        second.getJobExecutionResult().get();

        List<String> seen = all.stream().map(c -> c.step() + "/" + c.rank()).sorted().toList();
        List<String> expected = new ArrayList<>();
        for (long s = 0; s < steps; s++) {
            for (int r = 0; r < WORLD_SIZE; r++) {
                expected.add(s + "/" + r);
            }
        }
        assertThat(seen).containsExactlyElementsOf(expected.stream().sorted().toList());
    }
}
