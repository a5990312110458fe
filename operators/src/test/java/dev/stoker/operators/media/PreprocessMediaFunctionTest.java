package dev.stoker.operators.media;

import static org.assertj.core.api.Assertions.assertThat;

import dev.stoker.operators.SharedData;
import dev.stoker.operators.model.ChatMessage;
import dev.stoker.operators.model.DeadLetter;
import dev.stoker.operators.model.DeadLetters;
import dev.stoker.operators.model.FetchedRecord;
import dev.stoker.operators.model.ImageRef;
import dev.stoker.operators.model.PerSource;
import dev.stoker.operators.model.PreprocessedRecord;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SampledVideo;
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.VideoRef;
import dev.stoker.operators.parity.GoldenSet;
import dev.stoker.operators.preset.ModelPreset;
import dev.stoker.operators.video.VideoLimits;
import dev.stoker.operators.video.VideoPreprocessor;
import dev.stoker.operators.video.VideoSettings;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.util.OneInputStreamOperatorTestHarness;
import org.apache.flink.streaming.util.ProcessFunctionTestHarnesses;
import org.apache.flink.types.Either;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class PreprocessMediaFunctionTest {
    private static final String IMAGES = "llava-style/images/";

    private static final VideoSettings VIDEO =
            new VideoSettings(
                    ModelPreset.QWEN2_VL.videoConfig(),
                    VideoPreprocessor.FrameRule.QWEN2_VL,
                    2,
                    new VideoLimits(1 << 24, 10_000, 1L << 31));

    @Test
    void routesRecordsAndDeadLetters() throws Exception {
        OneInputStreamOperatorTestHarness<Either<DeadLetter, FetchedRecord>, PreprocessedRecord>
                harness =
                        ProcessFunctionTestHarnesses.forProcessFunction(
                                new PreprocessMediaFunction(
                                        PerSource.uniform(ModelPreset.QWEN2_VL.visionConfig()),
                                        VIDEO));

        DeadLetter upstream =
                new DeadLetter(
                        ref(1), RejectReason.IMAGE_NOT_FOUND, "image 1 of 1: 'a.jpg' not found");
        harness.processElement(Either.Left(upstream), 0L);
        harness.processElement(
                Either.Right(fetched(ref(2), "photos/hopper.jpg", "gray/camera.png")), 0L);
        harness.processElement(Either.Right(new FetchedRecord(record(ref(3)), new byte[0][])), 0L);
        FetchedRecord bad = fetched(ref(4), "photos/hopper.jpg", "photos/hopper.jpg");
        bad.record.images[1].path = "images/broken.png";
        bad.imageBytes[1] = "<Error>AccessDenied</Error>".getBytes();
        harness.processElement(Either.Right(bad), 0L);

        List<PreprocessedRecord> out = harness.extractOutputValues();
        assertThat(out).hasSize(2);
        assertThat(out.get(0).record.ref).isEqualTo(ref(2));
        assertThat(out.get(0).images).hasSize(2);
        // hopper.jpg and camera.png: 128x128 -> 140x140 and 512x512 -> 504x504 (reference table).
        assertThat(out.get(0).images[0].gridH).isEqualTo(10);
        assertThat(out.get(0).images[1].gridW).isEqualTo(36);
        assertThat(out.get(0).images[1].resizedRgb).hasSize(504 * 504 * 3);
        assertThat(out.get(1).images).isEmpty();

        List<DeadLetter> dead =
                harness.getSideOutput(DeadLetters.TAG).stream()
                        .map(StreamRecord::getValue)
                        .collect(Collectors.toList());
        assertThat(dead).hasSize(2);
        assertThat(dead.get(0).ref).isEqualTo(ref(1));
        assertThat(dead.get(0).reason).isEqualTo(RejectReason.IMAGE_NOT_FOUND);
        assertThat(dead.get(0).message).isEqualTo(upstream.message);
        assertThat(dead.get(1).ref).isEqualTo(ref(4));
        assertThat(dead.get(1).reason).isEqualTo(RejectReason.UNSUPPORTED_IMAGE);
        assertThat(dead.get(1).message)
                .startsWith("image 2 of 2 'images/broken.png': not a supported image");
        harness.close();
    }

    /**
     * A record's videos leave as {@link SampledVideo}s (the preprocessor's own output, checked
     * against the processor in VideoPreprocessorTest); a video FFmpeg cannot read makes the record
     * a dead letter naming it.
     */
    @Test
    void samplesVideosAndDeadLettersABadOne() throws Exception {
        OneInputStreamOperatorTestHarness<Either<DeadLetter, FetchedRecord>, PreprocessedRecord>
                harness =
                        ProcessFunctionTestHarnesses.forProcessFunction(
                                new PreprocessMediaFunction(
                                        PerSource.uniform(ModelPreset.QWEN2_VL.visionConfig()),
                                        VIDEO));
        String clip = goodClip();
        byte[] bytes = Files.readAllBytes(GoldenSet.VIDEO.dir().resolve("clips").resolve(clip));
        FetchedRecord good = new FetchedRecord(record(ref(1)), new byte[0][]);
        good.record.videos = new VideoRef[] {new VideoRef(clip, 0, 0, 0)};
        good.videoBytes = new byte[][] {bytes};
        FetchedRecord bad = new FetchedRecord(record(ref(2)), new byte[0][]);
        bad.record.videos =
                new VideoRef[] {new VideoRef(clip, 0, 0, 0), new VideoRef("clips/x.mp4", 0, 0, 0)};
        bad.videoBytes = new byte[][] {bytes, "<Error>AccessDenied</Error>".getBytes()};
        harness.processElement(Either.Right(good), 0L);
        harness.processElement(Either.Right(bad), 0L);

        List<PreprocessedRecord> out = harness.extractOutputValues();
        assertThat(out).hasSize(1);
        SampledVideo expected = VIDEO.newPreprocessor().sample(bytes, new VideoRef(clip, 0, 0, 0));
        assertThat(out.get(0).videos).hasSize(1);
        assertThat(out.get(0).videos[0]).usingRecursiveComparison().isEqualTo(expected);
        assertThat(out.get(0).images).isEmpty();
        List<DeadLetter> dead =
                harness.getSideOutput(DeadLetters.TAG).stream()
                        .map(StreamRecord::getValue)
                        .collect(Collectors.toList());
        assertThat(dead).hasSize(1);
        assertThat(dead.get(0).ref).isEqualTo(ref(2));
        assertThat(dead.get(0).reason)
                .isIn(RejectReason.UNSUPPORTED_VIDEO, RejectReason.CORRUPT_VIDEO);
        assertThat(dead.get(0).message).startsWith("video 2 of 2 'clips/x.mp4': ");
        harness.close();
    }

    /**
     * A video given as frame images, beside a video file, leaves as the preprocessor's {@link
     * VideoPreprocessor#sampleFrames} output (checked against the processor in FrameListVideoTest);
     * a frame that is not an image makes the record a dead letter naming the video and the frame.
     */
    @Test
    void framesOfAVideoGivenAsFrameImagesAndADeadLetterNamingABadFrame() throws Exception {
        OneInputStreamOperatorTestHarness<Either<DeadLetter, FetchedRecord>, PreprocessedRecord>
                harness =
                        ProcessFunctionTestHarnesses.forProcessFunction(
                                new PreprocessMediaFunction(
                                        PerSource.uniform(ModelPreset.QWEN2_VL.visionConfig()),
                                        VIDEO));
        String clip = goodClip();
        byte[] bytes = Files.readAllBytes(GoldenSet.VIDEO.dir().resolve("clips").resolve(clip));
        String[] paths = {
            "frames/jpg_7/0000.jpg", "frames/jpg_7/0001.jpg", "frames/jpg_7/0002.jpg"
        };
        byte[][] frames = new byte[paths.length][];
        for (int i = 0; i < paths.length; i++) {
            frames[i] = Files.readAllBytes(GoldenSet.VIDEO.dir().resolve(paths[i]));
        }
        FetchedRecord good = new FetchedRecord(record(ref(1)), new byte[0][]);
        good.record.videos =
                new VideoRef[] {new VideoRef(clip, 0, 0, 0), VideoRef.ofFrames(paths, 1.0, 0, 0)};
        good.videoBytes = new byte[][] {bytes, null};
        good.videoFrames = new byte[][][] {null, frames};
        FetchedRecord bad = new FetchedRecord(record(ref(2)), new byte[0][]);
        bad.record.videos = new VideoRef[] {VideoRef.ofFrames(paths, 0, 0, 0)};
        bad.videoBytes = new byte[][] {null};
        bad.videoFrames =
                new byte[][][] {{frames[0], "<Error>AccessDenied</Error>".getBytes(), frames[2]}};
        harness.processElement(Either.Right(good), 0L);
        harness.processElement(Either.Right(bad), 0L);

        List<PreprocessedRecord> out = harness.extractOutputValues();
        assertThat(out).hasSize(1);
        assertThat(out.get(0).videos).hasSize(2);
        assertThat(out.get(0).videos[0])
                .usingRecursiveComparison()
                .isEqualTo(VIDEO.newPreprocessor().sample(bytes, new VideoRef(clip, 0, 0, 0)));
        SampledVideo fromFrames = out.get(0).videos[1];
        assertThat(fromFrames)
                .usingRecursiveComparison()
                .isEqualTo(
                        VIDEO.newPreprocessor()
                                .sampleFrames(frames, VideoRef.ofFrames(paths, 1.0, 0, 0)));
        assertThat(fromFrames.frameIndices).containsExactly(0, 1, 2);
        assertThat(fromFrames.gridT).isEqualTo(2);
        assertThat(fromFrames.secondPerGridT).isEqualTo(2.0);
        List<DeadLetter> dead =
                harness.getSideOutput(DeadLetters.TAG).stream()
                        .map(StreamRecord::getValue)
                        .collect(Collectors.toList());
        assertThat(dead).hasSize(1);
        assertThat(dead.get(0).ref).isEqualTo(ref(2));
        assertThat(dead.get(0).reason).isEqualTo(RejectReason.UNSUPPORTED_IMAGE);
        assertThat(dead.get(0).message)
                .startsWith(
                        "video 1 of 1 3 frames 'frames/jpg_7/0000.jpg' .. 'frames/jpg_7/0002.jpg':"
                                + " frame 2 of 3 'frames/jpg_7/0001.jpg': not a supported image");
        harness.close();
    }

    /**
     * A video in a spill file ({@link FetchedRecord#videoFiles}) comes out as the same bytes in
     * memory do, field for field, for a clip of each container of the golden set (MP4, QuickTime,
     * Matroska with its counted frames, WebM), and its file is deleted; a damaged spilled video is
     * the same dead letter as in memory, and every spill file of a dead-lettered record is deleted,
     * also those of videos not reached.
     */
    @Test
    void aSpilledVideoGivesTheSameSampleAsInMemoryAndItsFileIsDeleted(@TempDir Path spill)
            throws Exception {
        OneInputStreamOperatorTestHarness<Either<DeadLetter, FetchedRecord>, PreprocessedRecord>
                harness =
                        ProcessFunctionTestHarnesses.forProcessFunction(
                                new PreprocessMediaFunction(
                                        PerSource.uniform(ModelPreset.QWEN2_VL.visionConfig()),
                                        VIDEO));
        VideoPreprocessor preprocessor = VIDEO.newPreprocessor();
        List<String> clips = goodClipPerContainer();
        for (int i = 0; i < clips.size(); i++) {
            VideoRef ref = new VideoRef(clips.get(i), 0, 0, 0);
            byte[] bytes =
                    Files.readAllBytes(GoldenSet.VIDEO.dir().resolve("clips").resolve(ref.path));
            Path file = Files.write(spill.resolve("video-" + i), bytes);
            FetchedRecord spilled = new FetchedRecord(record(ref(i + 1)), new byte[0][]);
            spilled.record.videos = new VideoRef[] {ref};
            spilled.videoBytes = new byte[1][];
            spilled.videoFiles = new String[] {file.toString()};
            harness.processElement(Either.Right(spilled), 0L);

            SampledVideo inMemory = preprocessor.sample(bytes, ref);
            List<PreprocessedRecord> out = harness.extractOutputValues();
            assertThat(out).hasSize(i + 1);
            assertThat(out.get(i).videos[0])
                    .as(ref.path)
                    .usingRecursiveComparison()
                    .isEqualTo(inMemory);
            assertThat(file).doesNotExist();
        }

        byte[] damaged = "<Error>AccessDenied</Error>".getBytes(StandardCharsets.US_ASCII);
        String expected;
        try {
            preprocessor.sample(damaged, new VideoRef("clips/x.mp4", 0, 0, 0));
            throw new AssertionError("a damaged video decoded");
        } catch (RejectedRecordException e) {
            expected = "video 1 of 2 'clips/x.mp4': " + e.getMessage();
        }
        Path bad = Files.write(spill.resolve("bad"), damaged);
        Path notReached = Files.write(spill.resolve("not-reached"), damaged);
        FetchedRecord record = new FetchedRecord(record(ref(100)), new byte[0][]);
        record.record.videos =
                new VideoRef[] {
                    new VideoRef("clips/x.mp4", 0, 0, 0), new VideoRef(clips.get(0), 0, 0, 0)
                };
        record.videoBytes = new byte[2][];
        record.videoFiles = new String[] {bad.toString(), notReached.toString()};
        harness.processElement(Either.Right(record), 0L);
        // a record whose image is rejected before its spilled video is reached
        Path afterImage = Files.write(spill.resolve("after-image"), damaged);
        FetchedRecord imageFirst = fetched(ref(101), "photos/hopper.jpg");
        imageFirst.imageBytes[0] = damaged;
        imageFirst.record.videos = new VideoRef[] {new VideoRef(clips.get(0), 0, 0, 0)};
        imageFirst.videoBytes = new byte[1][];
        imageFirst.videoFiles = new String[] {afterImage.toString()};
        harness.processElement(Either.Right(imageFirst), 0L);

        List<DeadLetter> dead =
                harness.getSideOutput(DeadLetters.TAG).stream()
                        .map(StreamRecord::getValue)
                        .collect(Collectors.toList());
        assertThat(dead).hasSize(2);
        assertThat(dead.get(0).ref).isEqualTo(ref(100));
        assertThat(dead.get(0).message).isEqualTo(expected);
        assertThat(dead.get(1).ref).isEqualTo(ref(101));
        assertThat(dead.get(1).reason).isEqualTo(RejectReason.UNSUPPORTED_IMAGE);
        assertThat(spill).isEmptyDirectory();
        harness.close();
    }

    /** The first clip the decoder reads of each file extension in the video golden set. */
    private static List<String> goodClipPerContainer() {
        Map<String, String> clips = new LinkedHashMap<>();
        for (Map<String, Object> clip : GoldenSet.VIDEO.read("clips.arrow")) {
            String name = (String) clip.get("clip");
            if ((Boolean) clip.get("good")) {
                clips.putIfAbsent(name.substring(name.lastIndexOf('.')), name);
            }
        }
        return new ArrayList<>(clips.values());
    }

    /** The first clip of the video golden set that the decoder reads. */
    private static String goodClip() {
        for (Map<String, Object> clip : GoldenSet.VIDEO.read("clips.arrow")) {
            if ((Boolean) clip.get("good")) {
                return (String) clip.get("clip");
            }
        }
        throw new AssertionError("no good clip in the video golden set");
    }

    private static RecordRef ref(long line) {
        return new RecordRef("s3://b/train.jsonl", line, line - 1, "id-" + line);
    }

    private static SftRecord record(RecordRef ref, ImageRef... images) {
        return new SftRecord(ref, new ChatMessage[0], images);
    }

    private static FetchedRecord fetched(RecordRef ref, String... paths) {
        ImageRef[] refs = new ImageRef[paths.length];
        byte[][] bytes = new byte[paths.length][];
        for (int i = 0; i < paths.length; i++) {
            refs[i] = new ImageRef("images/" + paths[i], 0, 0);
            bytes[i] = SharedData.bytes(IMAGES + paths[i]);
        }
        return new FetchedRecord(record(ref, refs), bytes);
    }
}
