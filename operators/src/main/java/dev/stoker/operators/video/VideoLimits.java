package dev.stoker.operators.video;

import java.io.Serializable;

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
 * @param maxSampledBytes largest accepted size of the sampled frames decoded to RGB and held
 *     together before the resize ({@code frames * width * height * 3} bytes, from the container's
 *     frame size), checked by {@link VideoPreprocessor} before decoding
 */
public record VideoLimits(long maxPixelsPerFrame, int maxFrames, long maxSampledBytes)
        implements Serializable {
    /**
     * @throws IllegalArgumentException if a limit is not positive
     */
    public VideoLimits {
        if (maxPixelsPerFrame < 1 || maxFrames < 1 || maxSampledBytes < 1) {
            throw new IllegalArgumentException(
                    "video limits must be positive: maxPixelsPerFrame="
                            + maxPixelsPerFrame
                            + ", maxFrames="
                            + maxFrames
                            + ", maxSampledBytes="
                            + maxSampledBytes);
        }
    }
}
