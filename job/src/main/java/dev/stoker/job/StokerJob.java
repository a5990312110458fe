package dev.stoker.job;

import dev.stoker.connectors.deadletter.DeadLetterSinks;
import dev.stoker.connectors.protocol.Manifest;
import dev.stoker.connectors.protocol.ShmLayout;
import dev.stoker.connectors.shm.ArrowBatchSink;
import dev.stoker.connectors.shm.BatchOutput;
import dev.stoker.connectors.shm.PackedBatchSink;
import dev.stoker.connectors.source.PrefetchGate;
import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.batch.MixtureOrder;
import dev.stoker.operators.preset.ModelPreset;
import dev.stoker.operators.tokenize.ChatTokenizer;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.PipelineOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.plugin.PluginUtils;
import org.apache.flink.streaming.api.datastream.DataStreamSink;
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
    private static final MemorySize EMBEDDED_SEGMENT_SIZE = MemorySize.parse("128kb");

    private StokerJob() {}

    public static void main(String[] args) throws Exception {
        Configuration conf = StokerConfig.fromArgs(args);
        StreamExecutionEnvironment env = environment(conf);
        // The embedded job's tasks run in this JVM and use one loaded tokenizer: a handle on it
        // taken before planning (whose check then uses the same load) and kept to the job's end
        // spares each tokenize subtask its own load (~1 s of CPU at the start;
        // ChatTokenizer#loadShared).
        Path tokenizerDir = StartupChecks.tokenizerDirectory(conf);
        CompletableFuture<ChatTokenizer> kept =
                env instanceof LocalStreamEnvironment && tokenizerDir != null
                        ? ChatTokenizer.loadShared(tokenizerDir)
                        : null;
        Planned planned;
        JobExecutionResult result;
        try {
            planned = build(env, conf);
            result = env.execute(conf.get(StokerOptions.JOB_NAME));
        } finally {
            if (kept != null) {
                // when it has loaded; a failed load holds nothing (the planner's check reports it)
                kept.thenAccept(ChatTokenizer::close);
            }
        }
        // An attached run from its plan's first step (0, or a new stage's start step) returns
        // when the last step is written: check its accounting. (A resumed run re-processes what
        // was in flight in the savepoint.) One stopped with a savepoint returns too, before its
        // last step: it has nothing to check.
        if (result.isJobExecutionResult() && planned.firstStep == planned.plan.startStep()) {
            if (AccountingCheck.stoppedEarly(result, planned.plan, planned.firstStep)) {
                LOG.info(
                        "Run stopped before its last step (stop-with-savepoint): {}",
                        AccountingCheck.summary(result, planned.plan, planned.firstStep));
            } else {
                LOG.info(
                        "Run finished: {}",
                        AccountingCheck.verify(result, planned.plan, planned.firstStep));
                LOG.info(
                        "Per source: {}",
                        AccountingCheck.verifySources(result, planned.plan, planned.order));
            }
        }
    }

    /** The cluster's environment under {@code flink run}; otherwise a local one with the web UI. */
    static StreamExecutionEnvironment environment(Configuration conf) {
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        if (env instanceof LocalStreamEnvironment) {
            if (!conf.contains(CheckpointingOptions.CHECKPOINTS_DIRECTORY)) {
                // Savepoints and retained checkpoints need a directory.
                Path dir =
                        Path.of(
                                System.getProperty("java.io.tmpdir"),
                                "stoker-checkpoints",
                                conf.get(StokerOptions.JOB_NAME));
                conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, dir.toUri().toString());
            }
            if (!conf.contains(TaskManagerOptions.MEMORY_SEGMENT_SIZE)) {
                // As flink-conf/config.yaml sets for the cluster: a sample (hundreds of KB of
                // resized RGB) then spans a few network buffers instead of ~20 of Flink's default
                // 32 KB, which more than fill a channel's quota and stall the producing subtask
                // until the sink has taken each one.
                conf.set(TaskManagerOptions.MEMORY_SEGMENT_SIZE, EMBEDDED_SEGMENT_SIZE);
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
     * Checks the configuration ({@link StokerConfig#validate}; local paths made absolute by {@link
     * StartupChecks}), plans the submission once ({@link JobPlan#of}: the mixture's sources listed,
     * the tokenizer and S3 checked, the generation planned), then adds the pipeline and its
     * production sinks to {@code env}.
     *
     * @return the batch plan and generation, so callers can check what the run must produce
     */
    public static Planned build(StreamExecutionEnvironment env, Configuration conf)
            throws Exception {
        StokerConfig.validate(conf);
        StartupChecks.absolutizePaths(conf);
        conf.set(PipelineOptions.NAME, conf.get(StokerOptions.JOB_NAME));
        env.configure(conf);
        env.getConfig().enableObjectReuse();
        JobParameters.publish(env, conf);
        JobPlan job = JobPlan.of(conf, env.getConfiguration());
        MixturePlan mixture = job.mixture;
        BatchPlan plan = job.batches;
        for (int s = 0; s < mixture.order.numSources(); s++) {
            LOG.info(
                    "Source '{}': {}, {} files, {} records, {} per epoch, images under {}",
                    mixture.order.name(s),
                    mixture.listings.get(s).root(),
                    mixture.listings.get(s).files().size(),
                    mixture.order.records(s),
                    mixture.order.countPerEpoch(s),
                    mixture.rootOf(s));
        }
        LOG.info(
                "Mixture {} ({}): {}; generation {} produces steps {} .. {}",
                mixture.spec.location,
                mixture.fingerprint,
                plan,
                job.generation.stamp,
                job.generation.firstStep(),
                plan.numSteps() - 1);

        ShmLayout layout = job.layout();
        Topology topology = job.topology;
        PrefetchGate gate =
                new PrefetchGate(
                        topology.ackFeed(layout, plan.worldSize(), job.generation.firstStep()),
                        job.generation.stamp,
                        job.source.prefetchDepth(),
                        job.generation.firstStep());
        StokerPipeline.Outputs outputs = StokerPipeline.build(env, job, gate);
        Manifest manifest = job.manifest();
        JobPlan.OutputSettings out = job.output;
        int sinks = topology.perNodeSinks() ? topology.nodes : 1;
        for (int node = 0; node < sinks; node++) {
            BatchOutput output =
                    new BatchOutput(
                            layout,
                            manifest,
                            job.generation.firstStep(),
                            out.vision(),
                            job.tokenize.padTokenId(),
                            out.pixelDtype(),
                            ModelPreset.fromKey(out.modelPreset()).videoTime(),
                            ModelPreset.fromKey(out.modelPreset()).tokensPerSecond(),
                            topology.nodeAcks(node));
            DataStreamSink<?> sink =
                    out.packing()
                            ? outputs.packedOfNode(node)
                                    .sinkTo(new PackedBatchSink(output, out.packingMaxTokens()))
                            : outputs.slotsOfNode(node).sinkTo(new ArrowBatchSink(output, plan));
            sink.name(topology.sinkName(node)).uid(topology.sinkName(node));
            if (topology.perNodeSinks()) {
                // one subtask per rank of the node
                sink.setParallelism(topology.ranksPerNode);
            }
            if (topology.edgeGroup(node) != null) {
                sink.slotSharingGroup(topology.edgeGroup(node));
            }
        }
        outputs.deadLetters
                .sinkTo(DeadLetterSinks.jsonl(out.deadLetterDir()))
                .name("dead-letter-sink")
                .uid("dead-letter-sink");
        return new Planned(plan, mixture.order, job.generation.firstStep());
    }

    /**
     * What a built job will produce: its plan, the mixture's order and the first step of its
     * generation.
     */
    public static final class Planned {
        public final BatchPlan plan;
        public final MixtureOrder order;
        public final long firstStep;

        Planned(BatchPlan plan, MixtureOrder order, long firstStep) {
            this.plan = plan;
            this.order = order;
            this.firstStep = firstStep;
        }
    }
}
