package dev.stoker.operators.image;

import org.libjpegturbo.turbojpeg.TJ;
import org.libjpegturbo.turbojpeg.TJDecompressor;
import org.libjpegturbo.turbojpeg.TJException;

/**
 * JPEG decoding with libjpeg-turbo's TurboJPEG API: the same library and settings as Pillow's
 * {@code JpegImagePlugin} (accurate integer IDCT, fancy upsampling, libjpeg's own colour-space
 * detection from the JFIF/Adobe markers), so the RGB output equals Pillow's {@code
 * Image.open(...).convert("RGB")} for YCbCr, RGB and grayscale JPEGs, baseline or progressive.
 *
 * <p>Use: {@link #readHeader}, check the size, then {@link #decode}. Only 3-channel and grayscale
 * JPEGs are decoded here ({@link #decodesToRgb}); CMYK/YCCK files, files libjpeg-turbo rejects and
 * files it decodes with any warning are left to the caller's ImageIO path ({@code null} results),
 * which applies the decoder's policy on warnings (a cut entropy segment is corrupt, an ICC or
 * extraneous-bytes warning is not). TurboJPEG keeps only the first warning's text, so it cannot
 * apply that policy itself.
 *
 * <p>Only load this class after {@link TurboJpeg#available()} said yes. Not thread-safe: it holds
 * one native decompressor and reuses its output buffer; use one per task thread.
 */
final class TurboJpegDecoder {
    /** The largest RGB buffer a Java array holds. */
    private static final long MAX_BUFFER = Integer.MAX_VALUE - 8;

    private final TJDecompressor tj;
    private byte[] buffer = new byte[0];

    /**
     * @throws IllegalStateException if the native decompressor cannot be created
     */
    TurboJpegDecoder() {
        try {
            tj = new TJDecompressor();
        } catch (TJException e) {
            throw new IllegalStateException("cannot create a TurboJPEG decompressor", e);
        }
    }

    /**
     * Parses the JPEG header of {@code encoded} (no pixel data is decoded).
     *
     * @return false when libjpeg-turbo cannot read a header from these bytes
     */
    boolean readHeader(byte[] encoded) {
        try {
            tj.setSourceImage(encoded, encoded.length);
            return tj.getWidth() > 0 && tj.getHeight() > 0;
        } catch (TJException | RuntimeException e) {
            return false;
        }
    }

    /** Stored width in pixels, from the last header read. */
    int width() {
        return tj.getWidth();
    }

    /** Stored height in pixels, from the last header read. */
    int height() {
        return tj.getHeight();
    }

    /**
     * True when the last header's colour space is YCbCr, RGB (Adobe transform 0) or grayscale;
     * false for CMYK and YCCK, whose conversion to RGB (inverted Adobe CMYK) is ImageIO's.
     */
    boolean decodesToRgb() {
        int cs = tj.getColorspace();
        return cs == TJ.CS_YCbCr || cs == TJ.CS_RGB || cs == TJ.CS_GRAY;
    }

    /**
     * Decodes the image of the last header read, scaled in the DCT domain by {@code 1/denominator}:
     * each side becomes {@code ceil(side / denominator)} pixels.
     *
     * @param denominator 1, 2, 4 or 8
     * @return the RGB image in stored orientation, its pixel array reused by the next call; {@code
     *     null} when libjpeg-turbo fails or warns (the caller decodes with ImageIO instead)
     */
    RgbImage decode(int denominator) {
        int w =
                tj.getScaledWidth(
                        (width() + denominator - 1) / denominator,
                        (height() + denominator - 1) / denominator);
        int h =
                tj.getScaledHeight(
                        (width() + denominator - 1) / denominator,
                        (height() + denominator - 1) / denominator);
        long size = (long) w * h * 3;
        if (size > MAX_BUFFER) {
            return null;
        }
        if (buffer.length < size) {
            buffer = new byte[(int) size];
        }
        try {
            tj.decompress(buffer, 0, 0, w, w * 3, h, TJ.PF_RGB, 0);
        } catch (TJException | RuntimeException e) {
            return null;
        }
        return new RgbImage(w, h, buffer);
    }
}
