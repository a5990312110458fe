package dev.stoker.operators.image;

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
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.preset.ModelPreset;
import java.util.List;
import java.util.stream.Collectors;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.util.OneInputStreamOperatorTestHarness;
import org.apache.flink.streaming.util.ProcessFunctionTestHarnesses;
import org.apache.flink.types.Either;
import org.junit.jupiter.api.Test;

class PreprocessImagesFunctionTest {
    private static final String IMAGES = "llava-style/images/";

    @Test
    void routesRecordsAndDeadLetters() throws Exception {
        OneInputStreamOperatorTestHarness<Either<DeadLetter, FetchedRecord>, PreprocessedRecord>
                harness =
                        ProcessFunctionTestHarnesses.forProcessFunction(
                                new PreprocessImagesFunction(
                                        PerSource.uniform(ModelPreset.QWEN2_VL.visionConfig())));

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
