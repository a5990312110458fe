package dev.stoker.operators.tokenize;

import dev.stoker.operators.model.PreprocessedImage;
import dev.stoker.operators.model.PreprocessedRecord;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.TokenizedSample;

/**
 * Turns a {@link PreprocessedRecord} into a {@link TokenizedSample}: renders the chat with {@link
 * QwenChatTemplate}, encodes it with {@link ChatTokenizer}, and concatenates the images' resized
 * RGB bytes and {@code image_grid_thw} (int64, {@code (num_images, 3)} flattened) in image order.
 * The pixel array of a record with one image is passed on as it is, not copied (the sample takes it
 * over from the record).
 */
public final class SampleTokenizer {
    private final ChatTokenizer tokenizer;
    private final QwenChatTemplate template;
    private final int mergeSize;

    public SampleTokenizer(ChatTokenizer tokenizer, QwenChatTemplate template, int mergeSize) {
        this.tokenizer = tokenizer;
        this.template = template;
        this.mergeSize = mergeSize;
    }

    /**
     * Tokenizes one record.
     *
     * @throws RejectedRecordException {@link RejectReason#TOKENIZATION_FAILED} when the images do
     *     not match the record (count, grid not divisible by merge_size^2, pixel array size not the
     *     same number of bytes per patch for all images) or the tokenizer fails
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
        long[] gridThw = new long[images.length * 3];
        int totalBytes = 0;
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
            gridThw[3 * i] = image.gridT;
            gridThw[3 * i + 1] = image.gridH;
            gridThw[3 * i + 2] = image.gridW;
            totalBytes = Math.addExact(totalBytes, length);
        }
        ChatTokenizer.Encoded encoded;
        try {
            encoded = tokenizer.encode(template.render(record, pads));
        } catch (RuntimeException e) {
            throw failed("tokenizer failed: " + e, e);
        }
        byte[] pixels = images.length == 1 ? images[0].resizedRgb : new byte[totalBytes];
        if (images.length > 1) {
            int offset = 0;
            for (PreprocessedImage image : images) {
                System.arraycopy(image.resizedRgb, 0, pixels, offset, image.resizedRgb.length);
                offset += image.resizedRgb.length;
            }
        }
        return new TokenizedSample(
                record.ref, encoded.inputIds(), encoded.labels(), pixels, gridThw);
    }

    private static RejectedRecordException failed(String message, Throwable cause) {
        return new RejectedRecordException(RejectReason.TOKENIZATION_FAILED, message, cause);
    }
}
