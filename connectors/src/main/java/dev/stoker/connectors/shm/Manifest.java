package dev.stoker.connectors.shm;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.operators.batch.BatchPlan;
import java.io.IOException;
import java.io.Serializable;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.LinkedHashMap;

/**
 * The job-level {@code manifest.json} of the batch protocol: the current generation and the facts a
 * reader needs (world size, steps, first step of the generation), and what fixes the batch sequence
 * (dataset fingerprint, seed, W, B, epochs, model preset), which a trainer's checkpointed data
 * state is checked against (docs/batch-protocol.md).
 */
public final class Manifest implements Serializable {
    private static final long serialVersionUID = 2L;
    private static final ObjectMapper JSON = new ObjectMapper();

    private final LinkedHashMap<String, Object> fields = new LinkedHashMap<>();

    /**
     * @param firstStep the first step this generation produces (resume step + 1)
     * @param seed the shuffle seed, or {@code null} when the order is not shuffled
     * @param patchDim D, values per {@code pixel_values} row
     * @param datasetFingerprint the dataset listing's fingerprint ({@code
     *     DatasetListing.fingerprint()}, {@code "sha256:<hex>"})
     * @param modelPreset the {@code stoker.model.preset} key, e.g. {@code "qwen2-vl"}
     */
    public Manifest(
            String jobName,
            String generation,
            BatchPlan plan,
            long firstStep,
            Long seed,
            int patchDim,
            String datasetFingerprint,
            String modelPreset) {
        fields.put("format_version", BatchSchema.FORMAT_VERSION);
        fields.put("job_name", jobName);
        fields.put("generation", generation);
        fields.put("world_size", plan.worldSize());
        fields.put("micro_batch_size", plan.microBatchSize());
        fields.put("num_records", plan.numRecords());
        fields.put("epochs", plan.epochs());
        fields.put("steps_per_epoch", plan.stepsPerEpoch());
        fields.put("num_steps", plan.numSteps());
        fields.put("first_step", firstStep);
        fields.put("shuffle_seed", seed);
        fields.put("patch_dim", patchDim);
        fields.put("dataset_fingerprint", datasetFingerprint);
        fields.put("model_preset", modelPreset);
    }

    /** Writes the manifest atomically (temporary file, then rename); idempotent across subtasks. */
    void writeTo(ShmLayout layout) throws IOException {
        Path target = layout.manifest();
        Path tmp =
                target.resolveSibling(
                        ".manifest.json."
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
}
