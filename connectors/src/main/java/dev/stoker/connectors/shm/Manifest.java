package dev.stoker.connectors.shm;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.operators.batch.BatchPlan;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.LinkedHashMap;
import java.util.Map;

/** The job-level {@code manifest.json} of the batch protocol. */
final class Manifest {
    private static final ObjectMapper JSON = new ObjectMapper();

    private final Map<String, Object> fields = new LinkedHashMap<>();

    Manifest(String jobName, BatchPlan plan, int patchDim) {
        fields.put("format_version", BatchSchema.FORMAT_VERSION);
        fields.put("job_name", jobName);
        fields.put("world_size", plan.worldSize());
        fields.put("micro_batch_size", plan.microBatchSize());
        fields.put("num_records", plan.numRecords());
        fields.put("num_steps", plan.numSteps());
        fields.put("patch_dim", patchDim);
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
