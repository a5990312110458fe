package dev.stoker.operators.video;

/**
 * What the container says about a video's first video stream, read as transformers 5.23.0's PyAV
 * loader reads it ({@code transformers/video_utils.py}, {@code read_video_pyav}): the fields it
 * puts into its {@code VideoMetadata}, plus what Stoker needs to judge and report the stream.
 *
 * @param totalFrames the stream's frame count as the container reports it (FFmpeg's {@code
 *     AVStream.nb_frames}, PyAV's {@code stream.frames}), possibly wrong: nothing is decoded to
 *     count it, as in the reference. Where the container stores none (Matroska/WebM: PyAV's {@code
 *     stream.frames} is 0, and the reference fails) the number of the stream's packets, counted
 *     without decoding ({@link VideoDecoder})
 * @param rateNumerator numerator of the average frame rate ({@code AVStream.avg_frame_rate}, PyAV's
 *     {@code stream.average_rate}); 0 when the container has none
 * @param rateDenominator denominator of the average frame rate; 0 when the container has none
 * @param fps the average frame rate in frames per second, {@code rateNumerator / rateDenominator}
 *     correctly rounded as Python's {@code float(Fraction)}; {@link Double#NaN} when there is none
 *     (where the reference's {@code float(None)} fails)
 * @param duration {@code totalFrames / fps} in seconds, correctly rounded as {@code float(total /
 *     Fraction)}; 0 when there is no rate (the reference's {@code if video_fps else 0})
 * @param width the coded frame width in pixels ({@code codecpar.width}, before any rotation)
 * @param height the coded frame height in pixels
 * @param rotation the display matrix's rotation in degrees counter-clockwise, in [-180, 180], as
 *     PyAV's {@code frame.rotation} ({@code av_display_rotation_get}); 0 when there is none. Not
 *     applied to the frames: the reference does not apply it either
 * @param pixelFormat FFmpeg's name of the stream's pixel format (e.g. {@code yuv420p}, {@code
 *     yuv420p10le}); {@code "none"} when the container does not say
 * @param bitDepth bits per sample of the first component of the pixel format; 0 when unknown
 * @param codec FFmpeg's name of the decoder used (e.g. {@code h264}, {@code libaom-av1})
 */
public record VideoMetadata(
        int totalFrames,
        int rateNumerator,
        int rateDenominator,
        double fps,
        double duration,
        int width,
        int height,
        double rotation,
        String pixelFormat,
        int bitDepth,
        String codec) {

    /** Whether the container gives an average frame rate ({@link #fps} is then finite). */
    public boolean hasFrameRate() {
        return rateNumerator != 0 && rateDenominator != 0;
    }
}
