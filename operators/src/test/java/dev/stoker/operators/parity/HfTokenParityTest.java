package dev.stoker.operators.parity;

import static org.assertj.core.api.Assertions.assertThat;

import dev.stoker.operators.SharedData;
import dev.stoker.operators.image.ImageDecoder;
import dev.stoker.operators.image.QwenImageProcessor;
import dev.stoker.operators.image.QwenVisionConfig;
import dev.stoker.operators.image.RgbImage;
import dev.stoker.operators.model.ImageRef;
import dev.stoker.operators.model.JsonlLine;
import dev.stoker.operators.model.PreprocessedImage;
import dev.stoker.operators.model.PreprocessedRecord;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.parse.RecordFormat;
import dev.stoker.operators.parse.SftRecordParser;
import dev.stoker.operators.preset.ModelPreset;
import dev.stoker.operators.tokenize.ChatTokenizer;
import dev.stoker.operators.tokenize.SampleTokenizer;
import dev.stoker.operators.tokenize.SequenceLengthPolicy;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * Token parity with Hugging Face for every record of the three shared sample datasets and every
 * preset, at the preset's default pixel bounds: Stoker's parser, image sizing ({@link
 * QwenImageProcessor#targetSize}) and {@link SampleTokenizer} against the generated {@code
 * tokens.arrow} ({@link Goldens}), which {@code scripts/golden/make_golden.py} made with the
 * transformers 5.23.0 processors ({@code Qwen2VLProcessor}, {@code Qwen2_5_VLProcessor}, {@code
 * Qwen3VLProcessor}).
 *
 * <p>Exact equality of {@code image_grid_thw}, the number of {@code <|image_pad|>} tokens per
 * image, {@code input_ids}, and the label mask (labels equal the ids where trained, -100
 * elsewhere). Pixel values are checked separately, at a capped max_pixels, by {@link
 * HfPixelParityTest}; here each image gets a one-float-per-patch placeholder so that large images
 * at their default size need no pixel buffers.
 */
class HfTokenParityTest {
    private static ChatTokenizer tokenizer;
    private static List<Map<String, Object>> goldens;

    /** Decoded (after EXIF) {@code {height, width}} per dataset image, decoded once. */
    private static final Map<String, int[]> SIZES = new HashMap<>();

    @BeforeAll
    static void load() throws Exception {
        tokenizer = ChatTokenizer.open(SharedData.root().resolve("tokenizers").resolve("qwen3"));
        goldens = Goldens.read("tokens.arrow");
    }

    @AfterAll
    static void close() {
        tokenizer.close();
    }

    @ParameterizedTest
    @EnumSource(ModelPreset.class)
    void idsLabelsAndGridsMatchTheReference(ModelPreset preset) throws Exception {
        QwenVisionConfig config = preset.visionConfig();
        QwenImageProcessor images = new QwenImageProcessor(config);
        SampleTokenizer samples =
                new SampleTokenizer(
                        tokenizer,
                        preset.chatTemplate(),
                        config.mergeSize,
                        preset.maxPositionEmbeddings(),
                        SequenceLengthPolicy.DROP);
        List<String> mismatches = new ArrayList<>();
        int checked = 0;
        for (Map<String, Object> golden : goldens) {
            if (!preset.key().equals(golden.get("preset"))) {
                continue;
            }
            String dataset = (String) golden.get("dataset");
            int line = (Integer) golden.get("line");
            SftRecord record = parse(dataset, line);
            PreprocessedImage[] pre = new PreprocessedImage[record.images.length];
            for (int i = 0; i < pre.length; i++) {
                ImageRef ref = record.images[i];
                int[] size = size(dataset, ref.path);
                int[] hw = images.targetSize(size[0], size[1], ref);
                int gh = hw[0] / config.patchSize;
                int gw = hw[1] / config.patchSize;
                pre[i] = new PreprocessedImage(new byte[gh * gw], 1, gh, gw);
            }
            TokenizedSample sample = samples.tokenize(new PreprocessedRecord(record, pre));
            String where = dataset + ":" + line + " (" + golden.get("record_id") + ")";
            long[] ids = Goldens.longs(golden.get("input_ids"));
            long[] grid = Goldens.longs(golden.get("image_grid_thw"));
            long[] pads = Goldens.longs(golden.get("image_pads"));
            List<?> mask = (List<?>) golden.get("label_mask");
            if (!Arrays.equals(sample.imageGridThw, grid)) {
                mismatches.add(
                        where
                                + ": image_grid_thw "
                                + Arrays.toString(sample.imageGridThw)
                                + " != reference "
                                + Arrays.toString(grid));
            }
            long[] stokerPads = new long[pre.length];
            for (int i = 0; i < pre.length; i++) {
                stokerPads[i] = pre[i].numPatches() / (config.mergeSize * config.mergeSize);
            }
            if (!Arrays.equals(stokerPads, pads)
                    || count(sample.inputIds, ChatTokenizer.IMAGE_PAD)
                            != Arrays.stream(pads).sum()) {
                mismatches.add(
                        where
                                + ": <|image_pad|> per image "
                                + Arrays.toString(stokerPads)
                                + " != reference "
                                + Arrays.toString(pads));
            }
            if (!Arrays.equals(sample.inputIds, ids)) {
                mismatches.add(where + ": input_ids " + firstDifference(sample.inputIds, ids));
            }
            long[] expectedLabels = new long[ids.length];
            for (int i = 0; i < ids.length; i++) {
                expectedLabels[i] = (Boolean) mask.get(i) ? ids[i] : ChatTokenizer.IGNORE_INDEX;
            }
            if (!Arrays.equals(sample.labels, expectedLabels)) {
                mismatches.add(
                        where + ": labels " + firstDifference(sample.labels, expectedLabels));
            }
            checked++;
        }
        assertThat(checked).as("golden records of " + preset.key()).isEqualTo(63);
        assertThat(mismatches).as(preset.key() + " token mismatches").isEmpty();
    }

    static SftRecord parse(String dataset, int line) throws Exception {
        List<String> lines =
                Files.readAllLines(
                        SharedData.root().resolve(dataset).resolve("train.jsonl"),
                        StandardCharsets.UTF_8);
        byte[] bytes = lines.get(line - 1).getBytes(StandardCharsets.UTF_8);
        return new SftRecordParser()
                .parse(
                        new JsonlLine(
                                new RecordRef(dataset, line, line - 1, null), bytes, bytes.length),
                        RecordFormat.AUTO);
    }

    private static int[] size(String dataset, String path) throws Exception {
        String key = dataset + "/" + path;
        int[] size = SIZES.get(key);
        if (size == null) {
            RgbImage decoded =
                    new ImageDecoder()
                            .decode(
                                    SharedData.bytes(key),
                                    QwenVisionConfig.DEFAULT_MAX_SOURCE_PIXELS);
            size = new int[] {decoded.height(), decoded.width()};
            SIZES.put(key, size);
        }
        return size;
    }

    private static long count(long[] values, long value) {
        return Arrays.stream(values).filter(v -> v == value).count();
    }

    private static String firstDifference(long[] actual, long[] expected) {
        int n = Math.min(actual.length, expected.length);
        for (int i = 0; i < n; i++) {
            if (actual[i] != expected[i]) {
                return "differ first at "
                        + i
                        + ": "
                        + actual[i]
                        + " != reference "
                        + expected[i]
                        + " (lengths "
                        + actual.length
                        + " and "
                        + expected.length
                        + ")";
            }
        }
        return "lengths " + actual.length + " != reference " + expected.length;
    }
}
