package dev.stoker.job;

import dev.stoker.connectors.fetch.S3ClientSettings;
import dev.stoker.connectors.fetch.SpillSettings;
import dev.stoker.connectors.fetch.TransientFailurePolicy;
import dev.stoker.connectors.protocol.Manifest;
import dev.stoker.connectors.protocol.PixelDtype;
import dev.stoker.connectors.protocol.ShmLayout;
import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.image.QwenVisionConfig;
import dev.stoker.operators.tokenize.SequenceLengthPolicy;
import dev.stoker.operators.video.VideoSettings;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.IllegalConfigurationException;
import org.apache.flink.configuration.ReadableConfig;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Everything one submission of the job is built from, worked out once from the {@link
 * Configuration} by {@link #of}: the mixture (sources, order, per-source settings), the batch plan,
 * the generation, the topology and the settings of each stage. {@link StokerPipeline} and the sinks
 * ({@link StokerJob#build}) are built from it and do not read the configuration again.
 */
final class JobPlan {
    private static final Logger LOG = LoggerFactory.getLogger(JobPlan.class);

    final String jobName;
    final MixturePlan mixture;
    final BatchPlan batches;
    final Generation generation;
    final Topology topology;
    final SourceSettings source;
    final FetchSettings fetch;

    /** The video stage's settings ({@code stoker.video.*} over the model preset). */
    final VideoSettings video;

    final TokenizeSettings tokenize;
    final OutputSettings output;

    /**
     * The JSONL source's settings.
     *
     * @param maxLineBytes the longest record line read, in bytes ({@code stoker.max-line-length})
     * @param fileCacheBytes the bytes of record indexes and open files a reader keeps ({@code
     *     stoker.source.file-cache-size})
     * @param prefetchDepth batches a rank may have written but not consumed, 0 = unbounded
     */
    record SourceSettings(int maxLineBytes, long fileCacheBytes, int prefetchDepth) {}

    /**
     * The image and video fetch's settings ({@code stoker.fetch.*}, {@code stoker.video.max-bytes},
     * {@code stoker.video.spill-*}).
     *
     * @param maxObjectBytes the largest image read, in bytes
     * @param maxVideoBytes the largest video read, in bytes
     * @param timeout the operator's timeout per record
     * @param capacity records in flight per subtask
     * @param threads reader threads per subtask (images outside S3)
     * @param transientFailures what a record whose fetch keeps failing transiently gets
     * @param s3 the S3 client's settings, {@code null} when no image is read from S3
     * @param spill which videos go to spill files, and where
     */
    record FetchSettings(
            long maxObjectBytes,
            long maxVideoBytes,
            Duration timeout,
            int capacity,
            int threads,
            TransientFailurePolicy transientFailures,
            S3ClientSettings s3,
            SpillSettings spill) {}

    /**
     * The tokenize stage's settings.
     *
     * @param tokenizerPath the tokenizer directory (absolute, the same on every TaskManager)
     * @param maxSeqLenPolicy what a sample longer than its source's maximum sequence length gets
     * @param padTokenId the tokenizer's padding token id, which pads {@code input_ids}
     */
    record TokenizeSettings(
            String tokenizerPath, SequenceLengthPolicy maxSeqLenPolicy, long padTokenId) {}

    /**
     * The sinks' settings.
     *
     * @param jobDir {@code <output-root>/<job-name>}, the job's shared-memory directory
     * @param deadLetterDir where the dead letters are written
     * @param vision the job's vision config (patch geometry and normalisation of the batches)
     * @param modelPreset the {@code stoker.model.preset} key
     * @param pixelDtype the element type of {@code pixel_values}
     * @param packingMaxTokens tokens per packed row, or {@code null} when batches are not packed
     * @param shuffleSeed the seed of the sample order, or {@code null} when it is not shuffled
     * @param earlierStages the plan history of the job directory's previous manifest ({@link
     *     Manifest#readPlanHistory}), of which the manifest keeps the stages before this one
     */
    record OutputSettings(
            String jobDir,
            String deadLetterDir,
            QwenVisionConfig vision,
            String modelPreset,
            PixelDtype pixelDtype,
            Integer packingMaxTokens,
            Long shuffleSeed,
            List<Map<String, Object>> earlierStages) {

        /** Whether batches are packed ({@code stoker.packing.enabled}). */
        boolean packing() {
            return packingMaxTokens != null;
        }
    }

    private JobPlan(
            String jobName,
            MixturePlan mixture,
            BatchPlan batches,
            Generation generation,
            Topology topology,
            SourceSettings source,
            FetchSettings fetch,
            VideoSettings video,
            TokenizeSettings tokenize,
            OutputSettings output) {
        this.jobName = jobName;
        this.mixture = mixture;
        this.batches = batches;
        this.generation = generation;
        this.topology = topology;
        this.source = source;
        this.fetch = fetch;
        this.video = video;
        this.tokenize = tokenize;
        this.output = output;
    }

    /**
     * Plans the submission: checks the image root, reads the mixture spec and lists its sources
     * ({@link MixturePlan#of}), checks S3 ({@link StartupChecks#checkS3}) and the tokenizer (loaded
     * on another thread meanwhile, {@link StartupChecks#loadTokenizer}), and plans the generation
     * ({@link Generation#plan}).
     *
     * @param conf the job's options, validated ({@link StokerConfig#validate}) and with local paths
     *     made absolute ({@link StartupChecks#absolutizePaths})
     * @param env the execution environment's configuration (a savepoint path set by {@code flink
     *     run -s})
     * @throws IllegalConfigurationException naming the option, spec field or source that does not
     *     work, and why; a {@code stoker.mixture.start-step} after the first step produced, or a
     *     new stage restoring a savepoint
     */
    static JobPlan of(Configuration conf, ReadableConfig env) {
        CompletableFuture<Long> tokenizer = StartupChecks.loadTokenizer(conf);
        StokerConfig.checkImageRoot(conf);
        MixturePlan mixture = MixturePlan.of(conf, MixtureSpec.of(conf));
        S3ClientSettings s3 = null;
        if (mixture.imagesOnS3()) {
            s3 = s3Settings(conf);
            StartupChecks.checkS3(conf, mixture, s3);
        }
        Generation generation = Generation.plan(conf, env);
        List<Map<String, Object>> earlierStages =
                Manifest.readPlanHistory(java.nio.file.Path.of(StokerConfig.jobDir(conf)));
        BatchPlan batches = planBatches(conf, mixture, generation, earlierStages);
        if (batches.startStep() > generation.firstStep()) {
            throw new IllegalConfigurationException(
                    "--"
                            + StokerOptions.MIXTURE_START_STEP.key()
                            + " "
                            + batches.startStep()
                            + " is after the first step this submission produces ("
                            + generation.firstStep()
                            + " = the resume step + 1): a mixture takes over at a resume, so also"
                            + " pass --"
                            + StokerOptions.RESUME_STEP.key()
                            + " "
                            + (batches.startStep() - 1)
                            + " (the last step the trainer consumed of the previous stage)");
        }
        if (batches.startStep() > 0
                && batches.startStep() == generation.firstStep()
                && generation.fromSavepoint) {
            throw new IllegalConfigurationException(
                    "This submission starts a new stage at its first step "
                            + batches.startStep()
                            + " (--"
                            + StokerOptions.MIXTURE_START_STEP.key()
                            + ", or a "
                            + StokerOptions.DP_WORLD_SIZE.key()
                            + " or "
                            + StokerOptions.MICRO_BATCH_SIZE.key()
                            + " other than the previous stage's), but it restores a savepoint: the"
                            + " records in flight there are planned for the previous stage's"
                            + " batches. Submit the new stage without the savepoint (flink run"
                            + " without -s); it starts from nothing");
        }
        checkContinues(earlierStages, batches, generation, mixture);
        Integer packingMaxTokens =
                conf.get(StokerOptions.PACKING_ENABLED)
                        ? StokerConfig.packingMaxTokens(conf, mixture.longestMaxSeqLen())
                        : null;
        return new JobPlan(
                conf.get(StokerOptions.JOB_NAME),
                mixture,
                batches,
                generation,
                Topology.of(conf),
                new SourceSettings(
                        (int) conf.get(StokerOptions.MAX_LINE_LENGTH).getBytes(),
                        conf.get(StokerOptions.FILE_CACHE_SIZE).getBytes(),
                        conf.get(StokerOptions.PREFETCH_DEPTH)),
                new FetchSettings(
                        conf.get(StokerOptions.MAX_OBJECT_SIZE).getBytes(),
                        conf.get(StokerOptions.VIDEO_MAX_BYTES).getBytes(),
                        conf.get(StokerOptions.FETCH_TIMEOUT),
                        conf.get(StokerOptions.FETCH_CAPACITY),
                        conf.get(StokerOptions.FETCH_THREADS),
                        conf.get(StokerOptions.FETCH_TRANSIENT_FAILURES),
                        s3,
                        new SpillSettings(
                                conf.get(StokerOptions.VIDEO_SPILL_THRESHOLD).getBytes(),
                                conf.getOptional(StokerOptions.VIDEO_SPILL_DIR)
                                        .map(StokerConfig::spillDirectory)
                                        .orElse(null))),
                ModelOptions.videoSettings(conf),
                new TokenizeSettings(
                        conf.get(StokerOptions.TOKENIZER_PATH),
                        conf.get(StokerOptions.MAX_SEQ_LEN_POLICY),
                        StartupChecks.tokenizerPadId(tokenizer)),
                new OutputSettings(
                        StokerConfig.jobDir(conf),
                        StokerConfig.deadLetterDir(conf),
                        ModelOptions.visionConfig(conf),
                        ModelOptions.preset(conf).key(),
                        conf.get(StokerOptions.PIXEL_DTYPE),
                        packingMaxTokens,
                        conf.get(StokerOptions.SHUFFLE)
                                ? conf.get(StokerOptions.SHUFFLE_SEED)
                                : null,
                        earlierStages));
    }

    /**
     * The batch plan of this submission ({@link BatchPlan}: the mixture's records per epoch, {@code
     * stoker.dp-world-size}, {@code stoker.micro-batch-size}, {@code stoker.epochs}, and the
     * stage's start step and start position), where the stage is
     *
     * <ul>
     *   <li>the one {@code stoker.mixture.start-step} (and {@code stoker.mixture.start-position})
     *       state, when set;
     *   <li>otherwise, when the job directory's plan history names a stage of the same mixture
     *       (fingerprint) for the step before this submission's first: that stage when its world
     *       size and micro-batch size are this submission's, or else a new stage from the first
     *       step that goes on at the record after the last one the trainer consumed ({@link
     *       BatchPlan#positionAt}: an elastic resume);
     *   <li>otherwise one from step 0 and position 0.
     * </ul>
     *
     * @throws IllegalConfigurationException a {@code stoker.mixture.start-position} other than the
     *     one the history gives for a new world size or micro-batch size, or past the run's records
     */
    private static BatchPlan planBatches(
            Configuration conf,
            MixturePlan mixture,
            Generation generation,
            List<Map<String, Object>> history) {
        long records = mixture.order.recordsPerEpoch();
        int worldSize = conf.get(StokerOptions.DP_WORLD_SIZE);
        int microBatchSize = conf.get(StokerOptions.MICRO_BATCH_SIZE);
        int epochs = conf.get(StokerOptions.EPOCHS);
        long first = generation.firstStep();
        Map<String, Object> previous = stageBefore(history, first);
        boolean sameMixture =
                previous != null
                        && mixture.fingerprint.equals(previous.get(Manifest.DATASET_FINGERPRINT));
        Long consumed = null; // the record after the trainer's last, for a new W or B
        if (sameMixture
                && (worldSize != number(previous, Manifest.WORLD_SIZE)
                        || microBatchSize != number(previous, Manifest.MICRO_BATCH_SIZE))) {
            consumed = planOf(previous).positionAt(first);
        }
        long start = conf.get(StokerOptions.MIXTURE_START_STEP);
        long position = conf.get(StokerOptions.MIXTURE_START_POSITION);
        if (!conf.contains(StokerOptions.MIXTURE_START_STEP)) {
            if (consumed != null) {
                start = first;
                position =
                        conf.contains(StokerOptions.MIXTURE_START_POSITION) ? position : consumed;
            } else if (sameMixture) {
                start = number(previous, Manifest.MIXTURE_START_STEP);
                position =
                        conf.contains(StokerOptions.MIXTURE_START_POSITION)
                                ? position
                                : number(previous, Manifest.MIXTURE_START_POSITION);
            }
        }
        if (consumed != null && start == first && position != 0 && position != consumed) {
            throw new IllegalConfigurationException(
                    "--"
                            + StokerOptions.MIXTURE_START_POSITION.key()
                            + " "
                            + position
                            + " is not where the trainer stopped: through step "
                            + (first - 1)
                            + " the previous stage ("
                            + number(previous, Manifest.WORLD_SIZE)
                            + " ranks x "
                            + number(previous, Manifest.MICRO_BATCH_SIZE)
                            + " samples, the job directory's manifest.json) gave it the records"
                            + " before position "
                            + consumed
                            + " of the mixture's order. Pass --"
                            + StokerOptions.MIXTURE_START_POSITION.key()
                            + " "
                            + consumed
                            + " or leave it out");
        }
        if (position > epochs * records) {
            throw new IllegalConfigurationException(
                    "--"
                            + StokerOptions.MIXTURE_START_POSITION.key()
                            + " "
                            + position
                            + " is past the run's "
                            + epochs * records
                            + " records ("
                            + epochs
                            + " epoch(s) of "
                            + records
                            + ")");
        }
        BatchPlan plan = new BatchPlan(records, worldSize, microBatchSize, epochs, start, position);
        if (consumed != null && start == first) {
            LOG.info(
                    "Resuming at step {} with {} ranks x {} samples per step (the previous stage:"
                            + " {} x {}): a new stage goes on at epoch {}, position {} of the"
                            + " mixture's order ({} records consumed): {}",
                    first,
                    worldSize,
                    microBatchSize,
                    number(previous, Manifest.WORLD_SIZE),
                    number(previous, Manifest.MICRO_BATCH_SIZE),
                    plan.firstEpoch(),
                    plan.firstEpochPosition(),
                    position,
                    plan);
        }
        return plan;
    }

    /** The stage of {@code history} that produced step {@code first - 1}, or {@code null}. */
    private static Map<String, Object> stageBefore(List<Map<String, Object>> history, long first) {
        Map<String, Object> previous = null;
        for (Map<String, Object> stage : history) {
            if (number(stage, Manifest.MIXTURE_START_STEP) < first) {
                previous = stage;
            }
        }
        return previous;
    }

    /** The batch plan a {@link Manifest#PLAN_HISTORY} entry describes. */
    private static BatchPlan planOf(Map<String, Object> stage) {
        return new BatchPlan(
                number(stage, Manifest.NUM_RECORDS),
                (int) number(stage, Manifest.WORLD_SIZE),
                (int) number(stage, Manifest.MICRO_BATCH_SIZE),
                (int) number(stage, Manifest.EPOCHS),
                number(stage, Manifest.MIXTURE_START_STEP),
                number(stage, Manifest.MIXTURE_START_POSITION));
    }

    private static long number(Map<String, Object> stage, String field) {
        return ((Number) stage.get(field)).longValue();
    }

    /**
     * Refuses an implicit change of the mixture at a resume: when this submission continues a stage
     * (its start step is before its first step), the stage the previous manifest's history has for
     * the step before must be this one (same start step, start position and fingerprint).
     *
     * @throws IllegalConfigurationException naming that stage and what to pass instead
     */
    private static void checkContinues(
            List<Map<String, Object>> history,
            BatchPlan batches,
            Generation generation,
            MixturePlan mixture) {
        long first = generation.firstStep();
        if (first == 0 || batches.startStep() == first) {
            return;
        }
        Map<String, Object> previous = stageBefore(history, first);
        if (previous == null) {
            return;
        }
        long start = number(previous, Manifest.MIXTURE_START_STEP);
        long position = number(previous, Manifest.MIXTURE_START_POSITION);
        if (start != batches.startStep()
                || position != batches.startPosition()
                || !mixture.fingerprint.equals(previous.get(Manifest.DATASET_FINGERPRINT))) {
            throw new IllegalConfigurationException(
                    "Step "
                            + (first - 1)
                            + " was produced by the stage of mixture "
                            + previous.get(Manifest.MIXTURE)
                            + " ("
                            + previous.get(Manifest.DATASET_FINGERPRINT)
                            + ") starting at step "
                            + start
                            + (position == 0 ? "" : " from position " + position)
                            + " (the job directory's manifest.json), but this submission's is "
                            + mixture.spec.location
                            + " ("
                            + mixture.fingerprint
                            + ") starting at step "
                            + batches.startStep()
                            + (batches.startPosition() == 0
                                    ? ""
                                    : " from position " + batches.startPosition())
                            + ". To continue that stage pass its spec and --"
                            + StokerOptions.MIXTURE_START_STEP.key()
                            + " "
                            + start
                            + (position == 0
                                    ? ""
                                    : " --"
                                            + StokerOptions.MIXTURE_START_POSITION.key()
                                            + " "
                                            + position)
                            + "; to change the mixture at this resume pass --"
                            + StokerOptions.MIXTURE_START_STEP.key()
                            + " "
                            + first);
        }
    }

    /** This generation's shared-memory layout under the job directory. */
    ShmLayout layout() {
        return new ShmLayout(output.jobDir, generation.stamp);
    }

    /** The {@code manifest.json} the sinks write for this generation. */
    Manifest manifest() {
        return new Manifest(
                jobName,
                generation.stamp,
                batches,
                generation.firstStep(),
                output.shuffleSeed,
                output.vision,
                mixture.fingerprint,
                output.modelPreset,
                output.packingMaxTokens,
                mixture.spec.location,
                output.earlierStages);
    }

    /**
     * The S3 client settings of the image fetch, from the {@code stoker.s3.*} options: unless set,
     * the request timeout stays within 90% of {@code stoker.fetch.timeout} (so the client gives up
     * and frees the connection before the operator does), and an attempt never outlasts the
     * request.
     */
    static S3ClientSettings s3Settings(Configuration conf) {
        Duration request = conf.get(StokerOptions.S3_REQUEST_TIMEOUT);
        if (!conf.contains(StokerOptions.S3_REQUEST_TIMEOUT)) {
            Duration limit = conf.get(StokerOptions.FETCH_TIMEOUT).multipliedBy(9).dividedBy(10);
            request = request.compareTo(limit) < 0 ? request : limit;
        }
        Duration attempt = conf.get(StokerOptions.S3_ATTEMPT_TIMEOUT);
        return S3ClientSettings.builder()
                .endpoint(conf.get(StokerOptions.S3_ENDPOINT))
                .region(conf.get(StokerOptions.S3_REGION))
                .pathStyleAccess(conf.get(StokerOptions.S3_PATH_STYLE_ACCESS))
                .credentials(
                        conf.get(StokerOptions.S3_ACCESS_KEY),
                        conf.get(StokerOptions.S3_SECRET_KEY))
                .maxConnections(conf.get(StokerOptions.S3_MAX_CONNECTIONS))
                .maxAttempts(conf.get(StokerOptions.S3_MAX_ATTEMPTS))
                .requestTimeout(request)
                .readTimeout(conf.get(StokerOptions.S3_READ_TIMEOUT))
                .attemptTimeout(attempt.compareTo(request) < 0 ? attempt : request)
                .retryBaseDelay(conf.get(StokerOptions.S3_RETRY_BASE_DELAY))
                .retryMaxDelay(conf.get(StokerOptions.S3_RETRY_MAX_DELAY))
                .getsPerSecondPerPrefix(conf.get(StokerOptions.S3_GETS_PER_SECOND_PER_PREFIX))
                .hedgeAfter(conf.get(StokerOptions.S3_HEDGE_AFTER))
                .build();
    }
}
