package dev.stoker.connectors.shm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.OptionalLong;

/** Reads the trainer's progress from the readers' {@code ack.json} files. */
public final class Acks {
    private static final ObjectMapper JSON = new ObjectMapper();

    private Acks() {}

    /**
     * The last step rank {@code rank}'s reader acknowledged in this generation, or {@code firstStep
     * - 1} when it has not acknowledged any (or the file is unreadable mid-rename).
     */
    public static long consumedStep(ShmLayout layout, int rank, long firstStep) {
        return consumedStep(layout.ackFile(rank), firstStep - 1);
    }

    /** The {@code consumed_step} of an ack file, or {@code fallback}. */
    public static long consumedStep(Path ack, long fallback) {
        try {
            JsonNode node = JSON.readTree(Files.readAllBytes(ack));
            return node.path("consumed_step").asLong(fallback);
        } catch (NoSuchFileException e) {
            return fallback;
        } catch (IOException e) {
            // a concurrent rename can make a read fail; the next read sees the new file
            return fallback;
        }
    }

    /**
     * The last step every rank of the job's current generation acknowledged, from {@code
     * manifest.json} and the ack files under {@code jobDir}; a rank without an ack counts as having
     * consumed nothing of that generation. Empty if there is no readable manifest.
     */
    public static OptionalLong lastStepConsumedByAllRanks(Path jobDir) {
        Path manifest = jobDir.resolve("manifest.json");
        JsonNode node;
        try {
            node = JSON.readTree(Files.readAllBytes(manifest));
        } catch (IOException e) {
            return OptionalLong.empty();
        }
        String generation = node.path("generation").asText("");
        int worldSize = node.path("world_size").asInt(0);
        if (generation.isEmpty() || worldSize < 1) {
            return OptionalLong.empty();
        }
        ShmLayout layout = new ShmLayout(jobDir.toString(), generation);
        long firstStep = node.path("first_step").asLong(0);
        long min = Long.MAX_VALUE;
        for (int rank = 0; rank < worldSize; rank++) {
            min = Math.min(min, consumedStep(layout, rank, firstStep));
        }
        return OptionalLong.of(min);
    }
}
