package dev.stoker.connectors.protocol;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.operators.json.Json;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Optional;
import java.util.OptionalDouble;
import java.util.OptionalLong;

/**
 * A rank's acknowledgement {@code gen-<generation>/rank-<r>/ack.json}, written by the Python reader
 * (atomic rename) and read by the job: the source's prefetch gate, the sink's skip of consumed
 * steps and its trainer gauges, and the planning of a resubmitted job. The one place the job parses
 * the file; the field names are listed under {@code "ack"} in {@code schema/batch-schema.json}.
 *
 * @param consumedStep {@code consumed_step}: the last step the trainer is done with (or skipped)
 * @param dataWaitS {@code data_wait_s}: seconds the trainer waited for data so far, if written
 * @param elapsedS {@code elapsed_s}: seconds since the reader's first request, if written
 * @param waitTimeRatio {@code wait_time_ratio}: {@code data_wait_s / elapsed_s} capped at 1, if
 *     written
 */
public record Ack(
        long consumedStep,
        OptionalDouble dataWaitS,
        OptionalDouble elapsedS,
        OptionalDouble waitTimeRatio) {

    public static final String CONSUMED_STEP = "consumed_step";
    public static final String DATA_WAIT_S = "data_wait_s";
    public static final String ELAPSED_S = "elapsed_s";
    public static final String WAIT_TIME_RATIO = "wait_time_ratio";

    /** Every field of {@code ack.json}, in the order the reader writes them. */
    public static final List<String> FIELDS =
            List.of(CONSUMED_STEP, DATA_WAIT_S, ELAPSED_S, WAIT_TIME_RATIO);

    private static final ObjectMapper JSON = Json.mapper();

    /**
     * The ack in {@code file}, or empty when it is missing, unreadable (a concurrent rename can
     * make one read fail; the next sees the new file), not JSON or without an integer {@code
     * consumed_step}.
     */
    public static Optional<Ack> read(Path file) {
        JsonNode node;
        try {
            node = JSON.readTree(Files.readAllBytes(file));
        } catch (IOException e) {
            return Optional.empty();
        }
        if (node == null || !node.path(CONSUMED_STEP).canConvertToLong()) {
            return Optional.empty();
        }
        return Optional.of(
                new Ack(
                        node.get(CONSUMED_STEP).asLong(),
                        number(node, DATA_WAIT_S),
                        number(node, ELAPSED_S),
                        number(node, WAIT_TIME_RATIO)));
    }

    private static OptionalDouble number(JsonNode node, String field) {
        JsonNode v = node.get(field);
        return v != null && v.isNumber() ? OptionalDouble.of(v.asDouble()) : OptionalDouble.empty();
    }

    /**
     * The trainer's data-wait ratio in [0, 1]: {@code wait_time_ratio}, else {@code data_wait_s /
     * elapsed_s} (capped at 1) when both are there and {@code elapsed_s > 0}, else empty.
     */
    public OptionalDouble ratio() {
        if (waitTimeRatio.isPresent()) {
            return waitTimeRatio;
        }
        if (dataWaitS.isPresent() && elapsedS.isPresent() && elapsedS.getAsDouble() > 0) {
            return OptionalDouble.of(
                    Math.min(1.0, dataWaitS.getAsDouble() / elapsedS.getAsDouble()));
        }
        return OptionalDouble.empty();
    }

    /**
     * The last step rank {@code rank}'s reader acknowledged in {@code layout}'s generation, or
     * {@code firstStep - 1} when it has acknowledged none (no readable ack).
     */
    public static long consumedStep(ShmLayout layout, int rank, long firstStep) {
        return read(layout.ackFile(rank)).map(Ack::consumedStep).orElse(firstStep - 1);
    }

    /**
     * The last step every rank of the job's current generation acknowledged, from {@code
     * manifest.json} and the ack files under {@code jobDir}; a rank without an ack counts as having
     * consumed nothing of that generation ({@code first_step - 1}). Empty if there is no readable
     * manifest.
     */
    public static OptionalLong lastStepConsumedByAllRanks(Path jobDir) {
        Optional<Manifest.Current> current = Manifest.readCurrent(jobDir);
        if (current.isEmpty()) {
            return OptionalLong.empty();
        }
        Manifest.Current m = current.get();
        ShmLayout layout = new ShmLayout(jobDir.toString(), m.generation());
        long min = Long.MAX_VALUE;
        for (int rank = 0; rank < m.worldSize(); rank++) {
            min = Math.min(min, consumedStep(layout, rank, m.firstStep()));
        }
        return OptionalLong.of(min);
    }
}
