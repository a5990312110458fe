package dev.stoker.connectors.shm;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.connectors.protocol.BatchSchema;
import dev.stoker.connectors.protocol.PixelDtype;
import dev.stoker.operators.image.RgbImage;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import dev.stoker.operators.preset.ModelPreset;
import dev.stoker.operators.tokenize.ChatTokenizer;
import dev.stoker.operators.video.QwenVideoProcessor;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.UInt1Vector;
import org.apache.arrow.vector.UInt2Vector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.complex.FixedSizeListVector;
import org.apache.arrow.vector.complex.ListVector;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * {@code pixel_values_videos}, {@code video_grid_thw} and {@code second_per_grid_ts} of the sink's
 * batches: two samples, the first with two videos (5 frames, so the last temporal patch repeats its
 * last frame, and 4 frames), the second with none, in every pixel dtype and for a 14- and a
 * 16-pixel patch preset. The float32 rows are {@link QwenVideoProcessor#patchify}'s for the same
 * frames (the operators' video processor, bit-exact with Hugging Face's on the video goldens),
 * bfloat16 their rounding, uint8 the samples in the same positions.
 */
class VideoBatchEncodingTest {
    private final BufferAllocator allocator = new RootAllocator();

    @AfterEach
    void closeAllocator() {
        allocator.close();
    }

    @ParameterizedTest
    @EnumSource(
            value = ModelPreset.class,
            names = {"QWEN2_5_VL", "QWEN3_VL"})
    void videoColumnsHoldTheProcessorsRowsInEveryDtype(ModelPreset preset) throws Exception {
        int f = preset.videoConfig().factor();
        byte[][] videos = {frames(5, 2 * f, 3 * f, 1), frames(4, 2 * f, 2 * f, 2)};
        List<Float> expected = new ArrayList<>();
        QwenVideoProcessor processor = new QwenVideoProcessor(preset.videoConfig());
        int[][] sizes = {{5, 2 * f, 3 * f}, {4, 2 * f, 2 * f}};
        for (int v = 0; v < 2; v++) {
            List<RgbImage> list = new ArrayList<>();
            int frameBytes = sizes[v][1] * sizes[v][2] * 3;
            for (int i = 0; i < sizes[v][0]; i++) {
                list.add(
                        new RgbImage(
                                sizes[v][2],
                                sizes[v][1],
                                Arrays.copyOfRange(
                                        videos[v], i * frameBytes, (i + 1) * frameBytes)));
            }
            for (float value : processor.patchify(processor.resize(list))) {
                expected.add(value);
            }
        }
        int ps = preset.videoConfig().patchSize;
        long[] grids = {3, 2 * f / ps, 3 * f / ps, 2, 2 * f / ps, 2 * f / ps};
        byte[] rgb = new byte[videos[0].length + videos[1].length];
        System.arraycopy(videos[0], 0, rgb, 0, videos[0].length);
        System.arraycopy(videos[1], 0, rgb, videos[0].length, videos[1].length);
        TokenizedSample withVideos =
                sample("v").withVideos(rgb, grids, new int[] {5, 4}, new double[] {1.0, 0.4});
        TokenizedSample without = sample("n");

        for (PixelDtype dtype : PixelDtype.values()) {
            ArrowBatchEncoder encoder = new ArrowBatchEncoder(preset.visionConfig(), 0, dtype);
            TrainingBatch batch =
                    new TrainingBatch(
                            0, 0, 2, new TokenizedSample[] {withVideos, without}, new int[0]);
            try (VectorSchemaRoot root = encoder.encode(batch, allocator)) {
                assertThat(root.getSchema().getCustomMetadata())
                        .containsEntry(
                                BatchSchema.VIDEO_TOKEN_ID_KEY,
                                String.valueOf(ChatTokenizer.VIDEO_PAD));
                ListVector pixels = (ListVector) root.getVector(BatchSchema.PIXEL_VALUES_VIDEOS);
                assertThat(pixels.getElementEndIndex(0)).isEqualTo(expected.size() / dim(preset));
                assertThat(pixels.getElementEndIndex(1)).isEqualTo(pixels.getElementEndIndex(0));
                var values = ((FixedSizeListVector) pixels.getDataVector()).getDataVector();
                assertThat(values.getValueCount()).isEqualTo(expected.size());
                for (int i = 0; i < expected.size(); i++) {
                    float want = expected.get(i);
                    if (dtype == PixelDtype.FLOAT32) {
                        assertThat(((Float4Vector) values).get(i))
                                .as("value %d", i)
                                .isEqualTo(want);
                    } else if (dtype == PixelDtype.BFLOAT16) {
                        assertThat((short) ((UInt2Vector) values).get(i))
                                .as("value %d", i)
                                .isEqualTo(PixelDtype.toBfloat16(want));
                    } else {
                        int c = (i % dim(preset)) / (dim(preset) / 3);
                        int u = ((UInt1Vector) values).get(i) & 0xFF;
                        assertThat(normalise(preset, c, u)).as("value %d", i).isEqualTo(want);
                    }
                }
                ListVector grid = (ListVector) root.getVector(BatchSchema.VIDEO_GRID_THW);
                BigIntVector g =
                        (BigIntVector) ((FixedSizeListVector) grid.getDataVector()).getDataVector();
                assertThat(g.getValueCount()).isEqualTo(6);
                for (int i = 0; i < 6; i++) {
                    assertThat(g.get(i)).isEqualTo(grids[i]);
                }
                assertThat(grid.getElementEndIndex(1)).isEqualTo(2);
                ListVector seconds = (ListVector) root.getVector(BatchSchema.SECOND_PER_GRID_TS);
                Float4Vector s = (Float4Vector) seconds.getDataVector();
                assertThat(s.getValueCount()).isEqualTo(2);
                assertThat(s.get(0)).isEqualTo(1.0f);
                assertThat(s.get(1)).isEqualTo(0.4f);
                assertThat(seconds.getElementEndIndex(1)).isEqualTo(2);
            }
        }
    }

    @ParameterizedTest
    @EnumSource(value = ModelPreset.class, names = "QWEN2_VL")
    void framesThatDoNotMatchTheirGridAreRefusedNamingTheRecord(ModelPreset preset) {
        ArrowBatchEncoder encoder =
                new ArrowBatchEncoder(preset.visionConfig(), 0, PixelDtype.FLOAT32);
        byte[] rgb = frames(3, 28, 28, 0);
        TokenizedSample wrongBytes =
                sample("a")
                        .withVideos(
                                Arrays.copyOf(rgb, rgb.length - 1),
                                new long[] {2, 2, 2},
                                new int[] {3},
                                new double[] {1});
        assertThatThrownBy(() -> encode(encoder, wrongBytes))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("file:/d.jsonl")
                .hasMessageContaining("video RGB bytes, but video_grid_thw");
        TokenizedSample wrongGridT =
                sample("a").withVideos(rgb, new long[] {1, 2, 2}, new int[] {3}, new double[] {1});
        assertThatThrownBy(() -> encode(encoder, wrongGridT))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("grid_thw (1, 2, 2) for 3 frames");
    }

    private void encode(ArrowBatchEncoder encoder, TokenizedSample sample) {
        encoder.encode(
                        new TrainingBatch(0, 0, 1, new TokenizedSample[] {sample}, new int[0]),
                        allocator)
                .close();
    }

    private static int dim(ModelPreset preset) {
        return preset.videoConfig().patchDim();
    }

    /** The video processor's fused normalisation of sample {@code u} of channel {@code c}. */
    private static float normalise(ModelPreset preset, int c, int u) {
        float scale = (float) (1.0 / 0.00392156862745098);
        float mean = (float) preset.videoConfig().imageMean[c] * scale;
        float std = (float) preset.videoConfig().imageStd[c] * scale;
        return ((float) u - mean) / std;
    }

    private static TokenizedSample sample(String id) {
        return new TokenizedSample(
                new RecordRef("videos", "file:/d.jsonl", 7, 6, id),
                new long[] {1, 2},
                new long[] {-100, 2},
                new byte[0],
                new long[0]);
    }

    /** {@code n} frames of {@code h x w} with every byte value, different per frame. */
    private static byte[] frames(int n, int h, int w, int seed) {
        byte[] rgb = new byte[n * h * w * 3];
        for (int i = 0; i < rgb.length; i++) {
            rgb[i] = (byte) (i * 31 + i / 7 + seed * 101);
        }
        return rgb;
    }
}
