package dev.stoker.job;

import java.nio.file.Path;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;

/** Job configurations of the tests: built only, nothing here runs a job. */
final class JobConfigs {
    private JobConfigs() {}

    /**
     * The job configuration the ITs start from: dataset, the shared Qwen tokenizer, output root,
     * job name {@code itcase}, W and B, checkpoints under the output root, and no restarts (any
     * failure or restart fails the test).
     */
    static Configuration config(
            String datasetRoot, Path outputRoot, int worldSize, int microBatchSize) {
        Configuration conf = new Configuration();
        conf.set(StokerOptions.DATASET_PATH, datasetRoot);
        conf.set(
                StokerOptions.TOKENIZER_PATH,
                SharedData.dataDir().resolve("tokenizers/qwen3").toString());
        conf.set(StokerOptions.OUTPUT_ROOT, outputRoot.toString());
        conf.set(StokerOptions.JOB_NAME, "itcase");
        conf.set(StokerOptions.DP_WORLD_SIZE, worldSize);
        conf.set(StokerOptions.MICRO_BATCH_SIZE, microBatchSize);
        conf.set(
                CheckpointingOptions.CHECKPOINTS_DIRECTORY,
                outputRoot.resolve("checkpoints").toUri().toString());
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
        return conf;
    }
}
