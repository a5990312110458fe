package dev.stoker.connectors.shm;

import dev.stoker.connectors.protocol.BatchSchema;
import dev.stoker.connectors.protocol.PixelDtype;
import dev.stoker.operators.image.Patchifier;
import dev.stoker.operators.image.Patchifier.PatchRows;
import dev.stoker.operators.image.QwenVisionConfig;
import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
import dev.stoker.operators.tokenize.ChatTokenizer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.ShortBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.stream.Collectors;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.BaseFixedWidthVector;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.BitVectorHelper;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.complex.FixedSizeListVector;
import org.apache.arrow.vector.complex.ListVector;

/**
 * Turns a {@link TrainingBatch} into a {@link VectorSchemaRoot} of the {@link BatchSchema}.
 *
 * <p>Token columns are right-padded to the longest sample: {@code input_ids} with the pad token id,
 * {@code labels} with -100, {@code attention_mask} with 0. {@code pixel_values} are the samples'
 * resized RGB bytes normalised and patchified ({@link Patchifier}) patch row by patch row straight
 * into the Arrow buffer, as float32 or converted to bfloat16 ({@link PixelDtype}); with {@link
 * PixelDtype#UINT8} they are patchified only ({@link Patchifier#patchifyBytes}), one byte per
 * value, and the trainer normalises them. The caller owns and closes the root.
 *
 * <p>Not thread-safe (the patchifier reuses a row buffer); one instance per sink writer.
 */
public final class ArrowBatchEncoder {
    private final Patchifier patchifier;
    private final int patchDim;
    private final long padTokenId;
    private final PixelDtype pixelDtype;
    private final short[] bf16Row;

    /**
     * @param vision the vision settings the images were resized with (patch, merge and temporal
     *     patch sizes, mean and std); {@code pixel_values} rows have {@link
     *     QwenVisionConfig#patchDim()} values
     * @param padTokenId token id used to pad {@code input_ids}
     * @param pixelDtype element type of the {@code pixel_values} column
     */
    public ArrowBatchEncoder(QwenVisionConfig vision, long padTokenId, PixelDtype pixelDtype) {
        this.patchifier = new Patchifier(vision);
        this.patchDim = vision.patchDim();
        this.padTokenId = padTokenId;
        this.pixelDtype = pixelDtype;
        this.bf16Row = new short[patchDim];
    }

    /**
     * @throws IllegalArgumentException if a sample's arrays are inconsistent (labels length differs
     *     from input_ids, image_grid_thw not {@code (n, 3)} with grid_t 1 and grid sides multiples
     *     of merge_size, resized RGB bytes not exactly those of the grids)
     */
    public VectorSchemaRoot encode(TrainingBatch batch, BufferAllocator allocator) {
        int rows = batch.samples.length;
        int seqLen = 0;
        for (TokenizedSample s : batch.samples) {
            check(s);
            seqLen = Math.max(seqLen, s.inputIds.length);
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
        metadata.put(BatchSchema.PIXEL_DTYPE_KEY, pixelDtype.metadataName);
        VectorSchemaRoot root =
                VectorSchemaRoot.create(
                        BatchSchema.forBatch(seqLen, patchDim, pixelDtype, metadata), allocator);
        BigIntVector index = (BigIntVector) root.getVector(BatchSchema.SAMPLE_INDEX);
        VarCharVector source = (VarCharVector) root.getVector(BatchSchema.SOURCE);
        index.allocateNew(rows);
        source.allocateNew(rows);
        for (int r = 0; r < rows; r++) {
            TokenizedSample s = batch.samples[r];
            index.setSafe(r, s.ref.sampleIndex);
            source.setSafe(r, (s.ref.file + ":" + s.ref.line).getBytes(StandardCharsets.UTF_8));
        }
        fillTokens(root, BatchSchema.INPUT_IDS, batch, seqLen, Column.INPUT_IDS);
        fillTokens(root, BatchSchema.LABELS, batch, seqLen, Column.LABELS);
        fillTokens(root, BatchSchema.ATTENTION_MASK, batch, seqLen, Column.ATTENTION_MASK);
        fillPixels((ListVector) root.getVector(BatchSchema.PIXEL_VALUES), batch);
        fillGrids((ListVector) root.getVector(BatchSchema.IMAGE_GRID_THW), batch);
        root.setRowCount(rows);
        return root;
    }

    private enum Column {
        INPUT_IDS,
        LABELS,
        ATTENTION_MASK
    }

    private void fillTokens(
            VectorSchemaRoot root, String name, TrainingBatch batch, int seqLen, Column col) {
        FixedSizeListVector list = (FixedSizeListVector) root.getVector(name);
        BigIntVector values = (BigIntVector) list.getDataVector();
        int rows = batch.samples.length;
        list.setInitialCapacity(rows);
        list.allocateNew();
        for (int r = 0; r < rows; r++) {
            TokenizedSample s = batch.samples[r];
            int n = s.inputIds.length;
            for (int t = 0; t < seqLen; t++) {
                long v;
                if (col == Column.ATTENTION_MASK) {
                    v = t < n ? 1 : 0;
                } else if (col == Column.LABELS) {
                    v = t < n ? s.labels[t] : BatchSchema.IGNORE_INDEX;
                } else {
                    v = t < n ? s.inputIds[t] : padTokenId;
                }
                values.set(r * seqLen + t, v);
            }
            list.setNotNull(r);
        }
        values.setValueCount(rows * seqLen);
        list.setValueCount(rows);
    }

    private void fillPixels(ListVector list, TrainingBatch batch) {
        FixedSizeListVector patches = (FixedSizeListVector) list.getDataVector();
        BaseFixedWidthVector values = (BaseFixedWidthVector) patches.getDataVector();
        int totalPatches = 0;
        for (TokenizedSample s : batch.samples) {
            totalPatches += numPatches(s);
        }
        list.allocateNew();
        patches.setInitialCapacity(totalPatches);
        patches.allocateNew();
        int patch = 0;
        long offset = 0;
        for (int r = 0; r < batch.samples.length; r++) {
            TokenizedSample s = batch.samples[r];
            int n = numPatches(s);
            list.startNewValue(r);
            putPixels(values.getDataBuffer(), offset, n, s);
            offset += (long) n * patchDim * pixelDtype.bytes;
            for (int i = 0; i < n; i++) {
                patches.setNotNull(patch++);
            }
            list.endValue(r, n);
        }
        int valueCount = totalPatches * patchDim;
        values.getValidityBuffer()
                .setOne(0, BitVectorHelper.getValidityBufferSizeFromCount(valueCount));
        values.setValueCount(valueCount);
        patches.setValueCount(patch);
        list.setValueCount(batch.samples.length);
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
            return;
        }
        PatchRows out;
        if (pixelDtype == PixelDtype.BFLOAT16) {
            ShortBuffer shorts = view.asShortBuffer();
            out =
                    row -> {
                        for (int i = 0; i < patchDim; i++) {
                            bf16Row[i] = PixelDtype.toBfloat16(row[i]);
                        }
                        shorts.put(bf16Row);
                    };
        } else {
            out = view.asFloatBuffer()::put;
        }
        int rgbOffset = 0;
        for (int i = 0; i < thw.length; i += 3) {
            int gridH = (int) thw[i + 1];
            int gridW = (int) thw[i + 2];
            patchifier.patchify(s.resizedRgb, rgbOffset, gridH, gridW, out);
            rgbOffset += patchifier.rgbLength(gridH, gridW);
        }
    }

    private static int numPatches(TokenizedSample s) {
        long[] thw = s.imageGridThw;
        int patches = 0;
        for (int i = 0; i < thw.length; i += 3) {
            patches += (int) (thw[i] * thw[i + 1] * thw[i + 2]);
        }
        return patches;
    }

    private static void fillGrids(ListVector list, TrainingBatch batch) {
        FixedSizeListVector triples = (FixedSizeListVector) list.getDataVector();
        BigIntVector values = (BigIntVector) triples.getDataVector();
        int images = 0;
        for (TokenizedSample s : batch.samples) {
            images += s.imageGridThw.length / 3;
        }
        list.allocateNew();
        triples.setInitialCapacity(images);
        triples.allocateNew();
        int image = 0;
        for (int r = 0; r < batch.samples.length; r++) {
            long[] thw = batch.samples[r].imageGridThw;
            list.startNewValue(r);
            for (int i = 0; i < thw.length; i++) {
                values.set(image * 3 + (i % 3), thw[i]);
                if (i % 3 == 2) {
                    triples.setNotNull(image++);
                }
            }
            list.endValue(r, thw.length / 3);
        }
        values.setValueCount(image * 3);
        triples.setValueCount(image);
        list.setValueCount(batch.samples.length);
    }

    private void check(TokenizedSample s) {
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
    }
}
