package dev.stoker.operators.tokenize;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.model.ChatMessage;
import dev.stoker.operators.model.ContentPart;
import dev.stoker.operators.model.PreprocessedImage;
import dev.stoker.operators.model.PreprocessedRecord;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.TokenizedSample;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.LongStream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * {@code stoker.max-seq-len} in {@link SampleTokenizer}, on a three-image, two-round conversation
 * (images 0 and 1 in the first user turn, image 2 in the second): lengths, image blocks kept whole,
 * labels cut with the ids, and pixels and grids of the images left out. The reference is the same
 * record without a limit, whose ids {@code HfTokenParityTest} holds to Hugging Face; block
 * positions are found by scanning its ids for {@code <|vision_start|>}.
 */
class SequenceLengthTest {
    private static ChatTokenizer tokenizer;
    private PreprocessedImage[] images;
    private TokenizedSample full;
    private int[] blockStart;

    @BeforeAll
    static void load() throws Exception {
        tokenizer = ChatTokenizer.open(ChatTokenizerTest.tokenizerDir());
    }

    @AfterAll
    static void close() {
        tokenizer.close();
    }

    @BeforeEach
    void fullSample() throws Exception {
        full = tokenize(Integer.MAX_VALUE, SequenceLengthPolicy.DROP);
        List<Integer> starts = new ArrayList<>();
        for (int i = 0; i < full.inputIds.length; i++) {
            if (full.inputIds[i] == ChatTokenizer.VISION_START) {
                starts.add(i);
            }
        }
        blockStart = starts.stream().mapToInt(Integer::intValue).toArray();
        assertThat(blockStart).hasSize(3);
        assertThat(full.numImages()).isEqualTo(3);
    }

    @Test
    void dropRejectsALongerSampleNamingItsLengthAndTheLimit() throws Exception {
        int length = full.inputIds.length;
        assertThat(tokenize(length, SequenceLengthPolicy.DROP).inputIds)
                .containsExactly(full.inputIds);
        assertThatThrownBy(() -> tokenize(length - 1, SequenceLengthPolicy.DROP))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> {
                            assertThat(e.reason()).isEqualTo(RejectReason.SEQUENCE_TOO_LONG);
                            assertThat(e.getMessage())
                                    .contains(
                                            "sequence of "
                                                    + length
                                                    + " tokens > max-seq-len "
                                                    + (length - 1));
                        });
    }

    @Test
    void truncateCutsTheLastAnswerAndItsLabelsAtTheLimit() throws Exception {
        int limit = full.inputIds.length - 3;
        TokenizedSample cut = tokenize(limit, SequenceLengthPolicy.TRUNCATE);
        assertThat(cut.inputIds).containsExactly(Arrays.copyOf(full.inputIds, limit));
        assertThat(cut.labels).containsExactly(Arrays.copyOf(full.labels, limit));
        assertThat(cut.imageGridThw).containsExactly(full.imageGridThw);
        assertThat(cut.resizedRgb).containsExactly(full.resizedRgb);
    }

    @Test
    void aCutInsideAnImageBlockMovesBeforeItAndDropsThatImage() throws Exception {
        int start = blockStart[2];
        for (int limit : new int[] {start + 1, start + 2, start + 1 + pads(2)}) {
            TokenizedSample cut = tokenize(limit, SequenceLengthPolicy.TRUNCATE);
            assertThat(cut.inputIds).as("limit %d", limit).hasSize(start);
            assertThat(cut.inputIds).containsExactly(Arrays.copyOf(full.inputIds, start));
            assertThat(cut.labels).containsExactly(Arrays.copyOf(full.labels, start));
            assertThat(count(cut.inputIds, ChatTokenizer.VISION_START)).isEqualTo(2);
            assertThat(count(cut.inputIds, ChatTokenizer.IMAGE_PAD)).isEqualTo(pads(0) + pads(1));
            // images 0 and 1 stay, concatenated in order; image 2 is gone
            assertThat(cut.imageGridThw).containsExactly(Arrays.copyOf(full.imageGridThw, 6));
            byte[] expected = new byte[images[0].resizedRgb.length + images[1].resizedRgb.length];
            System.arraycopy(images[0].resizedRgb, 0, expected, 0, images[0].resizedRgb.length);
            System.arraycopy(
                    images[1].resizedRgb,
                    0,
                    expected,
                    images[0].resizedRgb.length,
                    images[1].resizedRgb.length);
            assertThat(cut.resizedRgb).containsExactly(expected);
        }
    }

    @Test
    void aCutRightAfterAnImageBlockKeepsTheImage() throws Exception {
        int end = blockStart[2] + pads(2) + 2;
        TokenizedSample cut = tokenize(end, SequenceLengthPolicy.TRUNCATE);
        assertThat(cut.inputIds).containsExactly(Arrays.copyOf(full.inputIds, end));
        assertThat(cut.labels).containsExactly(Arrays.copyOf(full.labels, end));
        assertThat(cut.imageGridThw).containsExactly(full.imageGridThw);
        assertThat(cut.resizedRgb).containsExactly(full.resizedRgb);
    }

    @Test
    void truncationThatLeavesNoTrainedTokenIsDropped() throws Exception {
        // inside image 1: before the first answer, so nothing trainable remains
        int limit = blockStart[1] + 1;
        assertThatThrownBy(() -> tokenize(limit, SequenceLengthPolicy.TRUNCATE))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> {
                            assertThat(e.reason()).isEqualTo(RejectReason.SEQUENCE_TOO_LONG);
                            assertThat(e.getMessage())
                                    .contains(
                                            "sequence of "
                                                    + full.inputIds.length
                                                    + " tokens > max-seq-len "
                                                    + limit)
                                    .contains(
                                            "truncated to "
                                                    + blockStart[1]
                                                    + " tokens, no trained token is left");
                        });
    }

    private TokenizedSample tokenize(int maxSeqLen, SequenceLengthPolicy policy)
            throws RejectedRecordException {
        SftRecord record =
                QwenChatTemplateTest.record(
                        new ChatMessage(
                                "user",
                                ContentPart.image(0),
                                ContentPart.image(1),
                                ContentPart.text("Compare these two pictures.")),
                        new ChatMessage(
                                "assistant",
                                ContentPart.text("The first is a cat, the second a dog.")),
                        new ChatMessage(
                                "user", ContentPart.text("And this one?"), ContentPart.image(2)),
                        new ChatMessage(
                                "assistant",
                                ContentPart.text("A cup of coffee on a wooden table, steaming.")));
        images =
                new PreprocessedImage[] {
                    QwenChatTemplateTest.image(1, 4, 6, 3),
                    QwenChatTemplateTest.image(1, 2, 2, 3),
                    QwenChatTemplateTest.image(1, 4, 4, 3)
                };
        return new SampleTokenizer(tokenizer, new QwenChatTemplate(), 2, maxSeqLen, policy)
                .tokenize(new PreprocessedRecord(record, images));
    }

    private int pads(int image) {
        return images[image].numPatches() / 4;
    }

    private static long count(long[] ids, long id) {
        return LongStream.of(ids).filter(v -> v == id).count();
    }
}
