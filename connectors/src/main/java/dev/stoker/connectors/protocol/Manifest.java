package dev.stoker.connectors.protocol;

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
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Optional;

/**
 * The job-level {@code manifest.json} of the batch protocol: the current generation and the facts a
 * reader needs (world size, steps, first step of the generation), what fixes the batch sequence
 * (dataset fingerprint, seed, W, B, epochs, model preset), which a trainer's checkpointed data
 * state is checked against, and the vision settings the pixels were made with (patch geometry,
 * {@code rescale_factor}, {@code image_mean}/{@code image_std}), which a reader needs to turn
 * {@code pixel_values} back into pictures, or uint8 ones into model inputs, and the packed row size
 * when batches are packed (docs/batch-protocol.md). The field names are listed under {@code
 * "manifest"} in {@code schema/batch-schema.json}.
 */
public final class Manifest implements Serializable {
    private static final long serialVersionUID = 3L;
    private static final ObjectMapper JSON = Json.mapper();

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
                    PACKING_MAX_TOKENS);

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
            Integer packingMaxTokens) {
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
