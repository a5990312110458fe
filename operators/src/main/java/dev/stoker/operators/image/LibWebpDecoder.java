package dev.stoker.operators.image;

import com.luciad.imageio.webp.WebPImageReaderSpi;
import com.twelvemonkeys.imageio.stream.ByteArrayImageInputStream;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import java.awt.image.BufferedImage;
import java.awt.image.DataBufferInt;
import java.io.IOException;
import java.util.Arrays;
import javax.imageio.ImageReadParam;
import javax.imageio.ImageReader;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * WebP decoding with libwebp, the library (and, in {@code com.github.usefulness:webp-imageio}
 * 0.11.0, the version: 1.6.0) that Pillow 12.0.0 decodes WebP with, so the RGB equals Pillow's for
 * lossy (every encoder {@code method}), lossless, alpha and animated files.
 *
 * <p>libwebp is reached through webp-imageio's JNI binding, whose jar carries the native library
 * for Linux, macOS and Windows (x86-64 and ARM64, among others) and extracts it to {@code
 * java.io.tmpdir} on first use. A JNI library loads in one class loader per JVM, so on a cluster
 * webp-imageio is in Flink's {@code lib/}, not in the job jar. Its reader is created directly
 * ({@link WebPImageReaderSpi}), never looked up in ImageIO's JVM-global plugin registry. It decodes
 * with libwebp's {@code WebPDecode} (default options: fancy upsampling, no dithering) to
 * non-premultiplied ARGB.
 *
 * <p>What Pillow does on top, reproduced here: Pillow opens every WebP with libwebp's {@code
 * WebPAnimDecoder} (RGBA output). Its mode is RGBA when the file says it has alpha (VP8X alpha
 * flag, VP8L alpha bit or an ALPH chunk; libwebp's {@code WebPGetFeatures}) and RGB otherwise, the
 * alpha channel then ignored. An animation's first frame is decoded into a canvas of the VP8X size
 * cleared to transparent black (0, 0, 0, 0), at the frame's offset, without blending (the first
 * frame has no previous one), so outside the frame the canvas is white after compositing over
 * white, or black in an RGB-mode animation. {@code WebPDecode} rejects an animation, so the first
 * frame's image chunks (ALPH + VP8, or VP8L) are taken from its ANMF chunk (WebP container
 * specification) and decoded on their own, as libwebp's demuxer does.
 *
 * <p>Only construct one after {@link #available()} said yes. Not thread-safe (one reader); use one
 * per task thread.
 */
final class LibWebpDecoder {
    private static final Logger LOG = LoggerFactory.getLogger(LibWebpDecoder.class);

    /** A 1x1 lossless WebP of RGB (10, 200, 30), written by Pillow 12.0.0. */
    private static final byte[] PROBE = {
        82, 73, 70, 70, 30, 0, 0, 0, 87, 69, 66, 80, 86, 80, 56, 76, 17, 0, 0, 0, 47, 0, 0, 0, 0, 7,
        80, -28, 42, -44, -93, -1, -127, -120, -24, 127, 0, 0
    };

    private static final int VP8X_ALPHA = 0x10;
    private static final int VP8X_ANIMATION = 0x02;
    private static final int ANMF_HEADER = 16;

    private static final boolean AVAILABLE = probe();

    private final ImageReader reader = new WebPImageReaderSpi().createReaderInstance(null);

    /**
     * The read parameters of every decode. webp-imageio 0.11.0 registers each parameter's native
     * decoder options with a Cleaner that holds them itself, so they are never freed: {@code
     * read(0, null)} would leak one per image.
     */
    private final ImageReadParam param = reader.getDefaultReadParam();

    /** True when libwebp decodes in this JVM (its native library loaded). */
    static boolean available() {
        return AVAILABLE;
    }

    private static boolean probe() {
        try {
            RgbImage rgb = new LibWebpDecoder().decode(PROBE, 1);
            if (rgb.get(0, 0, 0) == 10 && rgb.get(0, 0, 1) == 200 && rgb.get(0, 0, 2) == 30) {
                return true;
            }
            LOG.warn(
                    "libwebp (webp-imageio) decoded a test image wrongly, so WebP is decoded with"
                            + " TwelveMonkeys' ImageIO reader, whose lossy decoder turns some files"
                            + " (libwebp method 0) into wrong colours (docs/parity.md).");
            return false;
        } catch (RejectedRecordException | RuntimeException | LinkageError e) {
            LOG.warn(
                    "libwebp (webp-imageio's native library) is not usable ({}), so WebP is decoded"
                            + " with TwelveMonkeys' ImageIO reader, whose lossy decoder turns some"
                            + " files (libwebp method 0) into wrong colours (docs/parity.md)."
                            + " webp-imageio extracts its library to java.io.tmpdir: it needs a"
                            + " supported OS/CPU and a tmpdir that allows executing it (or set"
                            + " -Dcom.luciad.imageio.webp.tmpdir).",
                    e.toString());
            return false;
        }
    }

    /**
     * Decodes a WebP file (still or animated: its first frame).
     *
     * @param encoded the file's bytes, starting with {@code RIFF....WEBP}
     * @param maxSourcePixels largest accepted {@code width * height} of the canvas, in pixels
     * @return the RGB image in stored orientation (alpha composited over white), a new array
     * @throws RejectedRecordException IMAGE_TOO_MANY_PIXELS from the header, before decoding;
     *     CORRUPT_IMAGE for a file libwebp cannot decode or a malformed animation
     */
    RgbImage decode(byte[] encoded, long maxSourcePixels) throws RejectedRecordException {
        Container file = Container.parse(encoded);
        if (file.animated) {
            ImageDecoder.checkPixels(
                    ImageFormat.WEBP, file.canvasWidth, file.canvasHeight, maxSourcePixels);
            return firstFrame(file, encoded);
        }
        Decoded still =
                decodeImage(
                        encoded,
                        0,
                        encoded.length,
                        (w, h) ->
                                ImageDecoder.checkPixels(ImageFormat.WEBP, w, h, maxSourcePixels));
        byte[] out = new byte[still.width * still.height * 3];
        RgbConverter.convertArgb(
                still.argb, still.width, still.height, still.alpha, out, still.width, 0, 0);
        return new RgbImage(still.width, still.height, out);
    }

    private RgbImage firstFrame(Container file, byte[] encoded) throws RejectedRecordException {
        if (file.frameStart < 0) {
            throw corrupt(file, "animated WebP without an image in its first frame (ANMF)");
        }
        int cw = file.canvasWidth;
        int ch = file.canvasHeight;
        Decoded frame =
                decodeImage(
                        encoded,
                        file.frameStart,
                        file.frameEnd - file.frameStart,
                        (w, h) -> {
                            if (w != file.frameWidth
                                    || h != file.frameHeight
                                    || (long) file.frameX + w > cw
                                    || (long) file.frameY + h > ch) {
                                throw corrupt(
                                        file,
                                        "first frame "
                                                + w
                                                + "x"
                                                + h
                                                + " (ANMF says "
                                                + file.frameWidth
                                                + "x"
                                                + file.frameHeight
                                                + " at "
                                                + file.frameX
                                                + ","
                                                + file.frameY
                                                + ") does not fit the canvas");
                            }
                        });
        byte[] out = new byte[cw * ch * 3];
        if (file.alpha) {
            Arrays.fill(out, (byte) 0xFF); // transparent black over white
        }
        RgbConverter.convertArgb(
                frame.argb,
                frame.width,
                frame.height,
                file.alpha,
                out,
                cw,
                file.frameX,
                file.frameY);
        return new RgbImage(cw, ch, out);
    }

    /** Checks an image's header size before its pixels are decoded. */
    @FunctionalInterface
    private interface SizeCheck {
        void check(int width, int height) throws RejectedRecordException;
    }

    private Decoded decodeImage(byte[] data, int offset, int length, SizeCheck sizeCheck)
            throws RejectedRecordException {
        String size = "";
        try (ByteArrayImageInputStream in = new ByteArrayImageInputStream(data, offset, length)) {
            reader.setInput(in, true, true);
            int w = reader.getWidth(0);
            int h = reader.getHeight(0);
            size = " " + w + "x" + h;
            sizeCheck.check(w, h);
            BufferedImage img = reader.read(0, param);
            int[] argb = ((DataBufferInt) img.getRaster().getDataBuffer()).getData();
            return new Decoded(
                    img.getWidth(), img.getHeight(), argb, img.getColorModel().hasAlpha());
        } catch (IOException | RuntimeException e) {
            throw new RejectedRecordException(
                    RejectReason.CORRUPT_IMAGE, "corrupt WEBP" + size + ": libwebp: " + e, e);
        } finally {
            // drops the reader's copy of the file (its setInput rejects null)
            reader.setInput(new ByteArrayImageInputStream(new byte[0]), true, true);
        }
    }

    private static RejectedRecordException corrupt(Container file, String why) {
        return new RejectedRecordException(
                RejectReason.CORRUPT_IMAGE,
                "corrupt WEBP " + file.canvasWidth + "x" + file.canvasHeight + ": " + why);
    }

    /** A decoded image: ARGB ints (alpha in the top byte, not premultiplied), row-major. */
    private static final class Decoded {
        final int width;
        final int height;
        final int[] argb;
        final boolean alpha;

        Decoded(int width, int height, int[] argb, boolean alpha) {
            this.width = width;
            this.height = height;
            this.argb = argb;
            this.alpha = alpha;
        }
    }

    /**
     * What the RIFF container says (WebP container specification): for an animation (VP8X with the
     * animation flag) the canvas, the alpha flag and where the first ANMF frame's image chunks are.
     * Still images are left to libwebp, which parses them itself.
     */
    static final class Container {
        boolean animated;
        boolean alpha;
        int canvasWidth;
        int canvasHeight;
        int frameX;
        int frameY;
        int frameWidth;
        int frameHeight;

        /** Offset of the first frame's first ALPH/VP8/VP8L chunk; -1 if none. */
        int frameStart = -1;

        /** Offset just past the first frame's VP8/VP8L chunk. */
        int frameEnd;

        /** Parses the chunk list; stops at the first ANMF, or at the end of the data. */
        static Container parse(byte[] d) {
            Container c = new Container();
            int end = (int) Math.min(d.length, 8 + u32(d, 4));
            int pos = 12;
            while (pos + 8 <= end) {
                long size = u32(d, pos + 4);
                int payload = pos + 8;
                int payloadEnd = (int) Math.min(end, payload + size);
                if (tag(d, pos, "VP8X") && size >= 10 && payloadEnd - payload >= 10) {
                    int flags = d[payload] & 0xFF;
                    c.animated = (flags & VP8X_ANIMATION) != 0;
                    c.alpha = (flags & VP8X_ALPHA) != 0;
                    c.canvasWidth = u24(d, payload + 4) + 1;
                    c.canvasHeight = u24(d, payload + 7) + 1;
                    if (!c.animated) {
                        return c;
                    }
                } else if (tag(d, pos, "ANMF") && c.animated) {
                    if (payloadEnd - payload >= ANMF_HEADER) {
                        c.frameX = 2 * u24(d, payload);
                        c.frameY = 2 * u24(d, payload + 3);
                        c.frameWidth = u24(d, payload + 6) + 1;
                        c.frameHeight = u24(d, payload + 9) + 1;
                        c.findImage(d, payload + ANMF_HEADER, payloadEnd);
                    }
                    return c;
                }
                pos = payload + (int) Math.min(size + (size & 1), Integer.MAX_VALUE - payload);
            }
            return c;
        }

        /** The frame's image chunks: an optional ALPH, then VP8 or VP8L; unknown ones skipped. */
        private void findImage(byte[] d, int pos, int end) {
            int alph = -1;
            while (pos + 8 <= end) {
                long size = u32(d, pos + 4);
                int next = (int) Math.min((long) end, pos + 8 + size + (size & 1));
                if (tag(d, pos, "ALPH")) {
                    alph = pos;
                } else if (tag(d, pos, "VP8 ") || tag(d, pos, "VP8L")) {
                    frameStart = alph >= 0 && tag(d, pos, "VP8 ") ? alph : pos;
                    frameEnd = (int) Math.min((long) end, pos + 8 + size);
                    return;
                }
                pos = next;
            }
        }

        private static boolean tag(byte[] d, int pos, String fourcc) {
            for (int i = 0; i < 4; i++) {
                if (d[pos + i] != fourcc.charAt(i)) {
                    return false;
                }
            }
            return true;
        }

        private static int u24(byte[] d, int pos) {
            return (d[pos] & 0xFF) | (d[pos + 1] & 0xFF) << 8 | (d[pos + 2] & 0xFF) << 16;
        }

        private static long u32(byte[] d, int pos) {
            return u24(d, pos) | (long) (d[pos + 3] & 0xFF) << 24;
        }
    }
}
