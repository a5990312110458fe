package dev.stoker.operators.model;

/**
 * Why a record was rejected: a stable, machine-readable code (used as a metric name suffix and in
 * the dead-letter output) plus the stage it belongs to.
 *
 * <p>{@link #SEQUENCE_TOO_LONG}: the tokenized sample is longer than {@code stoker.max-seq-len}
 * (policy {@code DROP}), or nothing trainable is left after truncating it to that length (policy
 * {@code TRUNCATE}); the message names the sample's length and the limit.
 *
 * <p>{@link #VIDEO_TOO_SHORT}: too few frames for the model's frame-index rule (a stream of no
 * frames included), or fewer sampled frames than its {@code temporal_patch_size} where its video
 * processor refuses them (Qwen3-VL's {@code smart_resize}); the reference fails on these too.
 * {@link #VIDEO_TOO_LARGE}: the resized frames would not fit one Java array ({@code 2^31 - 1}
 * samples).
 */
public enum RejectReason {
    LINE_TOO_LONG(Stage.PARSE),
    INVALID_UTF8(Stage.PARSE),
    /** A JSONL file in UTF-16 or UTF-32 (by its byte order mark): one dead letter for the file. */
    UNSUPPORTED_ENCODING(Stage.PARSE),
    MALFORMED_JSON(Stage.PARSE),
    INVALID_RECORD(Stage.PARSE),
    PLACEHOLDER_MISMATCH(Stage.PARSE),
    UNSAFE_PATH(Stage.PARSE),
    IMAGE_NOT_FOUND(Stage.FETCH),
    FETCH_FAILED(Stage.FETCH),
    FETCH_TIMEOUT(Stage.FETCH),
    IMAGE_TOO_LARGE(Stage.FETCH),
    /** A record's video file is not there (a missing file, a 404). */
    VIDEO_NOT_FOUND(Stage.FETCH),
    /** A record's video file is larger than {@code stoker.video.max-bytes}. */
    VIDEO_FILE_TOO_LARGE(Stage.FETCH),
    UNSUPPORTED_IMAGE(Stage.DECODE),
    CORRUPT_IMAGE(Stage.DECODE),
    IMAGE_TOO_MANY_PIXELS(Stage.DECODE),
    /** A file FFmpeg cannot open as a video: no container it knows, no video stream, no decoder. */
    UNSUPPORTED_VIDEO(Stage.DECODE),
    /** An empty, truncated or damaged video, or one the reference loader fails on. */
    CORRUPT_VIDEO(Stage.DECODE),
    /** A video whose frames are larger than the per-frame pixel limit (checked before decoding). */
    VIDEO_TOO_MANY_PIXELS(Stage.DECODE),
    /** A video with more frames than the frame limit, or sampled frames too large to hold. */
    VIDEO_TOO_MANY_FRAMES(Stage.DECODE),
    IMAGE_TOO_SMALL(Stage.PREPROCESS),
    EXTREME_ASPECT_RATIO(Stage.PREPROCESS),
    VIDEO_TOO_SHORT(Stage.PREPROCESS),
    VIDEO_TOO_LARGE(Stage.PREPROCESS),
    TOKENIZATION_FAILED(Stage.TOKENIZE),
    SEQUENCE_TOO_LONG(Stage.TOKENIZE);

    private final Stage stage;

    RejectReason(Stage stage) {
        this.stage = stage;
    }

    public Stage stage() {
        return stage;
    }
}
