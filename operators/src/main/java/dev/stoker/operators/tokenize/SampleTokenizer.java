package dev.stoker.operators.tokenize;

import dev.stoker.operators.model.PreprocessedImage;
import dev.stoker.operators.model.PreprocessedRecord;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.TokenizedSample;
import java.util.Arrays;

/**
 * Turns a {@link PreprocessedRecord} into a {@link TokenizedSample}: renders the chat with {@link
 * QwenChatTemplate}, encodes it with {@link ChatTokenizer}, applies the maximum sequence length,
 * and concatenates the kept images' resized RGB bytes and {@code image_grid_thw} (int64, {@code
 * (num_images, 3)} flattened) in image order. The pixel array of a sample with one image is passed
 * on as it is, not copied (the sample takes it over from the record).
 *
 * <p>A sample longer than {@code maxSeqLen} tokens is, by {@link SequenceLengthPolicy}, rejected
 * ({@link SequenceLengthPolicy#DROP}) or cut to at most {@code maxSeqLen} tokens ({@link
 * SequenceLengthPolicy#TRUNCATE}): {@code input_ids} and {@code labels} are cut at the same
 * position; when that position falls inside an image block ({@code <|vision_start|>} ... {@code
 * <|vision_end|>}) the cut moves to just before the block, and the images of that block and of
 * every later block are left out of the pixels and grids, so every kept image keeps all its tokens
 * and every kept image token has its image.
 */
public final class SampleTokenizer {
    private final ChatTokenizer tokenizer;
    private final QwenChatTemplate template;
    private final int mergeSize;
    private final int maxSeqLen;
    private final SequenceLengthPolicy policy;

    /**
     * @param maxSeqLen the most tokens a sample may have, at least 1
     * @param policy what happens to a longer sample
     */
    public SampleTokenizer(
            ChatTokenizer tokenizer,
            QwenChatTemplate template,
            int mergeSize,
            int maxSeqLen,
            SequenceLengthPolicy policy) {
        if (maxSeqLen < 1) {
            throw new IllegalArgumentException("maxSeqLen must be positive, got " + maxSeqLen);
        }
        this.tokenizer = tokenizer;
        this.template = template;
        this.mergeSize = mergeSize;
        this.maxSeqLen = maxSeqLen;
        this.policy = policy;
    }

    /**
     * Tokenizes one record.
     *
     * @throws RejectedRecordException {@link RejectReason#TOKENIZATION_FAILED} when the images do
     *     not match the record (count, grid not divisible by merge_size^2, pixel array size not the
     *     same number of bytes per patch for all images) or the tokenizer fails; {@link
     *     RejectReason#SEQUENCE_TOO_LONG} when the sample is longer than the maximum sequence
     *     length under {@link SequenceLengthPolicy#DROP}, or has no trained token left after
     *     truncation under {@link SequenceLengthPolicy#TRUNCATE}
     */
    public TokenizedSample tokenize(PreprocessedRecord input) throws RejectedRecordException {
        SftRecord record = input.record;
        PreprocessedImage[] images = input.images == null ? new PreprocessedImage[0] : input.images;
        if (images.length != record.images.length) {
            throw failed(
                    record.images.length
                            + " images referenced but "
                            + images.length
                            + " preprocessed",
                    null);
        }
        int[] pads = new int[images.length];
        int bytesPerPatch = -1;
        for (int i = 0; i < images.length; i++) {
            PreprocessedImage image = images[i];
            try {
                pads[i] =
                        QwenChatTemplate.imagePadCount(
                                image.gridT, image.gridH, image.gridW, mergeSize);
            } catch (IllegalArgumentException e) {
                throw failed(
                        "image " + i + " (" + record.images[i].path + "): " + e.getMessage(), e);
            }
            int rows = image.numPatches();
            if (image.resizedRgb == null) {
                throw failed("image " + i + " (" + record.images[i].path + ") has no pixels", null);
            }
            int length = image.resizedRgb.length;
            if (length % rows != 0 || (bytesPerPatch >= 0 && length / rows != bytesPerPatch)) {
                throw failed(
                        "image "
                                + i
                                + " ("
                                + record.images[i].path
                                + ") has "
                                + length
                                + " RGB bytes for "
                                + rows
                                + " patches; expected a multiple shared by all images",
                        null);
            }
            bytesPerPatch = length / rows;
        }
        ChatTokenizer.Encoded encoded;
        try {
            encoded = tokenizer.encode(template.render(record, pads));
        } catch (RuntimeException e) {
            throw failed("tokenizer failed: " + e, e);
        }
        long[] ids = encoded.inputIds();
        long[] labels = encoded.labels();
        boolean[] keep = new boolean[images.length];
        Arrays.fill(keep, true);
        if (ids.length > maxSeqLen) {
            String tooLong = "sequence of " + ids.length + " tokens > max-seq-len " + maxSeqLen;
            if (policy == SequenceLengthPolicy.DROP) {
                throw new RejectedRecordException(
                        RejectReason.SEQUENCE_TOO_LONG, tooLong + " (policy DROP)");
            }
            int cut = truncation(encoded, pads, keep);
            ids = Arrays.copyOf(ids, cut);
            labels = Arrays.copyOf(labels, cut);
            if (Arrays.stream(labels).allMatch(l -> l == ChatTokenizer.IGNORE_INDEX)) {
                throw new RejectedRecordException(
                        RejectReason.SEQUENCE_TOO_LONG,
                        tooLong
                                + "; truncated to "
                                + cut
                                + " tokens, no trained token is left (policy TRUNCATE)");
            }
        }
        return new TokenizedSample(
                record.ref, ids, labels, pixels(images, keep), grids(images, keep));
    }

    /**
     * The truncated length: {@code maxSeqLen}, or the start of the image block that position falls
     * in. Clears {@code keep} for the images of that block and of every later one.
     */
    private int truncation(ChatTokenizer.Encoded encoded, int[] pads, boolean[] keep) {
        int cut = maxSeqLen;
        int[] starts = encoded.blockStarts();
        int[] blockImages = encoded.blockImages();
        for (int b = 0; b < starts.length; b++) {
            int end = starts[b] + pads[blockImages[b]] + 2; // <|vision_start|> pads <|vision_end|>
            if (end > cut) {
                cut = Math.min(cut, starts[b]);
                keep[blockImages[b]] = false;
            }
        }
        return cut;
    }

    private static byte[] pixels(PreprocessedImage[] images, boolean[] keep) {
        int kept = 0;
        int totalBytes = 0;
        PreprocessedImage only = null;
        for (int i = 0; i < images.length; i++) {
            if (keep[i]) {
                kept++;
                only = images[i];
                totalBytes = Math.addExact(totalBytes, images[i].resizedRgb.length);
            }
        }
        if (kept == 1) {
            return only.resizedRgb;
        }
        byte[] pixels = new byte[totalBytes];
        int offset = 0;
        for (int i = 0; i < images.length; i++) {
            if (keep[i]) {
                byte[] rgb = images[i].resizedRgb;
                System.arraycopy(rgb, 0, pixels, offset, rgb.length);
                offset += rgb.length;
            }
        }
        return pixels;
    }

    private static long[] grids(PreprocessedImage[] images, boolean[] keep) {
        long[] gridThw = new long[3 * (int) countKept(keep)];
        int row = 0;
        for (int i = 0; i < images.length; i++) {
            if (keep[i]) {
                gridThw[3 * row] = images[i].gridT;
                gridThw[3 * row + 1] = images[i].gridH;
                gridThw[3 * row + 2] = images[i].gridW;
                row++;
            }
        }
        return gridThw;
    }

    private static long countKept(boolean[] keep) {
        long n = 0;
        for (boolean k : keep) {
            n += k ? 1 : 0;
        }
        return n;
    }

    private static RejectedRecordException failed(String message, Throwable cause) {
        return new RejectedRecordException(RejectReason.TOKENIZATION_FAILED, message, cause);
    }
}
