package dev.stoker.operators.parity;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import dev.stoker.operators.SharedData;
import dev.stoker.operators.json.Json;
import dev.stoker.operators.model.ChatMessage;
import dev.stoker.operators.model.ContentPart;
import dev.stoker.operators.model.ImageRef;
import dev.stoker.operators.model.PreprocessedImage;
import dev.stoker.operators.model.PreprocessedRecord;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.SampledVideo;
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.VideoRef;
import dev.stoker.operators.pack.MropePositions;
import dev.stoker.operators.preset.ModelPreset;
import dev.stoker.operators.tokenize.ChatTokenizer;
import dev.stoker.operators.tokenize.SampleTokenizer;
import dev.stoker.operators.tokenize.SequenceLengthPolicy;
import dev.stoker.operators.video.QwenVideoProcessor;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Token parity with Hugging Face for chat conversations holding videos (and one with an image and a
 * video), for every preset: {@link SampleTokenizer} against {@code chats.arrow} ({@link
 * GoldenSet#VIDEO_CHAT}), which {@code scripts/golden/make_video_chat_golden.py} made with the
 * transformers 5.23.0 processors' {@code apply_chat_template} and {@code __call__} on pre-sampled
 * frames. Exact equality of {@code input_ids}, the label mask, {@code video_grid_thw}, {@code
 * image_grid_thw}, the passed-on frames and {@code second_per_grid_ts}, and {@link MropePositions}
 * against the model's own {@code get_rope_index} (per preset's {@code ModelPreset#videoTime}); and
 * the reference's {@code mm_token_type_ids} is what the reader derives from the ids (1 on {@code
 * <|image_pad|>}, 2 on {@code <|video_pad|>}, else 0).
 */
class VideoTokenParityTest {
    private static ChatTokenizer tokenizer;
    private static List<Map<String, Object>> goldens;

    @BeforeAll
    static void load() throws Exception {
        tokenizer = ChatTokenizer.open(SharedData.root().resolve("tokenizers").resolve("qwen3"));
        goldens = GoldenSet.VIDEO_CHAT.read("chats.arrow");
    }

    @AfterAll
    static void close() {
        tokenizer.close();
    }

    @Test
    void idsLabelsGridsAndVideosMatchTheReference() throws Exception {
        assertThat(goldens).hasSize(4 * ModelPreset.values().length);
        for (Map<String, Object> row : goldens) {
            ModelPreset preset = ModelPreset.fromKey((String) row.get("preset"));
            String what = row.get("preset") + " " + row.get("chat");
            PreprocessedRecord input = record(row, preset);
            SampleTokenizer samples =
                    new SampleTokenizer(
                            tokenizer,
                            preset.chatTemplate(),
                            2,
                            preset.maxPositionEmbeddings(),
                            SequenceLengthPolicy.DROP);
            TokenizedSample sample = samples.tokenize(input);

            long[] ids = GoldenSet.longs(row.get("input_ids"));
            assertThat(sample.inputIds).as(what).containsExactly(ids);
            @SuppressWarnings("unchecked")
            List<Boolean> mask = (List<Boolean>) row.get("label_mask");
            long[] labels = new long[ids.length];
            for (int i = 0; i < ids.length; i++) {
                labels[i] = mask.get(i) ? ids[i] : ChatTokenizer.IGNORE_INDEX;
            }
            assertThat(sample.labels).as(what).containsExactly(labels);
            assertThat(sample.imageGridThw)
                    .as(what)
                    .containsExactly(GoldenSet.longs(row.get("image_grid_thw")));
            assertThat(sample.videoGridThw)
                    .as(what)
                    .containsExactly(GoldenSet.longs(row.get("video_grid_thw")));
            List<?> frames = (List<?>) row.get("frames");
            int length = frames.stream().mapToInt(f -> ((byte[]) f).length).sum();
            assertThat(sample.videoRgb).as(what).hasSize(length);
            assertThat(sample.videoFrames)
                    .as(what)
                    .containsExactly(
                            input.record.videos.length == 1
                                    ? new int[] {input.videos[0].frames}
                                    : new int[] {input.videos[0].frames, input.videos[1].frames});
            if (preset == ModelPreset.QWEN2_5_VL) {
                @SuppressWarnings("unchecked")
                List<Double> seconds = (List<Double>) row.get("second_per_grid_ts");
                assertThat(sample.secondPerGridTs)
                        .as(what)
                        .containsExactly(seconds.stream().mapToDouble(d -> d).toArray());
            }
            long[][] positions =
                    MropePositions.of(
                            sample.inputIds,
                            sample.imageGridThw,
                            sample.videoGridThw,
                            toFloat32(sample.secondPerGridTs),
                            ChatTokenizer.IMAGE_PAD,
                            ChatTokenizer.VIDEO_PAD,
                            2,
                            preset.videoTime(),
                            preset.tokensPerSecond());
            long[] rope = GoldenSet.longs(row.get("position_ids"));
            for (int axis = 0; axis < 3; axis++) {
                assertThat(positions[axis + 1])
                        .as("%s position_ids axis %d", what, axis)
                        .containsExactly(
                                Arrays.copyOfRange(
                                        rope, axis * ids.length, (axis + 1) * ids.length));
            }
            long[] types = GoldenSet.longs(row.get("mm_token_type_ids"));
            assertThat(types).as(what).hasSameSizeAs(ids);
            for (int i = 0; i < ids.length; i++) {
                long expected =
                        ids[i] == ChatTokenizer.IMAGE_PAD
                                ? 1
                                : ids[i] == ChatTokenizer.VIDEO_PAD ? 2 : 0;
                assertThat(types[i]).as("%s mm_token_type_ids[%d]", what, i).isEqualTo(expected);
            }
        }
    }

    /** The values as the batch carries them (float32 {@code second_per_grid_ts}). */
    private static double[] toFloat32(double[] values) {
        double[] out = new double[values.length];
        for (int i = 0; i < values.length; i++) {
            out[i] = (float) values[i];
        }
        return out;
    }

    /**
     * The golden conversation as the parser and the video front half hand it on: messages with
     * image and video parts, each image's grid (its pixels zeros: tokens do not read them) and each
     * video's frames, indices, container rate and {@code second_per_grid_ts} as Qwen2.5-VL's
     * processor derives it from {@code VideoMetadata.sampled_fps}.
     */
    static PreprocessedRecord record(Map<String, Object> row, ModelPreset preset) throws Exception {
        JsonNode messages = Json.mapper().readTree((String) row.get("messages"));
        List<ChatMessage> turns = new ArrayList<>();
        int images = 0;
        int videos = 0;
        for (JsonNode message : messages) {
            List<ContentPart> parts = new ArrayList<>();
            for (JsonNode part : message.get("content")) {
                String type = part.get("type").asText();
                if (type.equals("text")) {
                    parts.add(ContentPart.text(part.get("text").asText()));
                } else if (type.equals("image")) {
                    parts.add(ContentPart.image(part.get("index").asInt()));
                    images++;
                } else {
                    parts.add(ContentPart.video(part.get("index").asInt()));
                    videos++;
                }
            }
            turns.add(
                    new ChatMessage(
                            message.get("role").asText(), parts.toArray(new ContentPart[0])));
        }
        int ps = preset.visionConfig().patchSize;
        long[] imageGrids = GoldenSet.longs(row.get("image_grid_thw"));
        ImageRef[] imageRefs = new ImageRef[images];
        PreprocessedImage[] preprocessed = new PreprocessedImage[images];
        for (int i = 0; i < images; i++) {
            imageRefs[i] = new ImageRef("image-" + i + ".png", 0, 0);
            int gh = (int) imageGrids[3 * i + 1];
            int gw = (int) imageGrids[3 * i + 2];
            preprocessed[i] =
                    new PreprocessedImage(
                            new byte[gh * ps * gw * ps * 3], (int) imageGrids[3 * i], gh, gw);
        }
        SftRecord record =
                new SftRecord(
                        new RecordRef("chats", 1, 0, (String) row.get("chat")),
                        turns.toArray(new ChatMessage[0]),
                        imageRefs);
        record.videos = new VideoRef[videos];
        SampledVideo[] sampled = new SampledVideo[videos];
        long[] shapes = GoldenSet.longs(row.get("frames_shape"));
        long[] grids = GoldenSet.longs(row.get("video_grid_thw"));
        for (int v = 0; v < videos; v++) {
            record.videos[v] = new VideoRef("video-" + v + ".mp4", 0, 0, 0);
            SampledVideo video = new SampledVideo();
            video.resizedRgb = (byte[]) ((List<?>) row.get("frames")).get(v);
            video.frames = (int) shapes[4 * v];
            video.gridT = (int) grids[3 * v];
            video.gridH = (int) grids[3 * v + 1];
            video.gridW = (int) grids[3 * v + 2];
            video.frameIndices =
                    Arrays.stream(GoldenSet.longs(((List<?>) row.get("frames_indices")).get(v)))
                            .mapToInt(i -> (int) i)
                            .toArray();
            video.videoFps = (Double) ((List<?>) row.get("video_fps")).get(v);
            long total = GoldenSet.longs(row.get("total_num_frames"))[v];
            video.sampledFps = QwenVideoProcessor.sampledFps(video.frames, total, video.videoFps);
            video.secondPerGridT = 2 / video.sampledFps;
            sampled[v] = video;
        }
        PreprocessedRecord input = new PreprocessedRecord(record, preprocessed);
        input.videos = sampled;
        return input;
    }
}
