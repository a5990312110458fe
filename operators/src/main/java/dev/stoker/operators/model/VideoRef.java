package dev.stoker.operators.model;

/**
 * A video referenced by a record: either a video file ({@link #path}) or a list of frame images
 * ({@link #frames}, as Qwen messages ({@code {"type": "video", "video": ["f/0001.jpg", ...]}}) and
 * LLaVA/ShareGPT {@code videos} entries give one), with optional per-video overrides of the
 * sampling, as a messages-style video part may carry them (qwen-vl-utils' {@code fps}, {@code
 * min_pixels}, {@code max_pixels}). A value of 0 means the configured default.
 *
 * <p>Paths are relative to the media root and resolved like image paths (the same root, the same
 * rules).
 */
public class VideoRef {
    /**
     * Path of the video file relative to the media root, as written in the record (no Unicode
     * normalization); {@code null} for a video given as frames.
     */
    public String path;

    /**
     * For a video given as a list of frame images: the frames' paths in order (at least one, each
     * relative to the media root, as written); {@code null} for a video file.
     */
    public String[] frames;

    /**
     * For a video file: frames per second to sample. For a video given as frames: the rate the
     * frames were taken at (they are all used, none sampled). 0 for the configured default (a video
     * file) or unknown (frames: 24 assumed, as transformers does).
     */
    public double fps;

    /** Per-frame {@code min_pixels} override, or 0 for the configured default. */
    public long minPixels;

    /** Per-frame {@code max_pixels} override, or 0 for the configured default. */
    public long maxPixels;

    public VideoRef() {}

    /** A video file at {@code path}. */
    public VideoRef(String path, double fps, long minPixels, long maxPixels) {
        this.path = path;
        this.fps = fps;
        this.minPixels = minPixels;
        this.maxPixels = maxPixels;
    }

    /**
     * A video given as the frame images at {@code frames}, in order.
     *
     * @param frames the frames' paths, at least one (not copied)
     * @param fps the frames' rate, or 0 when unknown
     * @throws IllegalArgumentException if {@code frames} is empty
     */
    public static VideoRef ofFrames(String[] frames, double fps, long minPixels, long maxPixels) {
        if (frames.length == 0) {
            throw new IllegalArgumentException("a video given as frames needs at least one frame");
        }
        VideoRef ref = new VideoRef(null, fps, minPixels, maxPixels);
        ref.frames = frames;
        return ref;
    }

    /** Whether this video is given as a list of frame images (else it is a video file). */
    public boolean givenAsFrames() {
        return frames != null;
    }

    /**
     * How messages name this video: its path, or for frames e.g. {@code 8 frames 'f/0001.jpg' ..
     * 'f/0008.jpg'}.
     */
    public String name() {
        if (frames == null) {
            return path;
        }
        return frames.length == 1
                ? "1 frame '" + frames[0] + "'"
                : frames.length
                        + " frames '"
                        + frames[0]
                        + "' .. '"
                        + frames[frames.length - 1]
                        + "'";
    }
}
