package dev.stoker.connectors.fetch;

import static org.assertj.core.api.Assertions.assertThat;

import dev.stoker.operators.metrics.MetricNames;
import dev.stoker.operators.model.ChatMessage;
import dev.stoker.operators.model.DeadLetter;
import dev.stoker.operators.model.FetchedRecord;
import dev.stoker.operators.model.ImageRef;
import dev.stoker.operators.model.PerSource;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.VideoRef;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Random;
import java.util.stream.Stream;
import org.apache.flink.types.Either;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The fetch stage's spill files outside S3 ({@link ImageFetchFunction}, {@link ImageStore}) and the
 * lifecycle of a subtask's {@link SpillDirectory}; the S3 path: {@code VideoSpillITCase}.
 */
class VideoSpillTest {
    private static final int THRESHOLD = 1000;

    @TempDir Path root;
    @TempDir Path spill;

    private SpillSettings settings() {
        return new SpillSettings(THRESHOLD, spill.toString());
    }

    @Test
    void aLocalVideoOverTheThresholdIsCopiedToASpillFileAndGoesOnClose() throws Exception {
        byte[] big = new byte[THRESHOLD + 1];
        new Random(36).nextBytes(big);
        Files.write(root.resolve("big.mp4"), big);
        Files.write(root.resolve("small.mp4"), new byte[] {4, 5, 6});
        ImageFetchFunction fetch =
                new ImageFetchFunction(
                        PerSource.uniform(new ImageStore(root.toUri().toString(), 100, 1 << 20)),
                        2,
                        Duration.ofSeconds(30),
                        settings());
        FetchFunctionContext context = new FetchFunctionContext(0, 3);
        context.open(fetch);
        Path directory;
        try {
            Either<DeadLetter, FetchedRecord> out =
                    FetchFunctionContext.fetch(fetch, record("small.mp4", "big.mp4"));
            assertThat(out.isRight()).as("%s", out).isTrue();
            FetchedRecord fetched = out.right();
            assertThat(fetched.videoBytes[0]).containsExactly(4, 5, 6);
            assertThat(fetched.videoFile(0)).isNull();
            assertThat(fetched.videoBytes[1]).isNull();
            Path file = Path.of(fetched.videoFile(1));
            assertThat(file).hasBinaryContent(big);
            directory = file.getParent();
            assertThat(directory.getFileName().toString())
                    .isEqualTo("stoker-video-spill-" + context.job + "-subtask-0-attempt-3");
            assertThat(context.counter(MetricNames.Fetch.VIDEOS_FETCHED)).isEqualTo(2);
            assertThat(context.counter(MetricNames.Fetch.VIDEO_BYTES_FETCHED))
                    .isEqualTo(big.length + 3);

            // a record whose second video is missing: the first one's spill file is deleted
            out = FetchFunctionContext.fetch(fetch, record("big.mp4", "none.mp4"));
            assertThat(out.left().reason).isEqualTo(RejectReason.VIDEO_NOT_FOUND);
            try (Stream<Path> files = Files.list(directory)) {
                assertThat(files).containsExactly(file);
            }
        } finally {
            fetch.close();
        }
        assertThat(directory).doesNotExist();
        assertThat(spill).isEmptyDirectory();
    }

    @Test
    void aSubtaskDeletesTheDirectoriesOfItsEarlierAttemptsOnly() throws Exception {
        String job = "0123456789abcdef0123456789abcdef";
        Path earlier = spill.resolve(SpillDirectory.PREFIX + job + "-subtask-1-attempt-0");
        Path sameAttempt = spill.resolve(SpillDirectory.PREFIX + job + "-subtask-1-attempt-2");
        Path otherSubtask = spill.resolve(SpillDirectory.PREFIX + job + "-subtask-11-attempt-0");
        Path otherJob =
                spill.resolve(
                        SpillDirectory.PREFIX
                                + "fedcba9876543210fedcba9876543210-subtask-1-attempt-0");
        for (Path dir : new Path[] {earlier, sameAttempt, otherSubtask, otherJob}) {
            Files.createDirectories(dir.resolve("nested"));
            Files.write(dir.resolve("nested/video-1"), new byte[] {1});
        }

        try (SpillDirectory directory = SpillDirectory.create(settings(), job, 1, 2)) {
            assertThat(directory.path()).isEqualTo(sameAttempt.toAbsolutePath());
            assertThat(directory.path()).isEmptyDirectory();
            assertThat(earlier).doesNotExist();
            assertThat(otherSubtask.resolve("nested/video-1")).exists();
            assertThat(otherJob.resolve("nested/video-1")).exists();
            assertThat(directory.spills(THRESHOLD)).isFalse();
            assertThat(directory.spills(THRESHOLD + 1)).isTrue();
            Files.write(directory.newFile(), new byte[] {2});
        }
        assertThat(sameAttempt).doesNotExist();
        assertThat(otherSubtask).exists();
        assertThat(otherJob).exists();
    }

    private static SftRecord record(String... videos) {
        SftRecord record =
                new SftRecord(
                        new RecordRef("train.jsonl", 1, 0, "id-1"),
                        new ChatMessage[0],
                        new ImageRef[0]);
        record.videos =
                Stream.of(videos).map(v -> new VideoRef(v, 0, 0, 0)).toArray(VideoRef[]::new);
        return record;
    }
}
