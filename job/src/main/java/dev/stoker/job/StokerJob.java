package dev.stoker.job;

import dev.stoker.connectors.deadletter.DeadLetterSinks;
import dev.stoker.connectors.shm.ArrowBatchSink;
import dev.stoker.connectors.source.DatasetListing;
import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.tokenize.ChatTokenizer;
import java.nio.file.Path;
import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.PipelineOptions;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.plugin.PluginUtils;
import org.apache.flink.streaming.api.environment.LocalStreamEnvironment;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Entry point. Submitted with {@code flink run stoker-job.jar --stoker.dataset.path ...} it runs on
 * the cluster; started with plain {@code java} it runs on an embedded local Flink (MiniCluster)
 * with the web UI on {@code rest.port} (default 8081).
 *
 * <p>Arguments are {@code --key value} pairs of {@link StokerOptions} or any Flink option.
 */
public final class StokerJob {
    private static final Logger LOG = LoggerFactory.getLogger(StokerJob.class);
    private static final long DEFAULT_CHECKPOINT_INTERVAL_MS = 10_000;

    private StokerJob() {}

    public static void main(String[] args) throws Exception {
        Configuration conf = StokerConfig.fromArgs(args);
        StreamExecutionEnvironment env = environment(conf);
        BatchPlan plan = build(env, conf);
        JobExecutionResult result = env.execute(conf.get(StokerOptions.JOB_NAME));
        // An attached run returns when the epoch is over: check its accounting.
        if (result.isJobExecutionResult()) {
            LOG.info("Epoch finished: {}", AccountingCheck.verify(result, plan));
        }
    }

    /** The cluster's environment under {@code flink run}; otherwise a local one with the web UI. */
    static StreamExecutionEnvironment environment(Configuration conf) {
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        if (env instanceof LocalStreamEnvironment) {
            if (!conf.contains(CheckpointingOptions.CHECKPOINTS_DIRECTORY)) {
                // Pending batches exceed the JobManager's 5 MB in-memory checkpoint limit.
                Path dir =
                        Path.of(
                                System.getProperty("java.io.tmpdir"),
                                "stoker-checkpoints",
                                conf.get(StokerOptions.JOB_NAME));
                conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, dir.toUri().toString());
            }
            // Flink filesystem plugins (e.g. s3-fs-presto for s3:// datasets and checkpoints) from
            // FLINK_PLUGINS_DIR (default ./plugins), configured with this configuration's s3.*
            // keys.
            FileSystem.initialize(conf, PluginUtils.createPluginManagerFromRootFolder(conf));
            env = StreamExecutionEnvironment.createLocalEnvironmentWithWebUI(conf);
        }
        if (env.getCheckpointInterval() <= 0) {
            // The dead-letter file sink commits its part files on checkpoints.
            env.enableCheckpointing(DEFAULT_CHECKPOINT_INTERVAL_MS);
        }
        return env;
    }

    /**
     * Scans the dataset, then adds the pipeline and its production sinks to {@code env}.
     *
     * @return the batch plan, so callers can check what the run must produce
     */
    public static BatchPlan build(StreamExecutionEnvironment env, Configuration conf)
            throws Exception {
        StokerConfig.validate(conf);
        conf.set(PipelineOptions.NAME, conf.get(StokerOptions.JOB_NAME));
        env.configure(conf);
        env.getConfig().enableObjectReuse();
        JobParameters.publish(env, conf);
        int maxLine = (int) conf.get(StokerOptions.MAX_LINE_LENGTH).getBytes();
        DatasetListing listing =
                DatasetListing.scan(
                        new org.apache.flink.core.fs.Path(conf.get(StokerOptions.DATASET_PATH)),
                        conf.get(StokerOptions.DATASET_GLOB),
                        maxLine);
        BatchPlan plan =
                new BatchPlan(
                        listing.numRecords(),
                        conf.get(StokerOptions.DP_WORLD_SIZE),
                        conf.get(StokerOptions.MICRO_BATCH_SIZE));
        long padTokenId;
        try (ChatTokenizer tokenizer =
                ChatTokenizer.open(Path.of(conf.get(StokerOptions.TOKENIZER_PATH)))) {
            padTokenId = tokenizer.padTokenId();
        }
        LOG.info(
                "Dataset {}: {} files, {} records -> {} steps of {} ranks x {} samples",
                listing.root(),
                listing.files().size(),
                listing.numRecords(),
                plan.numSteps(),
                plan.worldSize(),
                plan.microBatchSize());

        StokerPipeline.Outputs outputs = StokerPipeline.build(env, conf, listing, plan);
        String jobDir = StokerConfig.jobDir(conf);
        int patchDim = StokerPipeline.visionConfig(conf).patchDim();
        outputs.batches
                .sinkTo(
                        new ArrowBatchSink(
                                jobDir,
                                conf.get(StokerOptions.JOB_NAME),
                                plan,
                                patchDim,
                                padTokenId))
                .name("arrow-shm-sink")
                .uid("arrow-shm-sink");
        outputs.deadLetters
                .sinkTo(DeadLetterSinks.jsonl(StokerConfig.deadLetterDir(conf)))
                .name("dead-letter-sink")
                .uid("dead-letter-sink");
        return plan;
    }
}
