package dev.stoker.operators.video;

import java.io.Serializable;

/**
 * What a {@link VideoPreprocessor} is made from, serialisable so an operator can carry it to its
 * task and make its own preprocessor there (one per task thread).
 *
 * @param config the model's video processor settings with the job's overrides
 * @param rule the frame-index rule
 * @param fps frames per second to sample when a video gives none of its own, positive
 * @param limits the decoding limits
 */
public record VideoSettings(
        QwenVideoConfig config, VideoPreprocessor.FrameRule rule, double fps, VideoLimits limits)
        implements Serializable {
    private static final long serialVersionUID = 1L;

    /**
     * A new preprocessor with these settings.
     *
     * @throws IllegalArgumentException if the settings are not valid ({@link
     *     QwenVideoConfig#validate()}, {@code fps})
     */
    public VideoPreprocessor newPreprocessor() {
        return new VideoPreprocessor(config, rule, fps, limits);
    }
}
