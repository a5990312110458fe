package dev.stoker.job;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.LongSupplier;
import java.util.stream.Stream;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowFileReader;
import org.apache.arrow.vector.util.ByteArrayReadableSeekableByteChannel;

/**
 * Test helper: a simulated trainer that consumes one job directory the way the Python reader does
 * ({@code docs/batch-protocol.md}): one thread per DP rank waits for {@code step-<s>.arrow} of the
 * manifest's current generation, records (step, rank, sha256 of the file, its videos), writes
 * {@code ack.json} and unlinks the file, then "trains" for the step time. It follows a new
 * generation when the manifest changes. It also records the most batch files a rank ever had in
 * shared memory, and how long each step waited for its batch and trained ({@link #timings}).
 */
final class TrainerSim implements AutoCloseable {
    private static final ObjectMapper JSON = new ObjectMapper();

    /**
     * One consumed batch: its step and rank, the sha256 of its file and how many videos it holds
     * (entries of {@code video_grid_thw} over its rows).
     */
    record Consumed(long step, int rank, String sha256, int videos) {}

    /**
     * One step of one rank: from the end of the previous step (or the start) to its batch being
     * read ({@code waitedNanos}), then its training time ({@code trainedNanos}), ending at {@code
     * endNanos} ({@link System#nanoTime}). The wait-time ratio is waited / (waited + trained).
     */
    record Timing(long step, int rank, long waitedNanos, long trainedNanos, long endNanos) {}

    private final Path jobDir;
    private final List<Thread> threads = new ArrayList<>();
    private final List<Consumed> consumed = new ArrayList<>();
    private final List<Timing> timings = new ArrayList<>();
    private final AtomicReference<Throwable> failure = new AtomicReference<>();
    private final AtomicInteger maxFilesPerRank = new AtomicInteger();
    private final AtomicLong stepsDone = new AtomicLong();
    private volatile boolean stopped;

    /**
     * Starts consuming steps {@code firstStep .. lastStep} (inclusive) for ranks {@code 0 ..
     * worldSize-1}, sleeping {@code stepMillis} per step.
     */
    TrainerSim(Path jobDir, int worldSize, long firstStep, long lastStep, long stepMillis) {
        this(jobDir, worldSize, firstStep, lastStep, () -> stepMillis);
    }

    /**
     * As above, with each step's training time read from {@code stepMillis} when the step starts
     * training (a trainer whose demand changes while it runs).
     */
    TrainerSim(Path jobDir, int worldSize, long firstStep, long lastStep, LongSupplier stepMillis) {
        this.jobDir = jobDir;
        for (int rank = 0; rank < worldSize; rank++) {
            int r = rank;
            Thread t =
                    new Thread(() -> consume(r, firstStep, lastStep, stepMillis), "trainer-" + r);
            t.setDaemon(true);
            threads.add(t);
            t.start();
        }
    }

    private void consume(int rank, long firstStep, long lastStep, LongSupplier stepMillis) {
        try {
            String generation = null;
            for (long step = firstStep; step <= lastStep && !stopped; step++) {
                long waitStart = System.nanoTime();
                Path file = null;
                byte[] bytes = null;
                while (!stopped) {
                    String now = currentGeneration();
                    if (now != null && !now.equals(generation)) {
                        generation = now;
                        if (step > firstStep) {
                            ack(rank, generation, step - 1); // tell the new generation our step
                        }
                    }
                    if (generation != null) {
                        Path rankDir = jobDir.resolve("gen-" + generation).resolve("rank-" + rank);
                        countFiles(rankDir);
                        Path candidate = rankDir.resolve(String.format("step-%010d.arrow", step));
                        try {
                            bytes = Files.readAllBytes(candidate);
                            file = candidate;
                            break;
                        } catch (NoSuchFileException notYet) {
                            // not written yet, or its generation was just removed by a new one
                        }
                    }
                    Thread.sleep(2);
                }
                if (file == null) {
                    return;
                }
                long read = System.nanoTime();
                synchronized (consumed) {
                    consumed.add(new Consumed(step, rank, sha256(bytes), videos(bytes)));
                }
                long millis = stepMillis.getAsLong();
                if (millis > 0) {
                    Thread.sleep(millis);
                }
                long end = System.nanoTime();
                synchronized (timings) {
                    timings.add(new Timing(step, rank, read - waitStart, end - read, end));
                }
                try {
                    ack(rank, generation, step);
                } catch (NoSuchFileException generationRemoved) {
                    // a new generation replaced this one; the switch above acks there
                }
                Files.deleteIfExists(file);
                stepsDone.incrementAndGet();
            }
        } catch (Throwable t) {
            failure.compareAndSet(null, t);
        }
    }

    private void countFiles(Path rankDir) throws IOException {
        if (!Files.isDirectory(rankDir)) {
            return;
        }
        try (Stream<Path> files = Files.list(rankDir)) {
            int n =
                    (int)
                            files.filter(
                                            p -> {
                                                String name = p.getFileName().toString();
                                                return name.startsWith("step-")
                                                        && name.endsWith(".arrow");
                                            })
                                    .count();
            maxFilesPerRank.accumulateAndGet(n, Math::max);
        } catch (NoSuchFileException | java.io.UncheckedIOException e) {
            // the directory was replaced by a new generation
        }
    }

    private String currentGeneration() {
        try {
            JsonNode manifest = JSON.readTree(Files.readAllBytes(jobDir.resolve("manifest.json")));
            return manifest.get("generation").asText();
        } catch (IOException e) {
            return null;
        }
    }

    private void ack(int rank, String generation, long step) throws IOException {
        Path rankDir = jobDir.resolve("gen-" + generation).resolve("rank-" + rank);
        Files.createDirectories(rankDir);
        Path tmp = rankDir.resolve(".ack.json.tmp");
        Files.writeString(tmp, "{\"consumed_step\": " + step + "}");
        Files.move(tmp, rankDir.resolve("ack.json"), StandardCopyOption.ATOMIC_MOVE);
    }

    private static int videos(byte[] batch) throws IOException {
        int videos = 0;
        try (RootAllocator allocator = new RootAllocator();
                ArrowFileReader reader =
                        new ArrowFileReader(
                                new ByteArrayReadableSeekableByteChannel(batch), allocator)) {
            while (reader.loadNextBatch()) {
                VectorSchemaRoot root = reader.getVectorSchemaRoot();
                FieldVector grids = root.getVector("video_grid_thw");
                for (int r = 0; grids != null && r < root.getRowCount(); r++) {
                    videos += ((List<?>) grids.getObject(r)).size();
                }
            }
        }
        return videos;
    }

    private static String sha256(byte[] bytes) throws NoSuchAlgorithmException {
        return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes));
    }

    /** Steps consumed so far over all ranks. */
    long stepsDone() {
        return stepsDone.get();
    }

    /** Each step's wait and training time so far, in the order the steps ended. */
    List<Timing> timings() {
        synchronized (timings) {
            return new ArrayList<>(timings);
        }
    }

    /** Most batch files any rank had in shared memory at once (seen while polling). */
    int maxFilesPerRank() {
        return maxFilesPerRank.get();
    }

    /** Waits for every rank to finish its steps; rethrows a consumer failure. */
    List<Consumed> await(long timeoutMillis) throws Exception {
        long deadline = System.currentTimeMillis() + timeoutMillis;
        for (Thread t : threads) {
            t.join(Math.max(1, deadline - System.currentTimeMillis()));
            if (t.isAlive()) {
                throw new AssertionError(t.getName() + " did not finish; consumed " + consumed());
            }
        }
        if (failure.get() != null) {
            throw new AssertionError("trainer failed", failure.get());
        }
        return consumed();
    }

    /** What was consumed so far, sorted by (step, rank). */
    List<Consumed> consumed() {
        synchronized (consumed) {
            List<Consumed> out = new ArrayList<>(consumed);
            out.sort((a, b) -> a.step != b.step ? Long.compare(a.step, b.step) : a.rank - b.rank);
            return out;
        }
    }

    @Override
    public void close() throws InterruptedException {
        stopped = true;
        for (Thread t : threads) {
            t.join(5000);
        }
    }
}
