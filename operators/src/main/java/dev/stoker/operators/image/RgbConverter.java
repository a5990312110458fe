package dev.stoker.operators.image;

import java.awt.color.ColorSpace;
import java.awt.image.BufferedImage;
import java.awt.image.ColorModel;
import java.awt.image.ComponentColorModel;
import java.awt.image.DataBuffer;
import java.awt.image.DataBufferByte;
import java.awt.image.IndexColorModel;
import java.awt.image.PixelInterleavedSampleModel;
import java.awt.image.Raster;

/**
 * Converts a decoded {@link BufferedImage} to 8-bit RGB the way Hugging Face's {@code
 * convert_to_rgb} does with Pillow, except for 16-bit samples: colour samples are taken as stored
 * (no ICC or gamma conversion, as Pillow's {@code convert} ignores profiles), grey becomes three
 * equal channels, sub-byte depths are scaled to the full range (1-bit to 0/255, 2-bit to multiples
 * of 85, 4-bit to multiples of 17), palettes are looked up, and alpha is composited over opaque
 * white with Pillow's fixed-point {@code ImagingAlphaComposite} arithmetic ({@link #overWhite}).
 * Other colour spaces go through the colour model's sRGB conversion, except CMYK samples (TIFF,
 * PSD), which are converted with Pillow's {@code cmyk2rgb} ({@code Convert.c}: {@code r = (255 - k)
 * - MULDIV255(c, 255 - k)}, no colour profile), as Pillow's {@code convert("RGB")} does.
 *
 * <p>16-bit samples (grey, grey+alpha, RGB, RGBA; alpha included) are scaled to 8 bits as {@code
 * round(v / 257)} ({@link #to8}; 65535 = 255 * 257, so 65535 becomes 255); alpha is then composited
 * as for 8-bit images, on the scaled values. This is the one deliberate difference from Pillow
 * (docs/parity.md): Pillow opens 16-bit grey as {@code I;16} and its {@code convert} clips it to
 * 255 ({@code I16_RGB} in {@code Convert.c}), so most 16-bit grey files become white, and it keeps
 * the high byte {@code v >> 8} of 16-bit colour samples (within one level of the rule).
 */
final class RgbConverter {
    private static final int ALPHA_BITS = 7;

    private RgbConverter() {}

    /**
     * Writes {@code img} into {@code out} at ({@code dx}, {@code dy}) of a canvas {@code canvasW}
     * wide.
     */
    static void convert(BufferedImage img, byte[] out, int canvasW, int dx, int dy) {
        ColorModel cm = img.getColorModel();
        if (cm.isAlphaPremultiplied()) {
            img.coerceData(false);
        }
        Raster raster = img.getRaster();
        int w = img.getWidth();
        int h = img.getHeight();
        int type = cm.getColorSpace().getType();
        int colours = cm.getNumColorComponents();
        int transfer = raster.getTransferType();
        boolean integral = transfer != DataBuffer.TYPE_FLOAT && transfer != DataBuffer.TYPE_DOUBLE;
        if (copyOpaqueBytes(img, out, canvasW, dx, dy)) {
            return;
        }
        int[] rgba = new int[w * 4];
        if (cm instanceof IndexColorModel) {
            IndexColorModel icm = (IndexColorModel) cm;
            int[] idx = new int[w];
            for (int y = 0; y < h; y++) {
                raster.getSamples(0, y, w, 1, 0, idx);
                for (int x = 0; x < w; x++) {
                    int i = idx[x];
                    rgba[x * 4] = icm.getRed(i);
                    rgba[x * 4 + 1] = icm.getGreen(i);
                    rgba[x * 4 + 2] = icm.getBlue(i);
                    rgba[x * 4 + 3] = icm.getAlpha(i);
                }
                writeRow(rgba, w, out, ((dy + y) * canvasW + dx) * 3);
            }
        } else if (integral
                && ((type == ColorSpace.TYPE_GRAY && colours == 1)
                        || (type == ColorSpace.TYPE_RGB && colours == 3))) {
            int bands = raster.getNumBands();
            int[] max = sampleMaxima(cm, bands);
            boolean alpha = cm.hasAlpha();
            int[] px = new int[w * bands];
            for (int y = 0; y < h; y++) {
                raster.getPixels(0, y, w, 1, px);
                for (int x = 0; x < w; x++) {
                    int p = x * bands;
                    for (int c = 0; c < 3; c++) {
                        int b = colours == 1 ? 0 : c;
                        rgba[x * 4 + c] = to8(px[p + b], max[b]);
                    }
                    rgba[x * 4 + 3] = alpha ? to8(px[p + colours], max[colours]) : 255;
                }
                writeRow(rgba, w, out, ((dy + y) * canvasW + dx) * 3);
            }
        } else if (integral && type == ColorSpace.TYPE_CMYK && colours == 4) {
            int bands = raster.getNumBands();
            int[] max = sampleMaxima(cm, bands);
            boolean alpha = cm.hasAlpha();
            int[] px = new int[w * bands];
            for (int y = 0; y < h; y++) {
                raster.getPixels(0, y, w, 1, px);
                for (int x = 0; x < w; x++) {
                    int p = x * bands;
                    int nk = 255 - to8(px[p + 3], max[3]);
                    for (int c = 0; c < 3; c++) {
                        rgba[x * 4 + c] = nk - mulDiv255(to8(px[p + c], max[c]), nk);
                    }
                    rgba[x * 4 + 3] = alpha ? to8(px[p + 4], max[4]) : 255;
                }
                writeRow(rgba, w, out, ((dy + y) * canvasW + dx) * 3);
            }
        } else {
            int[] argb = new int[w];
            for (int y = 0; y < h; y++) {
                img.getRGB(0, y, w, 1, argb, 0, w);
                for (int x = 0; x < w; x++) {
                    int v = argb[x];
                    rgba[x * 4] = v >> 16 & 0xFF;
                    rgba[x * 4 + 1] = v >> 8 & 0xFF;
                    rgba[x * 4 + 2] = v & 0xFF;
                    rgba[x * 4 + 3] = v >>> 24;
                }
                writeRow(rgba, w, out, ((dy + y) * canvasW + dx) * 3);
            }
        }
    }

    /**
     * Fast path for the common decoder outputs (8-bit interleaved RGB/BGR or grey without alpha,
     * e.g. {@code TYPE_3BYTE_BGR}, {@code TYPE_BYTE_GRAY}): copies straight from the data buffer.
     */
    private static boolean copyOpaqueBytes(
            BufferedImage img, byte[] out, int canvasW, int dx, int dy) {
        ColorModel cm = img.getColorModel();
        Raster raster = img.getRaster();
        int type = cm.getColorSpace().getType();
        int colours = cm.getNumColorComponents();
        if (!(cm instanceof ComponentColorModel)
                || cm.hasAlpha()
                || cm.getPixelSize() != 8 * colours
                || !(raster.getSampleModel() instanceof PixelInterleavedSampleModel)
                || !(raster.getDataBuffer() instanceof DataBufferByte)
                || raster.getSampleModelTranslateX() != 0
                || raster.getSampleModelTranslateY() != 0
                || !(type == ColorSpace.TYPE_RGB && colours == 3
                        || type == ColorSpace.TYPE_GRAY && colours == 1)) {
            return false;
        }
        PixelInterleavedSampleModel sm = (PixelInterleavedSampleModel) raster.getSampleModel();
        byte[] data = ((DataBufferByte) raster.getDataBuffer()).getData();
        int[] offsets = sm.getBandOffsets();
        int r = offsets[0] + raster.getDataBuffer().getOffset();
        int g = offsets[colours == 1 ? 0 : 1] + raster.getDataBuffer().getOffset();
        int b = offsets[colours == 1 ? 0 : 2] + raster.getDataBuffer().getOffset();
        int stride = sm.getPixelStride();
        int scan = sm.getScanlineStride();
        for (int y = 0; y < img.getHeight(); y++) {
            int p = y * scan;
            int o = ((dy + y) * canvasW + dx) * 3;
            for (int x = 0; x < img.getWidth(); x++, p += stride, o += 3) {
                out[o] = data[p + r];
                out[o + 1] = data[p + g];
                out[o + 2] = data[p + b];
            }
        }
        return true;
    }

    /**
     * A {@code bits}-deep sample scaled to 0..255, {@code round(v * 255 / max)}: 16-bit samples
     * become {@code round(v / 257)}, sub-byte ones {@code v * 255 / max} exactly.
     */
    static int to8(int v, int max) {
        if (max == 255) {
            return v;
        }
        return (v * 255 + max / 2) / max;
    }

    /** The largest value of each band's samples, {@code 2^bits - 1}. */
    private static int[] sampleMaxima(ColorModel cm, int bands) {
        int[] max = new int[bands];
        for (int b = 0; b < bands; b++) {
            max[b] = (1 << cm.getComponentSize(b)) - 1;
        }
        return max;
    }

    /** Pillow's {@code MULDIV255(a, b)}: {@code a * b / 255} rounded, in integer arithmetic. */
    private static int mulDiv255(int a, int b) {
        int tmp = a * b + 128;
        return ((tmp >> 8) + tmp) >> 8;
    }

    /**
     * Writes non-premultiplied ARGB pixels (alpha in the top byte) into {@code out} at ({@code dx},
     * {@code dy}) of a canvas {@code canvasW} wide, as {@link #convert} does: with {@code alpha}
     * each pixel is composited over white ({@link #overWhite}), without it the alpha byte is
     * ignored.
     *
     * @param argb {@code w * h} pixels, row-major
     */
    static void convertArgb(
            int[] argb, int w, int h, boolean alpha, byte[] out, int canvasW, int dx, int dy) {
        for (int y = 0; y < h; y++) {
            int o = ((dy + y) * canvasW + dx) * 3;
            for (int x = 0, p = y * w; x < w; x++, p++, o += 3) {
                int v = argb[p];
                int a = alpha ? v >>> 24 : 255;
                int r = v >> 16 & 0xFF;
                int g = v >> 8 & 0xFF;
                int b = v & 0xFF;
                if (a == 255) {
                    out[o] = (byte) r;
                    out[o + 1] = (byte) g;
                    out[o + 2] = (byte) b;
                } else {
                    out[o] = (byte) overWhite(r, a);
                    out[o + 1] = (byte) overWhite(g, a);
                    out[o + 2] = (byte) overWhite(b, a);
                }
            }
        }
    }

    private static void writeRow(int[] rgba, int w, byte[] out, int o) {
        for (int x = 0; x < w; x++, o += 3) {
            int a = rgba[x * 4 + 3];
            if (a == 255) {
                out[o] = (byte) rgba[x * 4];
                out[o + 1] = (byte) rgba[x * 4 + 1];
                out[o + 2] = (byte) rgba[x * 4 + 2];
            } else {
                out[o] = (byte) overWhite(rgba[x * 4], a);
                out[o + 1] = (byte) overWhite(rgba[x * 4 + 1], a);
                out[o + 2] = (byte) overWhite(rgba[x * 4 + 2], a);
            }
        }
    }

    /**
     * One channel of Pillow's {@code ImagingAlphaComposite} (src over an opaque white dst): {@code
     * coef1 = a*255*255*2^7 / (a*255 + 255*(255-a))}, result {@code SHIFTFORDIV255(src*coef1 +
     * 255*coef2 + (0x80 << 7)) >> 7}.
     */
    static int overWhite(int src, int a) {
        int outa255 = a * 255 + 255 * (255 - a);
        int coef1 = a * 255 * 255 * (1 << ALPHA_BITS) / outa255;
        int coef2 = 255 * (1 << ALPHA_BITS) - coef1;
        int tmp = src * coef1 + 255 * coef2 + (0x80 << ALPHA_BITS);
        return (((tmp >> 8) + tmp) >> 8) >> ALPHA_BITS;
    }
}
