package dev.stoker.operators.tokenize;

import dev.stoker.operators.model.PreprocessedImage;
import dev.stoker.operators.model.PreprocessedRecord;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SampledVideo;
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.TokenizedSample;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Turns a {@link PreprocessedRecord} into a {@link TokenizedSample}: renders the chat with {@link
 * QwenChatTemplate}, encodes it with {@link ChatTokenizer}, applies the maximum sequence length,
 * and concatenates the kept images' resized RGB bytes and {@code image_grid_thw} (int64, {@code
 * (num_images, 3)} flattened) in image order, and the kept videos' resized frames, {@code
 * video_grid_thw}, frame counts and {@code second_per_grid_ts} in video order. The pixel array of a
 * sample with one image (or one video) is passed on as it is, not copied (the sample takes it over
 * from the record). A video's tokens are its template's {@link QwenChatTemplate#videoBlock} (the
 * temporal patch size is {@value #TEMPORAL_PATCH_SIZE}, as in every preset).
 *
 * <p>A sample longer than {@code maxSeqLen} tokens is, by {@link SequenceLengthPolicy}, rejected
 * ({@link SequenceLengthPolicy#DROP}) or cut to at most {@code maxSeqLen} tokens ({@link
 * SequenceLengthPolicy#TRUNCATE}): {@code input_ids} and {@code labels} are cut at the same
 * position; when that position falls inside an image or video block ({@code <|vision_start|>} ...
 * {@code <|vision_end|>}, a Qwen3-VL video's timestamps and inner pairs included) the cut moves to
 * just before the block, and the images and videos of that block and of every later block are left
 * out of the pixels and grids, so every kept image or video keeps all its tokens and every kept
 * image or video token has its pixels.
 */
public final class SampleTokenizer {
    /**
     * Frames per temporal patch of every preset's video processor ({@code temporal_patch_size}).
     */
    static final int TEMPORAL_PATCH_SIZE = 2;

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
     *     same number of bytes per patch for all images), the videos do not (count, grid not
     *     divisible by merge_size^2, grid_t not ceil(frames / 2), frame indices not one per frame,
     *     pixel array size not the images' bytes per patch times frames * grid_h * grid_w) or the
     *     tokenizer fails; {@link RejectReason#SEQUENCE_TOO_LONG} when the sample is longer than
     *     the maximum sequence length under {@link SequenceLengthPolicy#DROP}, or has no trained
     *     token left after truncation under {@link SequenceLengthPolicy#TRUNCATE}
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
        SampledVideo[] videos = input.videos == null ? new SampledVideo[0] : input.videos;
        int videoRefs = record.videos == null ? 0 : record.videos.length;
        if (videos.length != videoRefs) {
            throw failed(videoRefs + " videos referenced but " + videos.length + " sampled", null);
        }
        List<TemplateTurn.Video> blocks = new ArrayList<>(videos.length);
        for (int i = 0; i < videos.length; i++) {
            SampledVideo video = videos[i];
            String what = "video " + i + " (" + record.videos[i].name() + ")";
            if (video == null || video.resizedRgb == null || video.frameIndices == null) {
                throw failed(what + " has no frames", null);
            }
            if (video.frames < 1
                    || video.frameIndices.length != video.frames
                    || video.gridT
                            != (video.frames + TEMPORAL_PATCH_SIZE - 1) / TEMPORAL_PATCH_SIZE) {
                throw failed(
                        what
                                + " has "
                                + video.frames
                                + " frames, "
                                + video.frameIndices.length
                                + " frame indices and grid_t "
                                + video.gridT
                                + "; expected one index per frame and grid_t = ceil(frames / "
                                + TEMPORAL_PATCH_SIZE
                                + ")",
                        null);
            }
            try {
                blocks.add(
                        template.videoBlock(
                                i,
                                video.gridT,
                                video.gridH,
                                video.gridW,
                                mergeSize,
                                video.frameIndices,
                                video.videoFps,
                                TEMPORAL_PATCH_SIZE));
            } catch (IllegalArgumentException e) {
                throw failed(what + ": " + e.getMessage(), e);
            }
            long framePatches = (long) video.frames * video.gridH * video.gridW;
            int length = video.resizedRgb.length;
            if (length % framePatches != 0
                    || (bytesPerPatch >= 0 && length / framePatches != bytesPerPatch)) {
                throw failed(
                        what
                                + " has "
                                + length
                                + " RGB bytes for "
                                + video.frames
                                + " frames of "
                                + video.gridH
                                + "x"
                                + video.gridW
                                + " patches; expected a multiple shared by all images and videos",
                        null);
            }
            bytesPerPatch = (int) (length / framePatches);
        }
        ChatTokenizer.Encoded encoded;
        try {
            encoded = tokenizer.encode(template.render(record, pads, blocks));
        } catch (RuntimeException e) {
            throw failed("tokenizer failed: " + e, e);
        }
        long[] ids = encoded.inputIds();
        long[] labels = encoded.labels();
        boolean[] keep = new boolean[images.length];
        Arrays.fill(keep, true);
        boolean[] keepVideo = new boolean[videos.length];
        Arrays.fill(keepVideo, true);
        if (ids.length > maxSeqLen) {
            String tooLong = "sequence of " + ids.length + " tokens > max-seq-len " + maxSeqLen;
            if (policy == SequenceLengthPolicy.DROP) {
                throw new RejectedRecordException(
                        RejectReason.SEQUENCE_TOO_LONG, tooLong + " (policy DROP)");
            }
            int cut = truncation(encoded, keep, keepVideo);
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
                        record.ref, ids, labels, pixels(images, keep), grids(images, keep))
                .withVideos(
                        videoPixels(videos, keepVideo),
                        videoGrids(videos, keepVideo),
                        videoFrames(videos, keepVideo),
                        secondPerGridTs(videos, keepVideo));
    }

    /**
     * The truncated length: {@code maxSeqLen}, or the start of the image or video block that
     * position falls in. Clears {@code keep} / {@code keepVideo} for the images and videos of that
     * block and of every later one.
     */
    private int truncation(ChatTokenizer.Encoded encoded, boolean[] keep, boolean[] keepVideo) {
        int cut = maxSeqLen;
        for (ChatTokenizer.Block block : encoded.blocks()) {
            if (block.end() > cut) {
                cut = Math.min(cut, block.start());
                (block.video() ? keepVideo : keep)[block.index()] = false;
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

    private static byte[] videoPixels(SampledVideo[] videos, boolean[] keep)
            throws RejectedRecordException {
        int kept = (int) countKept(keep);
        if (kept == 0) {
            return new byte[0];
        }
        int totalBytes = 0;
        SampledVideo only = null;
        for (int i = 0; i < videos.length; i++) {
            if (keep[i]) {
                only = videos[i];
                if (videos[i].resizedRgb.length > Integer.MAX_VALUE - 8 - totalBytes) {
                    throw failed(
                            "the sample's videos' resized frames exceed one array (2 GiB);"
                                    + " lower stoker.video.max-pixels, fps or max-frames",
                            null);
                }
                totalBytes += videos[i].resizedRgb.length;
            }
        }
        if (kept == 1) {
            return only.resizedRgb;
        }
        byte[] pixels = new byte[totalBytes];
        int offset = 0;
        for (int i = 0; i < videos.length; i++) {
            if (keep[i]) {
                byte[] rgb = videos[i].resizedRgb;
                System.arraycopy(rgb, 0, pixels, offset, rgb.length);
                offset += rgb.length;
            }
        }
        return pixels;
    }

    private static long[] videoGrids(SampledVideo[] videos, boolean[] keep) {
        long[] gridThw = new long[3 * (int) countKept(keep)];
        int row = 0;
        for (int i = 0; i < videos.length; i++) {
            if (keep[i]) {
                gridThw[3 * row] = videos[i].gridT;
                gridThw[3 * row + 1] = videos[i].gridH;
                gridThw[3 * row + 2] = videos[i].gridW;
                row++;
            }
        }
        return gridThw;
    }

    private static int[] videoFrames(SampledVideo[] videos, boolean[] keep) {
        int[] frames = new int[(int) countKept(keep)];
        int row = 0;
        for (int i = 0; i < videos.length; i++) {
            if (keep[i]) {
                frames[row++] = videos[i].frames;
            }
        }
        return frames;
    }

    private static double[] secondPerGridTs(SampledVideo[] videos, boolean[] keep) {
        double[] seconds = new double[(int) countKept(keep)];
        int row = 0;
        for (int i = 0; i < videos.length; i++) {
            if (keep[i]) {
                seconds[row++] = videos[i].secondPerGridT;
            }
        }
        return seconds;
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
