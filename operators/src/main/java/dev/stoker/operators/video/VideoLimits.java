package dev.stoker.operators.video;

/**
 * Bounds that keep a hostile or absurd video from exhausting memory or time in {@link
 * VideoDecoder}.
 *
 * @param maxPixelsPerFrame largest accepted {@code width * height} of a frame, in pixels: checked
 *     on the container's size before any decoder exists, given to the decoder ({@code
 *     AVCodecContext.max_pixels}) and checked again on every decoded frame
 * @param maxFrames largest accepted frame count the container reports, and the most frames one
 *     {@link VideoDecoder#decode} call decodes (so a container that under-reports its frames is
 *     still bounded)
 */
public record VideoLimits(long maxPixelsPerFrame, int maxFrames) {
    /**
     * @throws IllegalArgumentException if a limit is not positive
     */
    public VideoLimits {
        if (maxPixelsPerFrame < 1 || maxFrames < 1) {
            throw new IllegalArgumentException(
                    "video limits must be positive: maxPixelsPerFrame="
                            + maxPixelsPerFrame
                            + ", maxFrames="
                            + maxFrames);
        }
    }
}
