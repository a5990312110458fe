package dev.stoker.connectors.shm;

import dev.stoker.operators.model.TokenizedSample;
import dev.stoker.operators.model.TrainingBatch;
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
 * {@code labels} with -100, {@code attention_mask} with 0. {@code pixel_values} are copied into the
 * Arrow buffer in bulk, as float32 or converted to bfloat16 ({@link PixelDtype}). The caller owns
 * and closes the root.
 */
public final class ArrowBatchEncoder {
    private final int patchDim;
    private final long padTokenId;
    private final PixelDtype pixelDtype;

    /**
     * @param patchDim values per patch row (1176 for Qwen2-VL)
     * @param padTokenId token id used to pad {@code input_ids}
     * @param pixelDtype element type of the {@code pixel_values} column
     */
    public ArrowBatchEncoder(int patchDim, long padTokenId, PixelDtype pixelDtype) {
        this.patchDim = patchDim;
        this.padTokenId = padTokenId;
        this.pixelDtype = pixelDtype;
    }

    /**
     * @throws IllegalArgumentException if a sample's arrays are inconsistent (labels length differs
     *     from input_ids, pixel_values not a multiple of the patch width)
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
        metadata.put("stoker.format_version", String.valueOf(BatchSchema.FORMAT_VERSION));
        metadata.put("stoker.step", String.valueOf(batch.step));
        metadata.put("stoker.rank", String.valueOf(batch.rank));
        metadata.put("stoker.slots", String.valueOf(batch.slots));
        metadata.put(
                "stoker.backfilled_slots",
                Arrays.stream(batch.backfilledSlots)
                        .mapToObj(String::valueOf)
                        .collect(Collectors.joining(",")));
        metadata.put("stoker.pad_token_id", String.valueOf(padTokenId));
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
            totalPatches += s.pixelValues.length / patchDim;
        }
        list.allocateNew();
        patches.setInitialCapacity(totalPatches);
        patches.allocateNew();
        int patch = 0;
        long offset = 0;
        for (int r = 0; r < batch.samples.length; r++) {
            float[] px = batch.samples[r].pixelValues;
            list.startNewValue(r);
            offset = putPixels(values.getDataBuffer(), offset, px);
            int n = px.length / patchDim;
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
     * Writes {@code px} at byte {@code offset} of {@code data} in the column's element type (one
     * bulk copy for float32); returns the offset after it.
     */
    private long putPixels(ArrowBuf data, long offset, float[] px) {
        if (px.length == 0) {
            return offset;
        }
        int width = pixelDtype == PixelDtype.BFLOAT16 ? Short.BYTES : Float.BYTES;
        int bytes = px.length * width;
        ByteBuffer view = data.nioBuffer(offset, bytes).order(ByteOrder.LITTLE_ENDIAN);
        if (pixelDtype == PixelDtype.BFLOAT16) {
            ShortBuffer out = view.asShortBuffer();
            for (float v : px) {
                out.put(PixelDtype.toBfloat16(v));
            }
        } else {
            view.asFloatBuffer().put(px);
        }
        return offset + bytes;
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
        if (s.pixelValues.length % patchDim != 0 || s.imageGridThw.length % 3 != 0) {
            throw new IllegalArgumentException(
                    s.ref
                            + ": pixel_values length "
                            + s.pixelValues.length
                            + " is not a multiple of "
                            + patchDim
                            + " or image_grid_thw is not (n, 3)");
        }
    }
}
