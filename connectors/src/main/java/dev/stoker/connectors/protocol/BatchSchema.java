package dev.stoker.connectors.protocol;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.arrow.vector.types.FloatingPointPrecision;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.FieldType;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * The Arrow schema of one batch file, as defined in {@code schema/batch-schema.json}.
 *
 * <p>Columns: {@code sample_index} int64, {@code source} utf8 (the sample's mixture source name),
 * {@code location} utf8 ({@code <JSONL file URI>:<1-based line>}), {@code input_ids}, {@code
 * labels} and {@code attention_mask} fixed_size_list&lt;int64&gt;[L], {@code pixel_values}
 * list&lt;fixed_size_list&lt;float32&gt;[D]&gt; (with {@link PixelDtype#BFLOAT16}:
 * list&lt;fixed_size_list&lt;uint16&gt;[D]&gt; holding bfloat16 bits; with {@link
 * PixelDtype#UINT8}: list&lt;fixed_size_list&lt;uint8&gt;[D]&gt; holding the samples before
 * normalisation), {@code image_grid_thw} list&lt;fixed_size_list&lt;int64&gt;[3]&gt;, {@code
 * pixel_values_videos} (as {@code pixel_values}), {@code video_grid_thw} (as {@code
 * image_grid_thw}), {@code second_per_grid_ts} list&lt;float32&gt;. L (padded sequence length)
 * varies per batch. Packed batches ({@link #forPackedBatch}) differ as the document's {@code
 * packed} entries say and add the {@code packed_only} columns.
 */
public final class BatchSchema {
    public static final int FORMAT_VERSION = 4;
    public static final String SAMPLE_INDEX = "sample_index";
    public static final String SOURCE = "source";
    public static final String LOCATION = "location";
    public static final String INPUT_IDS = "input_ids";
    public static final String LABELS = "labels";
    public static final String ATTENTION_MASK = "attention_mask";
    public static final String PIXEL_VALUES = "pixel_values";
    public static final String IMAGE_GRID_THW = "image_grid_thw";

    /** Video patches, as {@link #PIXEL_VALUES} of the same element type. */
    public static final String PIXEL_VALUES_VIDEOS = "pixel_values_videos";

    /** (grid_t, grid_h, grid_w) per video. */
    public static final String VIDEO_GRID_THW = "video_grid_thw";

    /** Seconds per temporal patch per video (float32). */
    public static final String SECOND_PER_GRID_TS = "second_per_grid_ts";

    /** Packed batches only: each row's 4 position axes (text, M-RoPE temporal, height, width). */
    public static final String POSITION_IDS = "position_ids";

    /** Packed batches only: each row's sub-sequence boundaries. */
    public static final String CU_SEQLENS = "cu_seqlens";

    /** Schema metadata {@code stoker.format_version}: {@link #FORMAT_VERSION}. */
    public static final String FORMAT_VERSION_KEY = "stoker.format_version";

    /** Schema metadata {@code stoker.step}: the 0-based step. */
    public static final String STEP_KEY = "stoker.step";

    /** Schema metadata {@code stoker.rank}: the 0-based DP rank. */
    public static final String RANK_KEY = "stoker.rank";

    /** Schema metadata {@code stoker.slots}: the micro-batch size B. */
    public static final String SLOTS_KEY = "stoker.slots";

    /** Schema metadata {@code stoker.backfilled_slots}: comma-separated back-filled rows. */
    public static final String BACKFILLED_SLOTS_KEY = "stoker.backfilled_slots";

    /** Schema metadata {@code stoker.pad_token_id}: the token id padding {@code input_ids}. */
    public static final String PAD_TOKEN_ID_KEY = "stoker.pad_token_id";

    /** Schema metadata {@code stoker.image_token_id}: the id of {@code <|image_pad|>}. */
    public static final String IMAGE_TOKEN_ID_KEY = "stoker.image_token_id";

    /** Schema metadata {@code stoker.video_token_id}: the id of {@code <|video_pad|>}. */
    public static final String VIDEO_TOKEN_ID_KEY = "stoker.video_token_id";

    /** Schema metadata naming the element type of {@code pixel_values}: {@link PixelDtype}. */
    public static final String PIXEL_DTYPE_KEY = "stoker.pixel_dtype";

    /**
     * Schema metadata {@code stoker.packing_max_tokens}: tokens per packed row; only in packed
     * batches.
     */
    public static final String PACKING_MAX_TOKENS_KEY = "stoker.packing_max_tokens";

    /**
     * Every schema metadata key of a batch file, in the order the sink writes them; the last,
     * {@link #PACKING_MAX_TOKENS_KEY}, only in packed batches.
     */
    public static final List<String> METADATA_KEYS =
            List.of(
                    FORMAT_VERSION_KEY,
                    STEP_KEY,
                    RANK_KEY,
                    SLOTS_KEY,
                    BACKFILLED_SLOTS_KEY,
                    PAD_TOKEN_ID_KEY,
                    IMAGE_TOKEN_ID_KEY,
                    VIDEO_TOKEN_ID_KEY,
                    PIXEL_DTYPE_KEY,
                    PACKING_MAX_TOKENS_KEY);

    /** Label value of positions that are not trained. */
    public static final long IGNORE_INDEX = -100;

    private static final ArrowType INT64 = new ArrowType.Int(64, true);
    private static final ArrowType INT32 = new ArrowType.Int(32, true);
    private static final ArrowType FLOAT32 =
            new ArrowType.FloatingPoint(FloatingPointPrecision.SINGLE);
    private static final ArrowType UINT16 = new ArrowType.Int(16, false);
    private static final ArrowType UINT8 = new ArrowType.Int(8, false);

    private BatchSchema() {}

    /**
     * The schema of a batch with padded sequence length {@code seqLen}, patch width {@code
     * patchDim} and {@code pixel_values} elements of type {@code pixelDtype}, with the batch's
     * metadata attached.
     */
    public static Schema forBatch(
            int seqLen, int patchDim, PixelDtype pixelDtype, Map<String, String> metadata) {
        return new Schema(columns(seqLen, patchDim, pixelDtype, false), metadata);
    }

    /**
     * The schema of a packed batch: as {@link #forBatch}, but {@code sample_index}, {@code source}
     * and {@code location} are a list per row (the row's samples), and {@code position_ids}
     * (fixed_size_list&lt;int64&gt;[4L]) and {@code cu_seqlens} (list&lt;int32&gt;) follow.
     */
    public static Schema forPackedBatch(
            int seqLen, int patchDim, PixelDtype pixelDtype, Map<String, String> metadata) {
        return new Schema(columns(seqLen, patchDim, pixelDtype, true), metadata);
    }

    private static List<Field> columns(
            int seqLen, int patchDim, PixelDtype pixelDtype, boolean packed) {
        List<Field> fields = new ArrayList<>();
        fields.add(packed ? list(SAMPLE_INDEX, INT64) : scalar(SAMPLE_INDEX, INT64));
        for (String name : List.of(SOURCE, LOCATION)) {
            fields.add(
                    packed
                            ? list(name, ArrowType.Utf8.INSTANCE)
                            : scalar(name, ArrowType.Utf8.INSTANCE));
        }
        fields.add(fixedList(INPUT_IDS, seqLen, INT64));
        fields.add(fixedList(LABELS, seqLen, INT64));
        fields.add(fixedList(ATTENTION_MASK, seqLen, INT64));
        fields.add(listOfFixed(PIXEL_VALUES, patchDim, pixelItem(pixelDtype)));
        fields.add(listOfFixed(IMAGE_GRID_THW, 3, INT64));
        fields.add(listOfFixed(PIXEL_VALUES_VIDEOS, patchDim, pixelItem(pixelDtype)));
        fields.add(listOfFixed(VIDEO_GRID_THW, 3, INT64));
        fields.add(list(SECOND_PER_GRID_TS, FLOAT32));
        if (packed) {
            fields.add(fixedList(POSITION_IDS, 4 * seqLen, INT64));
            fields.add(list(CU_SEQLENS, INT32));
        }
        return fields;
    }

    private static ArrowType pixelItem(PixelDtype pixelDtype) {
        switch (pixelDtype) {
            case BFLOAT16:
                return UINT16;
            case UINT8:
                return UINT8;
            default:
                return FLOAT32;
        }
    }

    private static Field scalar(String name, ArrowType type) {
        return new Field(name, FieldType.notNullable(type), null);
    }

    private static Field fixedList(String name, int size, ArrowType item) {
        return new Field(
                name,
                FieldType.notNullable(new ArrowType.FixedSizeList(size)),
                List.of(scalar("item", item)));
    }

    private static Field list(String name, ArrowType item) {
        return new Field(
                name,
                FieldType.notNullable(ArrowType.List.INSTANCE),
                List.of(scalar("item", item)));
    }

    private static Field listOfFixed(String name, int size, ArrowType item) {
        return new Field(
                name,
                FieldType.notNullable(ArrowType.List.INSTANCE),
                List.of(fixedList("item", size, item)));
    }
}
