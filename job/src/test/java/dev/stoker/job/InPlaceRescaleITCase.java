package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.stoker.testkit.ExpectedFaultFilter;
import java.time.Duration;
import java.util.List;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.JobStatus;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.CoreOptions;
import org.apache.flink.configuration.JobManagerOptions;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.test.junit5.InjectMiniCluster;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * In-place rescaling of a one-node job under the adaptive scheduler, as the web UI does it
 * (FLINK-31471: {@code web.rescale.enable}, the REST call {@code PUT
 * /jobs/<id>/resource-requirements}): the CPU stages (the source's vertex, through tokenize) go
 * from 2 to 4 subtasks and back down to 1 while a simulated trainer consumes, without a savepoint
 * or a resubmission. The trainer gets every (step, rank) batch of an uninterrupted run exactly
 * once, byte for byte, the job never fails (no restart strategy), and the sink keeps one subtask
 * per rank.
 */
@ExtendWith(ExpectedFaultFilter.DeadLettersExpected.class) // the dataset's bad records
class InPlaceRescaleITCase {
    private static final Logger LOG = LoggerFactory.getLogger(InPlaceRescaleITCase.class);
    private static final int WORLD_SIZE = 2;
    private static final int MICRO_BATCH_SIZE = 2;
    private static final int EPOCHS = 2;
    private static final String SOURCE_VERTEX = "Source: jsonl-source";

    /** The shared llava-style dataset's 38 records at W*B = 4: 10 steps per epoch. */
    private static final long STEPS = EPOCHS * 10;

    @RegisterExtension
    static final JobTestCluster CLUSTER = JobTestCluster.local(4, clusterConfig());

    /** The adaptive scheduler, rescaling as soon as the requirements change. */
    private static Configuration clusterConfig() {
        Configuration conf = new Configuration();
        conf.set(JobManagerOptions.SCHEDULER, JobManagerOptions.SchedulerType.Adaptive);
        conf.set(JobManagerOptions.SCHEDULER_EXECUTING_COOLDOWN_AFTER_RESCALING, Duration.ZERO);
        conf.set(
                JobManagerOptions.SCHEDULER_EXECUTING_RESOURCE_STABILIZATION_TIMEOUT,
                Duration.ofMillis(500));
        return conf;
    }

    private static Configuration config() {
        Configuration conf =
                JobConfigs.config(
                        SharedData.dataDir().resolve("llava-style").toString(),
                        CLUSTER.outputRoot(),
                        WORLD_SIZE,
                        MICRO_BATCH_SIZE);
        conf.set(StokerOptions.EPOCHS, EPOCHS);
        conf.set(StokerOptions.SHUFFLE_SEED, 5L);
        conf.set(StokerOptions.PREFETCH_DEPTH, 2);
        conf.set(CoreOptions.DEFAULT_PARALLELISM, 2);
        return conf;
    }

    private static JobClient submit() throws Exception {
        Configuration conf = config();
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.enableCheckpointing(200);
        StokerJob.build(env, conf);
        return env.executeAsync("in-place-rescale");
    }

    @Test
    void theWebUisRescaleUpAndDownKeepsEveryBatchExactlyOnce(@InjectMiniCluster MiniCluster mc)
            throws Exception {
        long steps = STEPS;
        List<TrainerSim.Consumed> reference;
        try (TrainerSim trainer =
                new TrainerSim(
                        CLUSTER.outputRoot().resolve("itcase"), WORLD_SIZE, 0, steps - 1, 0)) {
            JobClient job = submit();
            reference = trainer.await(120_000);
            awaitStatus(job, JobStatus.FINISHED);
        }
        assertThat(reference).hasSize((int) steps * WORLD_SIZE);
        CLUSTER.freshOutputRoot();

        // a trainer slower than the job, so that it runs through both rescales
        try (TrainerSim trainer =
                new TrainerSim(
                        CLUSTER.outputRoot().resolve("itcase"), WORLD_SIZE, 0, steps - 1, 250)) {
            JobClient job = submit();
            JobID id = job.getJobID();
            // up to 4 after 6 of the 40 batches, down to 1 after 20
            for (int[] rescale : new int[][] {{4, 6}, {1, 20}}) {
                int parallelism = rescale[0];
                awaitConsumed(trainer, rescale[1]);
                setSourceParallelism(mc, id, parallelism);
                awaitParallelism(mc, id, parallelism);
                LOG.info(
                        "CPU stages at {} subtasks after {} batches",
                        parallelism,
                        trainer.stepsDone());
            }
            assertThat(trainer.await(120_000)).containsExactlyElementsOf(reference);
            awaitStatus(job, JobStatus.FINISHED);
            JsonNode history = MiniClusterRest.get(mc, "/jobs/" + id + "/exceptions");
            assertThat(history.path("exceptionHistory").path("entries")).as("failures").isEmpty();
        }
    }

    /**
     * The web UI's rescale: {@code GET} the job's resource requirements and {@code PUT} them back
     * with the source vertex's upper bound set to {@code parallelism}.
     */
    private static void setSourceParallelism(MiniCluster mc, JobID job, int parallelism)
            throws Exception {
        String path = "/jobs/" + job + "/resource-requirements";
        ObjectNode requirements = (ObjectNode) MiniClusterRest.get(mc, path);
        String source = vertex(mc, job, SOURCE_VERTEX).path("id").asText();
        ObjectNode bounds = (ObjectNode) requirements.path(source).path("parallelism");
        bounds.put("lowerBound", 1);
        bounds.put("upperBound", parallelism);
        MiniClusterRest.put(mc, path, requirements);
    }

    private static JsonNode vertex(MiniCluster mc, JobID job, String namePrefix) throws Exception {
        for (JsonNode v : MiniClusterRest.get(mc, "/jobs/" + job).path("vertices")) {
            if (v.path("name").asText().startsWith(namePrefix)) {
                return v;
            }
        }
        throw new AssertionError("no vertex named " + namePrefix + "...");
    }

    /**
     * Waits until the source vertex runs {@code parallelism} subtasks and the sink one per rank.
     */
    private static void awaitParallelism(MiniCluster mc, JobID job, int parallelism)
            throws Exception {
        long deadline = System.currentTimeMillis() + 60_000;
        while (vertex(mc, job, SOURCE_VERTEX).path("parallelism").asInt() != parallelism) {
            assertThat(System.currentTimeMillis())
                    .as("the source vertex at %d subtasks", parallelism)
                    .isLessThan(deadline);
            Thread.sleep(50);
        }
        assertThat(vertex(mc, job, "arrow-shm-sink").path("parallelism").asInt())
                .as("sink subtasks: one per rank")
                .isEqualTo(WORLD_SIZE);
    }

    private static void awaitConsumed(TrainerSim trainer, long batches) throws Exception {
        long deadline = System.currentTimeMillis() + 60_000;
        while (trainer.stepsDone() < batches) {
            assertThat(System.currentTimeMillis()).isLessThan(deadline);
            Thread.sleep(10);
        }
    }

    private static void awaitStatus(JobClient job, JobStatus want) throws Exception {
        long deadline = System.currentTimeMillis() + 120_000;
        while (job.getJobStatus().get() != want) {
            assertThat(System.currentTimeMillis()).as("job reaches %s", want).isLessThan(deadline);
            Thread.sleep(50);
        }
    }
}
