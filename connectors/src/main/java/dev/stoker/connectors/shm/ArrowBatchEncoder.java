package dev.stoker.connectors.shm;

import dev.stoker.connectors.protocol.BatchSchema;
import dev.stoker.connectors.protocol.PixelDtype;
import dev.stoker.operators.image.Patchifier;
import dev.stoker.operators.image.Patchifier.PatchRows;
import dev.stoker.operators.image.QwenVisionConfig;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import dev.stoker.operators.pack.MropePositions;
import dev.stoker.operators.tokenize.ChatTokenizer;
import java.nio.Buffer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.ShortBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.BaseFixedWidthVector;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.complex.FixedSizeListVector;
import org.apache.arrow.vector.complex.ListVector;
import org.apache.arrow.vector.ipc.message.ArrowFieldNode;

/**
 * Turns a {@link TrainingBatch} into a {@link VectorSchemaRoot} of the {@link BatchSchema}.
 *
 * <p>Each sample's {@code source} is its mixture source's name ({@link RecordRef#source}), its
 * {@code location} {@code <file>:<line>} ({@link RecordRef#file}, {@link RecordRef#line}). Token
 * columns are right-padded to the longest sample: {@code input_ids} with the pad token id, {@code
 * labels} with -100, {@code attention_mask} with 0. {@code pixel_values} are the samples' resized
 * RGB bytes normalised and patchified ({@link Patchifier}) patch row by patch row straight into the
 * Arrow buffer, as float32 or converted to bfloat16 ({@link PixelDtype}); with {@link
 * PixelDtype#UINT8} they are patchified only ({@link Patchifier#patchifyBytes}), one byte per
 * value, and the trainer normalises them. {@code pixel_values_videos} are the samples' video frames
 * the same way through {@link VideoPatchifier} (the video processor's arithmetic and layout), with
 * {@code video_grid_thw} and {@code second_per_grid_ts} (float32) beside them. A packed batch
 * ({@link TrainingBatch#rowOf}) puts its samples one after another in rows, labels -100 on each
 * sample's first token, and adds {@code position_ids} (each sample's own M-RoPE positions, {@link
 * MropePositions}) and {@code cu_seqlens}. The caller owns and closes the root.
 *
 * <p>Not thread-safe (the patchifier reuses a row buffer); one instance per sink writer.
 */
public final class ArrowBatchEncoder {
    private final Patchifier patchifier;
    private final VideoPatchifier videoPatchifier;
    private final MropePositions.VideoTime videoTime;
    private final int tokensPerSecond;
    private final int patchDim;
    private final long padTokenId;
    private final PixelDtype pixelDtype;
    private final short[] bf16Row;
    private final int mergeSize;
    private final int temporalPatchSize;

    /** Tokens per packed row, or 0 when this encoder writes unpacked batches. */
    private final int packingMaxTokens;

    /**
     * @param vision the vision settings the images were resized with (patch, merge and temporal
     *     patch sizes, mean and std); {@code pixel_values} rows have {@link
     *     QwenVisionConfig#patchDim()} values
     * @param padTokenId token id used to pad {@code input_ids}
     * @param pixelDtype element type of the {@code pixel_values} column
     */
    public ArrowBatchEncoder(QwenVisionConfig vision, long padTokenId, PixelDtype pixelDtype) {
        this(vision, padTokenId, pixelDtype, 0, MropePositions.VideoTime.PATCH_INDEX, 0);
    }

    /**
     * @param vision the vision settings the images were resized with
     * @param padTokenId token id used to pad {@code input_ids}
     * @param pixelDtype element type of the {@code pixel_values} column
     * @param packingMaxTokens tokens per packed row ({@code stoker.packing.max-tokens}): the
     *     encoder then takes packed batches only; 0 for unpacked batches only
     * @param videoTime the model's temporal placement of videos in a packed row's {@code
     *     position_ids} ({@code ModelPreset#videoTime})
     * @param tokensPerSecond the model's {@code tokens_per_second} ({@link
     *     MropePositions.VideoTime#ABSOLUTE_TIME} only; {@code ModelPreset#tokensPerSecond})
     * @throws IllegalArgumentException if {@code packingMaxTokens} is negative
     */
    public ArrowBatchEncoder(
            QwenVisionConfig vision,
            long padTokenId,
            PixelDtype pixelDtype,
            int packingMaxTokens,
            MropePositions.VideoTime videoTime,
            int tokensPerSecond) {
        if (packingMaxTokens < 0) {
            throw new IllegalArgumentException(
                    "packingMaxTokens must be >= 0, got " + packingMaxTokens);
        }
        this.packingMaxTokens = packingMaxTokens;
        this.videoTime = videoTime;
        this.tokensPerSecond = tokensPerSecond;
        this.mergeSize = vision.mergeSize;
        this.temporalPatchSize = vision.temporalPatchSize;
        this.patchifier = new Patchifier(vision);
        this.videoPatchifier = new VideoPatchifier(vision);
        this.patchDim = vision.patchDim();
        this.padTokenId = padTokenId;
        this.pixelDtype = pixelDtype;
        this.bf16Row = new short[patchDim];
    }

    /**
     * Encodes an unpacked batch ({@link TrainingBatch#rowOf} {@code null}: one sample per row) or,
     * when this encoder packs, a packed one (several samples per row, with {@code position_ids} and
     * {@code cu_seqlens}).
     *
     * @throws IllegalArgumentException if a sample has no mixture source name ({@link
     *     RecordRef#source} {@code null}) or its arrays are inconsistent (labels length differs
     *     from input_ids, image_grid_thw not {@code (n, 3)} with grid_t 1 and grid sides multiples
     *     of merge_size, resized RGB bytes not exactly those of the grids, image tokens that do not
     *     match the grids), a packed batch's rows are not non-decreasing from 0 or longer than the
     *     row size, or the batch is packed and this encoder does not pack, or the reverse
     */
    public VectorSchemaRoot encode(TrainingBatch batch, BufferAllocator allocator) {
        boolean packed = batch.rowOf != null;
        if (packed != (packingMaxTokens > 0)) {
            throw new IllegalArgumentException(
                    "batch (step "
                            + batch.step
                            + ", rank "
                            + batch.rank
                            + ") is "
                            + (packed ? "packed" : "not packed")
                            + " but the sink "
                            + (packed ? "does not pack" : "packs"));
        }
        for (TokenizedSample s : batch.samples) {
            check(s);
        }
        int[][] rows = rows(batch);
        int seqLen = seqLen(batch, rows);
        if (packed && seqLen > packingMaxTokens) {
            throw new IllegalArgumentException(
                    "batch (step "
                            + batch.step
                            + ", rank "
                            + batch.rank
                            + ") has a row of "
                            + seqLen
                            + " tokens, more than "
                            + packingMaxTokens);
        }
        // insertion-ordered, so the file's bytes do not depend on the JVM's Map.of iteration order
        Map<String, String> metadata = new LinkedHashMap<>();
        metadata.put(BatchSchema.FORMAT_VERSION_KEY, String.valueOf(BatchSchema.FORMAT_VERSION));
        metadata.put(BatchSchema.STEP_KEY, String.valueOf(batch.step));
        metadata.put(BatchSchema.RANK_KEY, String.valueOf(batch.rank));
        metadata.put(BatchSchema.SLOTS_KEY, String.valueOf(batch.slots));
        metadata.put(
                BatchSchema.BACKFILLED_SLOTS_KEY,
                Arrays.stream(batch.backfilledSlots)
                        .mapToObj(String::valueOf)
                        .collect(Collectors.joining(",")));
        metadata.put(BatchSchema.PAD_TOKEN_ID_KEY, String.valueOf(padTokenId));
        metadata.put(BatchSchema.IMAGE_TOKEN_ID_KEY, String.valueOf(ChatTokenizer.IMAGE_PAD));
        metadata.put(BatchSchema.VIDEO_TOKEN_ID_KEY, String.valueOf(ChatTokenizer.VIDEO_PAD));
        metadata.put(BatchSchema.PIXEL_DTYPE_KEY, pixelDtype.metadataName);
        if (packed) {
            metadata.put(BatchSchema.PACKING_MAX_TOKENS_KEY, String.valueOf(packingMaxTokens));
        }
        VectorSchemaRoot root =
                VectorSchemaRoot.create(
                        packed
                                ? BatchSchema.forPackedBatch(seqLen, patchDim, pixelDtype, metadata)
                                : BatchSchema.forBatch(seqLen, patchDim, pixelDtype, metadata),
                        allocator);
        fillProvenance(root, batch, rows, packed);
        fillTokens(root, BatchSchema.INPUT_IDS, batch, rows, seqLen, Column.INPUT_IDS);
        fillTokens(root, BatchSchema.LABELS, batch, rows, seqLen, Column.LABELS);
        fillTokens(root, BatchSchema.ATTENTION_MASK, batch, rows, seqLen, Column.ATTENTION_MASK);
        fillPixels((ListVector) root.getVector(BatchSchema.PIXEL_VALUES), batch, rows, false);
        fillGrids((ListVector) root.getVector(BatchSchema.IMAGE_GRID_THW), batch, rows, false);
        fillPixels((ListVector) root.getVector(BatchSchema.PIXEL_VALUES_VIDEOS), batch, rows, true);
        fillGrids((ListVector) root.getVector(BatchSchema.VIDEO_GRID_THW), batch, rows, true);
        fillSeconds((ListVector) root.getVector(BatchSchema.SECOND_PER_GRID_TS), batch, rows);
        if (packed) {
            fillPositions(root, batch, rows, seqLen);
            fillCuSeqlens((ListVector) root.getVector(BatchSchema.CU_SEQLENS), batch, rows, seqLen);
        }
        root.setRowCount(rows.length);
        return root;
    }

    /**
     * The samples of each row: {@code {k}} for row {@code k} of an unpacked batch; the runs of
     * {@link TrainingBatch#rowOf} of a packed one (each row holds at least one sample).
     *
     * @throws IllegalArgumentException if a packed batch's rows are not non-decreasing from 0
     */
    static int[][] rows(TrainingBatch batch) {
        int n = batch.samples.length;
        if (batch.rowOf == null) {
            int[][] rows = new int[n][];
            for (int k = 0; k < n; k++) {
                rows[k] = new int[] {k};
            }
            return rows;
        }
        int[] rowOf = batch.rowOf;
        if (rowOf.length != n) {
            throw new IllegalArgumentException(
                    "rowOf has " + rowOf.length + " entries for " + n + " samples");
        }
        int count = n == 0 ? 0 : rowOf[n - 1] + 1;
        int[] sizes = new int[count];
        for (int k = 0; k < n; k++) {
            boolean next =
                    k == 0
                            ? rowOf[0] == 0
                            : rowOf[k] == rowOf[k - 1] || rowOf[k] == rowOf[k - 1] + 1;
            if (!next) {
                throw new IllegalArgumentException(
                        "rowOf must count rows 0, 1, ... without gaps; got "
                                + Arrays.toString(rowOf));
            }
            sizes[rowOf[k]]++;
        }
        int[][] rows = new int[count][];
        int k = 0;
        for (int r = 0; r < count; r++) {
            rows[r] = new int[sizes[r]];
            for (int i = 0; i < sizes[r]; i++) {
                rows[r][i] = k++;
            }
        }
        return rows;
    }

    /** The tokens of {@code row}: its samples' {@code input_ids} lengths summed. */
    static int rowTokens(TrainingBatch batch, int[] row) {
        int length = 0;
        for (int k : row) {
            length += batch.samples[k].inputIds.length;
        }
        return length;
    }

    /** The padded length {@code L} of the token columns, in tokens: the longest row's tokens. */
    static int seqLen(TrainingBatch batch, int[][] rows) {
        int seqLen = 0;
        for (int[] row : rows) {
            seqLen = Math.max(seqLen, rowTokens(batch, row));
        }
        return seqLen;
    }

    /**
     * {@code sample_index}, {@code source} (the sample's mixture source name) and {@code location}
     * ({@code <file>:<line>}) of every sample: one value per row when unpacked; when packed a list
     * per row, the row's samples in order.
     */
    private static void fillProvenance(
            VectorSchemaRoot root, TrainingBatch batch, int[][] rows, boolean packed) {
        List<ListVector> lists = new ArrayList<>();
        if (packed) {
            for (String name :
                    List.of(BatchSchema.SAMPLE_INDEX, BatchSchema.SOURCE, BatchSchema.LOCATION)) {
                ListVector list = (ListVector) root.getVector(name);
                list.allocateNew();
                lists.add(list);
            }
        }
        BigIntVector index = (BigIntVector) values(root, BatchSchema.SAMPLE_INDEX, packed);
        VarCharVector source = (VarCharVector) values(root, BatchSchema.SOURCE, packed);
        VarCharVector location = (VarCharVector) values(root, BatchSchema.LOCATION, packed);
        int n = batch.samples.length;
        index.allocateNew(n);
        source.allocateNew(n);
        location.allocateNew(n);
        for (int k = 0; k < n; k++) {
            RecordRef ref = batch.samples[k].ref;
            index.setSafe(k, ref.sampleIndex);
            source.setSafe(k, ref.source.getBytes(StandardCharsets.UTF_8));
            location.setSafe(k, (ref.file + ":" + ref.line).getBytes(StandardCharsets.UTF_8));
        }
        index.setValueCount(n);
        source.setValueCount(n);
        location.setValueCount(n);
        for (ListVector list : lists) {
            for (int r = 0; r < rows.length; r++) {
                list.startNewValue(r);
                list.endValue(r, rows[r].length);
            }
            list.setValueCount(rows.length);
        }
    }

    /** The vector of a column's values: the column when unpacked, its list's items when packed. */
    private static FieldVector values(VectorSchemaRoot root, String name, boolean packed) {
        FieldVector column = root.getVector(name);
        return packed ? ((ListVector) column).getDataVector() : column;
    }

    private enum Column {
        INPUT_IDS,
        LABELS,
        ATTENTION_MASK
    }

    private void fillTokens(
            VectorSchemaRoot root,
            String name,
            TrainingBatch batch,
            int[][] rows,
            int seqLen,
            Column col) {
        FixedSizeListVector list = (FixedSizeListVector) root.getVector(name);
        BigIntVector values = (BigIntVector) list.getDataVector();
        boolean packed = batch.rowOf != null;
        list.setInitialCapacity(rows.length);
        list.allocateNew();
        for (int r = 0; r < rows.length; r++) {
            int t = 0;
            for (int k : rows[r]) {
                TokenizedSample s = batch.samples[k];
                int n = s.inputIds.length;
                for (int i = 0; i < n; i++, t++) {
                    long v;
                    if (col == Column.ATTENTION_MASK) {
                        v = 1;
                    } else if (col == Column.LABELS) {
                        // packed: a sample's first token is never a target, so a shifted loss
                        // never trains the previous sample's last token on it
                        v = packed && i == 0 ? BatchSchema.IGNORE_INDEX : s.labels[i];
                    } else {
                        v = s.inputIds[i];
                    }
                    values.set(r * seqLen + t, v);
                }
            }
            long pad =
                    col == Column.ATTENTION_MASK
                            ? 0
                            : col == Column.LABELS ? BatchSchema.IGNORE_INDEX : padTokenId;
            for (; t < seqLen; t++) {
                values.set(r * seqLen + t, pad);
            }
            list.setNotNull(r);
        }
        values.setValueCount(rows.length * seqLen);
        list.setValueCount(rows.length);
    }

    /**
     * {@code position_ids} of a packed batch: per row the 4 axes ({@link MropePositions}) of each
     * sample on its own, one after another, and a padding tail counting from 0 on every axis.
     */
    private void fillPositions(
            VectorSchemaRoot root, TrainingBatch batch, int[][] rows, int seqLen) {
        FixedSizeListVector list = (FixedSizeListVector) root.getVector(BatchSchema.POSITION_IDS);
        BigIntVector values = (BigIntVector) list.getDataVector();
        int axes = MropePositions.AXES;
        list.setInitialCapacity(rows.length);
        list.allocateNew();
        for (int r = 0; r < rows.length; r++) {
            long base = (long) r * axes * seqLen;
            int t = 0;
            for (int k : rows[r]) {
                TokenizedSample s = batch.samples[k];
                long[][] pos;
                try {
                    pos =
                            MropePositions.of(
                                    s.inputIds,
                                    s.imageGridThw,
                                    s.videoGridThw,
                                    s.secondPerGridTs,
                                    ChatTokenizer.IMAGE_PAD,
                                    ChatTokenizer.VIDEO_PAD,
                                    mergeSize,
                                    videoTime,
                                    tokensPerSecond);
                } catch (IllegalArgumentException e) {
                    throw new IllegalArgumentException(s.ref + ": " + e.getMessage(), e);
                }
                for (int a = 0; a < axes; a++) {
                    for (int i = 0; i < pos[a].length; i++) {
                        values.set(Math.toIntExact(base + (long) a * seqLen + t + i), pos[a][i]);
                    }
                }
                t += s.inputIds.length;
            }
            for (int a = 0; a < axes; a++) {
                for (int i = t; i < seqLen; i++) {
                    values.set(Math.toIntExact(base + (long) a * seqLen + i), i - t);
                }
            }
            list.setNotNull(r);
        }
        values.setValueCount(rows.length * axes * seqLen);
        list.setValueCount(rows.length);
    }

    /** {@code cu_seqlens} of a packed batch: each row's sub-sequence boundaries, ending at L. */
    private static void fillCuSeqlens(
            ListVector list, TrainingBatch batch, int[][] rows, int seqLen) {
        IntVector values = (IntVector) list.getDataVector();
        list.allocateNew();
        int v = 0;
        for (int r = 0; r < rows.length; r++) {
            list.startNewValue(r);
            int start = v;
            int t = 0;
            values.setSafe(v++, 0);
            for (int k : rows[r]) {
                t += batch.samples[k].inputIds.length;
                values.setSafe(v++, t);
            }
            if (t < seqLen) {
                values.setSafe(v++, seqLen);
            }
            list.endValue(r, v - start);
        }
        values.setValueCount(v);
        list.setValueCount(rows.length);
    }

    /**
     * The pixel column: its list offsets, every patch valid, and the values written sample by
     * sample. The values' buffer is not zeroed first (a batch's is tens of MB, and Arrow's {@code
     * allocateNew} zeroing it was 1.8% of the embedded job's CPU, bench/README.md): every byte of
     * it is written, which {@link #putPixels} and {@link #putVideoPixels} check.
     */
    private void fillPixels(ListVector list, TrainingBatch batch, int[][] rows, boolean videos) {
        FixedSizeListVector patches = (FixedSizeListVector) list.getDataVector();
        BaseFixedWidthVector values = (BaseFixedWidthVector) patches.getDataVector();
        int totalPatches = 0;
        for (TokenizedSample s : batch.samples) {
            totalPatches += numPatches(videos ? s.videoGridThw : s.imageGridThw);
        }
        int valueCount = Math.multiplyExact(totalPatches, patchDim);
        list.allocateNew();
        patches.setInitialCapacity(totalPatches);
        values.setInitialCapacity(0); // its buffers are loaded below
        patches.allocateNew();
        try (ArrowBuf data = values.getAllocator().buffer((long) valueCount * pixelDtype.bytes)) {
            // a null validity buffer with no nulls: Arrow makes one with every value valid
            values.loadFieldBuffers(new ArrowFieldNode(valueCount, 0), Arrays.asList(null, data));
        }
        int patch = 0;
        long offset = 0;
        for (int r = 0; r < rows.length; r++) {
            list.startNewValue(r);
            int rowPatches = 0;
            for (int k : rows[r]) {
                TokenizedSample s = batch.samples[k];
                int n = numPatches(videos ? s.videoGridThw : s.imageGridThw);
                if (videos) {
                    putVideoPixels(values.getDataBuffer(), offset, n, s);
                } else {
                    putPixels(values.getDataBuffer(), offset, n, s);
                }
                offset += (long) n * patchDim * pixelDtype.bytes;
                rowPatches += n;
            }
            for (int i = 0; i < rowPatches; i++) {
                patches.setNotNull(patch++);
            }
            list.endValue(r, rowPatches);
        }
        values.setValueCount(valueCount);
        patches.setValueCount(patch);
        list.setValueCount(rows.length);
    }

    /**
     * Writes the {@code patches} rows of {@code s}'s images at byte {@code offset} of {@code data}
     * in the column's element type.
     */
    private void putPixels(ArrowBuf data, long offset, int patches, TokenizedSample s) {
        if (patches == 0) {
            return;
        }
        ByteBuffer view =
                data.nioBuffer(
                                offset,
                                Math.toIntExact((long) patches * patchDim * pixelDtype.bytes))
                        .order(ByteOrder.LITTLE_ENDIAN);
        long[] thw = s.imageGridThw;
        if (pixelDtype == PixelDtype.UINT8) {
            int rgbOffset = 0;
            for (int i = 0; i < thw.length; i += 3) {
                int gridH = (int) thw[i + 1];
                int gridW = (int) thw[i + 2];
                patchifier.patchifyBytes(s.resizedRgb, rgbOffset, gridH, gridW, view::put);
                rgbOffset += patchifier.rgbLength(gridH, gridW);
            }
            checkFilled(view, s);
            return;
        }
        Buffer typed = typedView(view);
        PatchRows out = rowWriter(typed);
        int rgbOffset = 0;
        for (int i = 0; i < thw.length; i += 3) {
            int gridH = (int) thw[i + 1];
            int gridW = (int) thw[i + 2];
            patchifier.patchify(s.resizedRgb, rgbOffset, gridH, gridW, out);
            rgbOffset += patchifier.rgbLength(gridH, gridW);
        }
        checkFilled(typed, s);
    }

    /** {@code view} as the column's element type: a float or (bfloat16) short buffer. */
    private Buffer typedView(ByteBuffer view) {
        return pixelDtype == PixelDtype.BFLOAT16 ? view.asShortBuffer() : view.asFloatBuffer();
    }

    /** Writes a normalised patch row into {@code typed} ({@link #typedView}) in its type. */
    private PatchRows rowWriter(Buffer typed) {
        if (typed instanceof ShortBuffer shorts) {
            return row -> {
                for (int i = 0; i < patchDim; i++) {
                    bf16Row[i] = PixelDtype.toBfloat16(row[i]);
                }
                shorts.put(bf16Row);
            };
        }
        return ((FloatBuffer) typed)::put;
    }

    /**
     * The pixel buffer is not zeroed ({@link #fillPixels}), so a sample's patches must fill its
     * whole slice of it.
     *
     * @throws IllegalStateException if {@code written} has room left
     */
    private static void checkFilled(Buffer written, TokenizedSample s) {
        if (written.hasRemaining()) {
            throw new IllegalStateException(
                    s.ref
                            + ": its patches filled "
                            + written.position()
                            + " of the "
                            + written.limit()
                            + " pixel values its grids need");
        }
    }

    /**
     * Writes the {@code patches} rows of {@code s}'s videos ({@link VideoPatchifier}) at byte
     * {@code offset} of {@code data} in the column's element type.
     */
    private void putVideoPixels(ArrowBuf data, long offset, int patches, TokenizedSample s) {
        if (patches == 0) {
            return;
        }
        ByteBuffer view =
                data.nioBuffer(
                                offset,
                                Math.toIntExact((long) patches * patchDim * pixelDtype.bytes))
                        .order(ByteOrder.LITTLE_ENDIAN);
        Buffer typed = pixelDtype == PixelDtype.UINT8 ? view : typedView(view);
        VideoPatchifier.Rows out = pixelDtype == PixelDtype.UINT8 ? null : rowWriter(typed)::accept;
        long[] thw = s.videoGridThw;
        int rgbOffset = 0;
        for (int v = 0; v < thw.length / 3; v++) {
            int frames = s.videoFrames[v];
            int gridT = (int) thw[3 * v];
            int gridH = (int) thw[3 * v + 1];
            int gridW = (int) thw[3 * v + 2];
            if (pixelDtype == PixelDtype.UINT8) {
                videoPatchifier.patchifyBytes(
                        s.videoRgb, rgbOffset, frames, gridT, gridH, gridW, view::put);
            } else {
                videoPatchifier.patchify(s.videoRgb, rgbOffset, frames, gridT, gridH, gridW, out);
            }
            rgbOffset += (int) videoPatchifier.rgbLength(frames, gridH, gridW);
        }
        checkFilled(typed, s);
    }

    /** {@code second_per_grid_ts}: per row its samples' videos' values, as float32. */
    private static void fillSeconds(ListVector list, TrainingBatch batch, int[][] rows) {
        Float4Vector values = (Float4Vector) list.getDataVector();
        list.allocateNew();
        int v = 0;
        for (int r = 0; r < rows.length; r++) {
            list.startNewValue(r);
            int start = v;
            for (int k : rows[r]) {
                for (double seconds : batch.samples[k].secondPerGridTs) {
                    values.setSafe(v++, (float) seconds);
                }
            }
            list.endValue(r, v - start);
        }
        values.setValueCount(v);
        list.setValueCount(rows.length);
    }

    private static int numPatches(long[] thw) {
        int patches = 0;
        for (int i = 0; i < thw.length; i += 3) {
            patches += (int) (thw[i] * thw[i + 1] * thw[i + 2]);
        }
        return patches;
    }

    private static void fillGrids(
            ListVector list, TrainingBatch batch, int[][] rows, boolean videos) {
        FixedSizeListVector triples = (FixedSizeListVector) list.getDataVector();
        BigIntVector values = (BigIntVector) triples.getDataVector();
        int images = 0;
        for (TokenizedSample s : batch.samples) {
            images += (videos ? s.videoGridThw : s.imageGridThw).length / 3;
        }
        list.allocateNew();
        triples.setInitialCapacity(images);
        triples.allocateNew();
        int image = 0;
        for (int r = 0; r < rows.length; r++) {
            list.startNewValue(r);
            int rowImages = 0;
            for (int k : rows[r]) {
                TokenizedSample s = batch.samples[k];
                long[] thw = videos ? s.videoGridThw : s.imageGridThw;
                for (int i = 0; i < thw.length; i++) {
                    values.set(image * 3 + (i % 3), thw[i]);
                    if (i % 3 == 2) {
                        triples.setNotNull(image++);
                    }
                }
                rowImages += thw.length / 3;
            }
            list.endValue(r, rowImages);
        }
        values.setValueCount(image * 3);
        triples.setValueCount(image);
        list.setValueCount(rows.length);
    }

    private void check(TokenizedSample s) {
        if (s.ref.source == null) {
            throw new IllegalArgumentException(
                    s.ref + ": no mixture source name (the batches' source column)");
        }
        if (s.labels.length != s.inputIds.length) {
            throw new IllegalArgumentException(
                    s.ref
                            + ": labels length "
                            + s.labels.length
                            + " != input_ids length "
                            + s.inputIds.length);
        }
        long[] thw = s.imageGridThw;
        if (thw == null || thw.length % 3 != 0) {
            throw new IllegalArgumentException(s.ref + ": image_grid_thw is not (n, 3)");
        }
        long rgbBytes = 0;
        for (int i = 0; i < thw.length; i += 3) {
            if (thw[i] != 1 || thw[i + 1] < 1 || thw[i + 2] < 1) {
                throw new IllegalArgumentException(
                        s.ref
                                + ": image "
                                + i / 3
                                + " has grid_thw ("
                                + thw[i]
                                + ", "
                                + thw[i + 1]
                                + ", "
                                + thw[i + 2]
                                + "); still images have grid_t 1 and positive sides");
            }
            rgbBytes += patchifier.rgbLength((int) thw[i + 1], (int) thw[i + 2]);
        }
        int length = s.resizedRgb == null ? 0 : s.resizedRgb.length;
        if (length != rgbBytes) {
            throw new IllegalArgumentException(
                    s.ref
                            + ": "
                            + length
                            + " resized RGB bytes, but image_grid_thw needs "
                            + rgbBytes);
        }
        checkVideos(s);
    }

    private void checkVideos(TokenizedSample s) {
        long[] thw = s.videoGridThw;
        if (thw == null
                || thw.length % 3 != 0
                || s.videoFrames == null
                || s.videoFrames.length != thw.length / 3
                || s.secondPerGridTs == null
                || s.secondPerGridTs.length != thw.length / 3
                || s.videoRgb == null) {
            throw new IllegalArgumentException(
                    s.ref
                            + ": video_grid_thw is not (n, 3) with one frame count and one"
                            + " second_per_grid_ts per video, or the video pixels are missing");
        }
        long rgbBytes = 0;
        for (int v = 0; v < thw.length / 3; v++) {
            long gridT = thw[3 * v];
            long gridH = thw[3 * v + 1];
            long gridW = thw[3 * v + 2];
            int frames = s.videoFrames[v];
            if (gridH < 1
                    || gridW < 1
                    || gridH % mergeSize != 0
                    || gridW % mergeSize != 0
                    || frames < 1
                    || gridT != (frames + temporalPatchSize - 1) / temporalPatchSize) {
                throw new IllegalArgumentException(
                        s.ref
                                + ": video "
                                + v
                                + " has grid_thw ("
                                + gridT
                                + ", "
                                + gridH
                                + ", "
                                + gridW
                                + ") for "
                                + frames
                                + " frames; need grid_t = ceil(frames / temporal_patch_size) and"
                                + " sides positive"
                                + " multiples of merge_size");
            }
            rgbBytes += videoPatchifier.rgbLength(frames, (int) gridH, (int) gridW);
        }
        if (s.videoRgb.length != rgbBytes) {
            throw new IllegalArgumentException(
                    s.ref
                            + ": "
                            + s.videoRgb.length
                            + " video RGB bytes, but video_grid_thw and the frame counts need "
                            + rgbBytes);
        }
    }
}
