package dev.stoker.operators.tokenize;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.model.ChatMessage;
import dev.stoker.operators.model.ContentPart;
import dev.stoker.operators.model.ImageRef;
import dev.stoker.operators.model.PreprocessedImage;
import dev.stoker.operators.model.PreprocessedRecord;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SampledVideo;
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.VideoRef;
import dev.stoker.operators.preset.ModelPreset;
import java.util.Arrays;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Videos in {@link SampleTokenizer} beyond what the Hugging Face goldens hold ({@code
 * VideoTokenParityTest}): truncation keeps a video's block whole (a Qwen3-VL block with its
 * timestamps and inner pairs) or leaves the video out with its frames, and frames that do not match
 * their grid are refused. The conversation: user, assistant, user (image 0, text, video 0, text),
 * assistant, user (video 1), assistant; Qwen3-VL's template.
 */
class VideoSampleTokenizerTest {
    private static ChatTokenizer tokenizer;

    @BeforeAll
    static void load() throws Exception {
        tokenizer = ChatTokenizer.open(ChatTokenizerTest.tokenizerDir());
    }

    @AfterAll
    static void close() {
        tokenizer.close();
    }

    @Test
    void aCutInsideAVideoBlockMovesBeforeItAndLeavesThatVideoAndLaterOnesOut() throws Exception {
        TokenizedSample full = tokenize(record(5), Integer.MAX_VALUE);
        assertThat(full.numVideos()).isEqualTo(2);
        int[] outer = outerVideoBlocks(full.inputIds);
        // video 0: 3 temporal patches, each timestamp + start + 6 pads + end, inside a start/end
        int cutInVideo0 = outer[0] + 10;
        assertThat(full.inputIds[cutInVideo0 - 1]).isEqualTo(ChatTokenizer.VIDEO_PAD);
        TokenizedSample cut = tokenize(record(5), cutInVideo0);
        assertThat(cut.inputIds).containsExactly(Arrays.copyOf(full.inputIds, outer[0]));
        assertThat(cut.numImages()).isEqualTo(1);
        assertThat(cut.numVideos()).isZero();
        assertThat(cut.videoRgb).isEmpty();
        assertThat(cut.videoFrames).isEmpty();
        assertThat(cut.secondPerGridTs).isEmpty();

        TokenizedSample second = tokenize(record(5), outer[1] + 3);
        assertThat(second.inputIds).containsExactly(Arrays.copyOf(full.inputIds, outer[1]));
        assertThat(second.videoGridThw).containsExactly(3, 4, 6);
        assertThat(second.videoFrames).containsExactly(5);
        assertThat(second.secondPerGridTs).containsExactly(2.0);
        assertThat(second.videoRgb).hasSize(5 * 64 * 96 * 3);
        assertThat(second.labels).containsExactly(Arrays.copyOf(full.labels, outer[1]));
    }

    @Test
    void framesThatDoNotMatchTheGridAreRefused() {
        PreprocessedRecord wrongGridT = record(4);
        wrongGridT.videos[0].gridT = 3;
        assertThatThrownBy(() -> tokenize(wrongGridT, Integer.MAX_VALUE))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> {
                            assertThat(e.reason()).isEqualTo(RejectReason.TOKENIZATION_FAILED);
                            assertThat(e.getMessage())
                                    .contains("video 0 (a.mp4) has 4 frames, 4 frame indices");
                        });
        PreprocessedRecord shortPixels = record(5);
        shortPixels.videos[1].resizedRgb = new byte[100];
        assertThatThrownBy(() -> tokenize(shortPixels, Integer.MAX_VALUE))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> assertThat(e.getMessage()).contains("video 1 (b.mp4) has 100 RGB"));
        PreprocessedRecord missing = record(5);
        missing.videos = new SampledVideo[1];
        assertThatThrownBy(() -> tokenize(missing, Integer.MAX_VALUE))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> assertThat(e.getMessage()).contains("2 videos referenced but 1"));
    }

    private static int[] outerVideoBlocks(long[] ids) {
        // a Qwen3-VL video block starts with two <|vision_start|> around its first timestamp
        int[] starts = new int[2];
        int n = 0;
        for (int i = 0; i + 1 < ids.length && n < 2; i++) {
            if (ids[i] == ChatTokenizer.VISION_START && ids[i + 1] != ChatTokenizer.IMAGE_PAD) {
                starts[n++] = i;
                while (!(ids[i] == ChatTokenizer.VISION_END
                        && ids[i + 1] == ChatTokenizer.VISION_END)) {
                    i++;
                }
            }
        }
        assertThat(n).isEqualTo(2);
        return starts;
    }

    private static TokenizedSample tokenize(PreprocessedRecord input, int maxSeqLen)
            throws RejectedRecordException {
        return new SampleTokenizer(
                        tokenizer,
                        ModelPreset.QWEN3_VL.chatTemplate(),
                        2,
                        maxSeqLen,
                        SequenceLengthPolicy.TRUNCATE)
                .tokenize(input);
    }

    /** Video 0 of {@code frames0} frames, video 1 of 5; both 64x96 (a 4x6 grid of 16 px). */
    private static PreprocessedRecord record(int frames0) {
        SftRecord record =
                new SftRecord(
                        new RecordRef("t.jsonl", 1, 0, "v"),
                        new ChatMessage[] {
                            new ChatMessage("user", ContentPart.text("Hi")),
                            new ChatMessage("assistant", ContentPart.text("Hello.")),
                            new ChatMessage(
                                    "user",
                                    ContentPart.image(0),
                                    ContentPart.text("Frame "),
                                    ContentPart.video(0),
                                    ContentPart.text(" same?")),
                            new ChatMessage("assistant", ContentPart.text("Yes.")),
                            new ChatMessage("user", ContentPart.video(1)),
                            new ChatMessage("assistant", ContentPart.text("A cat walks by.")),
                        },
                        new ImageRef[] {new ImageRef("i.png", 0, 0)});
        record.videos =
                new VideoRef[] {new VideoRef("a.mp4", 0, 0, 0), new VideoRef("b.mp4", 0, 0, 0)};
        PreprocessedRecord input =
                new PreprocessedRecord(
                        record,
                        new PreprocessedImage[] {
                            new PreprocessedImage(new byte[32 * 32 * 3], 1, 2, 2)
                        });
        input.videos = new SampledVideo[] {video(frames0), video(5)};
        return input;
    }

    private static SampledVideo video(int frames) {
        SampledVideo v = new SampledVideo();
        v.frames = frames;
        v.resizedRgb = new byte[frames * 64 * 96 * 3];
        v.gridT = (frames + 1) / 2;
        v.gridH = 4;
        v.gridW = 6;
        v.frameIndices = new int[frames];
        for (int i = 0; i < frames; i++) {
            v.frameIndices[i] = 12 * i;
        }
        v.videoFps = 24;
        v.sampledFps = 1;
        v.secondPerGridT = 2;
        return v;
    }
}
