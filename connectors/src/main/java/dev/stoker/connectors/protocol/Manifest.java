package dev.stoker.connectors.protocol;

import com.fasterxml.jackson.databind.JavaType;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.image.QwenVisionConfig;
import dev.stoker.operators.json.Json;
import java.io.IOException;
import java.io.Serializable;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * The job-level {@code manifest.json} of the batch protocol: the current generation and the facts a
 * reader needs (world size, steps, first step of the generation), what fixes the batch sequence
 * (dataset fingerprint, seed, W, B, epochs, model preset), which a trainer's checkpointed data
 * state is checked against, and the vision settings the pixels were made with (patch geometry,
 * {@code rescale_factor}, {@code image_mean}/{@code image_std}), which a reader needs to turn
 * {@code pixel_values} back into pictures, or uint8 ones into model inputs, the packed row size
 * when batches are packed, and the run's stages so far: the step this stage's mixture starts at,
 * the position in the mixture's sample order it starts from, and each stage's mixture and sequence
 * fields (docs/batch-protocol.md). The field names are listed under {@code "manifest"} in {@code
 * schema/batch-schema.json}.
 */
public final class Manifest implements Serializable {
    private static final long serialVersionUID = 5L;
    private static final ObjectMapper JSON = Json.mapper();
    private static final JavaType STAGE =
            JSON.getTypeFactory().constructMapType(LinkedHashMap.class, String.class, Object.class);

    /** File name of the manifest in the job directory. */
    public static final String FILE_NAME = "manifest.json";

    public static final String FORMAT_VERSION = "format_version";
    public static final String JOB_NAME = "job_name";
    public static final String GENERATION = "generation";
    public static final String WORLD_SIZE = "world_size";
    public static final String MICRO_BATCH_SIZE = "micro_batch_size";
    public static final String NUM_RECORDS = "num_records";
    public static final String EPOCHS = "epochs";
    public static final String STEPS_PER_EPOCH = "steps_per_epoch";
    public static final String NUM_STEPS = "num_steps";
    public static final String FIRST_STEP = "first_step";
    public static final String SHUFFLE_SEED = "shuffle_seed";
    public static final String PATCH_DIM = "patch_dim";
    public static final String DATASET_FINGERPRINT = "dataset_fingerprint";
    public static final String MODEL_PRESET = "model_preset";
    public static final String PATCH_SIZE = "patch_size";
    public static final String TEMPORAL_PATCH_SIZE = "temporal_patch_size";
    public static final String MERGE_SIZE = "merge_size";
    public static final String RESCALE_FACTOR = "rescale_factor";
    public static final String IMAGE_MEAN = "image_mean";
    public static final String IMAGE_STD = "image_std";
    public static final String PACKING_MAX_TOKENS = "packing_max_tokens";
    public static final String MIXTURE_START_STEP = "mixture_start_step";
    public static final String MIXTURE_START_POSITION = "mixture_start_position";
    public static final String PLAN_HISTORY = "plan_history";

    /** Key of a {@link #PLAN_HISTORY} entry naming the stage's mixture spec (or dataset path). */
    public static final String MIXTURE = "mixture";

    /**
     * The fields that fix the batch sequence of a stage of the run (the record of every (step,
     * rank, slot) from its {@code mixture_start_step} on is a function of them): a {@link
     * #PLAN_HISTORY} entry holds them and {@link #MIXTURE}; a trainer's data state is checked
     * against them.
     */
    public static final List<String> SEQUENCE_FIELDS =
            List.of(
                    DATASET_FINGERPRINT,
                    NUM_RECORDS,
                    SHUFFLE_SEED,
                    WORLD_SIZE,
                    MICRO_BATCH_SIZE,
                    EPOCHS,
                    MODEL_PRESET,
                    PACKING_MAX_TOKENS,
                    MIXTURE_START_STEP,
                    MIXTURE_START_POSITION);

    /** Every field, in the order they are written. */
    public static final List<String> FIELDS =
            List.of(
                    FORMAT_VERSION,
                    JOB_NAME,
                    GENERATION,
                    WORLD_SIZE,
                    MICRO_BATCH_SIZE,
                    NUM_RECORDS,
                    EPOCHS,
                    STEPS_PER_EPOCH,
                    NUM_STEPS,
                    FIRST_STEP,
                    SHUFFLE_SEED,
                    PATCH_DIM,
                    DATASET_FINGERPRINT,
                    MODEL_PRESET,
                    PATCH_SIZE,
                    TEMPORAL_PATCH_SIZE,
                    MERGE_SIZE,
                    RESCALE_FACTOR,
                    IMAGE_MEAN,
                    IMAGE_STD,
                    PACKING_MAX_TOKENS,
                    MIXTURE_START_STEP,
                    MIXTURE_START_POSITION,
                    PLAN_HISTORY);

    private final LinkedHashMap<String, Object> fields = new LinkedHashMap<>();

    /**
     * @param firstStep the first step this generation produces (resume step + 1)
     * @param seed the shuffle seed, or {@code null} when the order is not shuffled
     * @param vision the vision settings the sink normalises and patchifies with: {@code patch_dim}
     *     ({@link QwenVisionConfig#patchDim()}), {@code patch_size}, {@code temporal_patch_size},
     *     {@code merge_size}, {@code rescale_factor} ({@link QwenVisionConfig#RESCALE_FACTOR}), and
     *     {@code image_mean}/{@code image_std} (3 values, R, G, B on the 0..1 scale)
     * @param datasetFingerprint the mixture's fingerprint: its spec and each source's listing
     *     ({@code "sha256:<hex>"}, docs/batch-protocol.md)
     * @param modelPreset the {@code stoker.model.preset} key, e.g. {@code "qwen2-vl"}
     * @param packingMaxTokens tokens per packed row, or {@code null} when batches are not packed
     * @param mixture the mixture spec's location (or the dataset path) of this stage
     * @param earlierStages the {@link #PLAN_HISTORY} entries of the stages before this one (from
     *     {@link #readPlanHistory}), oldest first; those starting at or after this plan's {@link
     *     BatchPlan#startStep()} are left out
     */
    public Manifest(
            String jobName,
            String generation,
            BatchPlan plan,
            long firstStep,
            Long seed,
            QwenVisionConfig vision,
            String datasetFingerprint,
            String modelPreset,
            Integer packingMaxTokens,
            String mixture,
            List<Map<String, Object>> earlierStages) {
        fields.put(FORMAT_VERSION, BatchSchema.FORMAT_VERSION);
        fields.put(JOB_NAME, jobName);
        fields.put(GENERATION, generation);
        fields.put(WORLD_SIZE, plan.worldSize());
        fields.put(MICRO_BATCH_SIZE, plan.microBatchSize());
        fields.put(NUM_RECORDS, plan.numRecords());
        fields.put(EPOCHS, plan.epochs());
        fields.put(STEPS_PER_EPOCH, plan.stepsPerEpoch());
        fields.put(NUM_STEPS, plan.numSteps());
        fields.put(FIRST_STEP, firstStep);
        fields.put(SHUFFLE_SEED, seed);
        fields.put(PATCH_DIM, vision.patchDim());
        fields.put(DATASET_FINGERPRINT, datasetFingerprint);
        fields.put(MODEL_PRESET, modelPreset);
        fields.put(PATCH_SIZE, vision.patchSize);
        fields.put(TEMPORAL_PATCH_SIZE, vision.temporalPatchSize);
        fields.put(MERGE_SIZE, vision.mergeSize);
        fields.put(RESCALE_FACTOR, QwenVisionConfig.RESCALE_FACTOR);
        fields.put(IMAGE_MEAN, vision.imageMean.clone());
        fields.put(IMAGE_STD, vision.imageStd.clone());
        fields.put(PACKING_MAX_TOKENS, packingMaxTokens);
        fields.put(MIXTURE_START_STEP, plan.startStep());
        fields.put(MIXTURE_START_POSITION, plan.startPosition());
        List<Map<String, Object>> history = new ArrayList<>();
        for (Map<String, Object> stage : earlierStages) {
            if (((Number) stage.get(MIXTURE_START_STEP)).longValue() < plan.startStep()) {
                history.add(new LinkedHashMap<>(stage));
            }
        }
        LinkedHashMap<String, Object> current = new LinkedHashMap<>();
        current.put(MIXTURE, mixture);
        for (String field : SEQUENCE_FIELDS) {
            current.put(field, fields.get(field));
        }
        history.add(current);
        fields.put(PLAN_HISTORY, history);
    }

    /**
     * Writes the manifest to {@code layout.manifest()} atomically (temporary file with owner-only
     * permissions, then rename); idempotent across sink subtasks.
     *
     * @throws IOException if the file cannot be written or the directory has no atomic rename
     */
    public void writeTo(ShmLayout layout) throws IOException {
        Path target = layout.manifest();
        Path tmp =
                target.resolveSibling(
                        "."
                                + FILE_NAME
                                + "."
                                + ProcessHandle.current().pid()
                                + "."
                                + Thread.currentThread().getId()
                                + ".tmp");
        Files.deleteIfExists(tmp);
        Files.createFile(tmp, ShmLayout.FILE_PERMISSIONS);
        Files.write(
                tmp,
                JSON.writerWithDefaultPrettyPrinter().writeValueAsBytes(fields),
                StandardOpenOption.TRUNCATE_EXISTING,
                StandardOpenOption.WRITE);
        ShmLayout.publish(tmp, target);
    }

    /**
     * The {@link #PLAN_HISTORY} of {@code jobDir/manifest.json} (a previous submission's): its
     * stages, oldest first, each a map of {@link #MIXTURE} and the {@link #SEQUENCE_FIELDS}. Empty
     * when there is no manifest or it cannot be read; a manifest without the field (an older
     * release's) gives one stage made of its own fields, starting at step 0.
     */
    public static List<Map<String, Object>> readPlanHistory(Path jobDir) {
        JsonNode node;
        try {
            node = JSON.readTree(Files.readAllBytes(jobDir.resolve(FILE_NAME)));
        } catch (IOException e) {
            return List.of();
        }
        if (node == null || !node.isObject()) {
            return List.of();
        }
        List<Map<String, Object>> stages = new ArrayList<>();
        if (node.path(PLAN_HISTORY).isArray()) {
            for (JsonNode stage : node.get(PLAN_HISTORY)) {
                if (stage.path(MIXTURE_START_STEP).canConvertToLong()) {
                    Map<String, Object> entry = JSON.convertValue(stage, STAGE);
                    entry.putIfAbsent(MIXTURE_START_POSITION, 0L); // written before elastic stages
                    stages.add(entry);
                }
            }
            return stages;
        }
        LinkedHashMap<String, Object> stage = new LinkedHashMap<>();
        stage.put(MIXTURE, null);
        for (String field : SEQUENCE_FIELDS) {
            stage.put(field, JSON.convertValue(node.get(field), Object.class));
        }
        stage.put(MIXTURE_START_STEP, node.path(MIXTURE_START_STEP).asLong(0));
        stage.put(MIXTURE_START_POSITION, node.path(MIXTURE_START_POSITION).asLong(0));
        stages.add(stage);
        return stages;
    }

    /**
     * What the job needs of a manifest already on disk (a previous submission's).
     *
     * @param generation the generation stamp
     * @param worldSize DP ranks, at least 1
     * @param firstStep the generation's first step
     */
    public record Current(String generation, int worldSize, long firstStep) {}

    /**
     * The generation, world size and first step of {@code jobDir/manifest.json}; empty when there
     * is none, it is not JSON, or its generation stamp or world size is invalid.
     */
    public static Optional<Current> readCurrent(Path jobDir) {
        JsonNode node;
        try {
            node = JSON.readTree(Files.readAllBytes(jobDir.resolve(FILE_NAME)));
        } catch (IOException e) {
            return Optional.empty();
        }
        if (node == null) {
            return Optional.empty();
        }
        String generation = node.path(GENERATION).asText("");
        int worldSize = node.path(WORLD_SIZE).asInt(0);
        if (!ShmLayout.isGenerationStamp(generation) || worldSize < 1) {
            return Optional.empty();
        }
        return Optional.of(new Current(generation, worldSize, node.path(FIRST_STEP).asLong(0)));
    }
}
