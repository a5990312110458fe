package dev.stoker.operators.image;

import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import java.awt.image.BufferedImage;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import javax.imageio.IIOException;
import javax.imageio.IIOImage;
import javax.imageio.ImageReader;
import javax.imageio.metadata.IIOMetadata;
import javax.imageio.stream.ImageInputStream;
import javax.imageio.stream.MemoryCacheImageInputStream;
import me.saharnooby.qoi.QOIImage;
import me.saharnooby.qoi.QOIUtil;
import org.w3c.dom.NamedNodeMap;
import org.w3c.dom.Node;

/**
 * Decodes encoded image bytes into an 8-bit {@link RgbImage}, as Pillow's {@code Image.open} +
 * {@code ImageOps.exif_transpose} + Hugging Face {@code convert_to_rgb} would.
 *
 * <ul>
 *   <li>Formats, recognised by magic bytes ({@link ImageFormat}): JPEG, PNG (1-16 bit, grey,
 *       palette, alpha, APNG's default image), GIF, WebP (lossy, lossless, alpha, animated) and
 *       BMP; and the other formats Pillow 12 opens that a Java library decodes as Pillow does: TIFF
 *       and BigTIFF (first page; raw, LZW, deflate, PackBits, JPEG, CCITT; RGB, grey, bilevel,
 *       palette, CMYK, alpha), PSD (the merged image), ICO (the icon Pillow picks, {@link
 *       IconDirectory}), TGA, PBM/PGM/PPM (plain and raw), PCX, QOI and JPEG 2000 (JP2 and
 *       codestream). PNG, GIF and BMP go through the JDK's ImageIO readers with the disk cache off;
 *       TIFF, PSD, ICO, TGA, PNM and PCX through TwelveMonkeys', JPEG 2000 through jai-imageio's
 *       JJ2000 reader, QOI through qoi-java. Formats Stoker recognises but does not decode (AVIF,
 *       HEIC, JPEG XL, the rarer ones Pillow opens, PDF, SVG) are rejected naming the format
 *       ({@link RejectedFormats}).
 *   <li>WebP: decoded with libwebp, Pillow's own decoder and version ({@link LibWebpDecoder}), when
 *       {@link LibWebpDecoder#available() its native library loads}; otherwise, and then with one
 *       WARN at start-up and the gauge {@code webpDecoderNative} = 0, with TwelveMonkeys' ImageIO
 *       reader, whose lossy (VP8) decoder produces wrong colours for some files (libwebp's {@code
 *       method=0}, see docs/parity.md). Both readers are created directly, not looked up in
 *       ImageIO's JVM-global registry ({@link ImageReaders}: nothing of the job is registered
 *       there, so a TaskManager runs job after job).
 *   <li>JPEG: YCbCr, RGB and grayscale JPEGs are decoded with libjpeg-turbo ({@link
 *       TurboJpegDecoder}, Pillow's own decoder) when {@link TurboJpeg#available() it is
 *       installed}; CMYK/YCCK JPEGs (through TwelveMonkeys), JPEGs libjpeg-turbo rejects or warns
 *       about, and every JPEG when it is not installed go through ImageIO. The image may be decoded
 *       at a reduced DCT scale when the caller asks for it ({@link #decode(byte[], long,
 *       TargetSize)}).
 *   <li>Size guard: the header dimensions (and a GIF's logical screen) are read first; if {@code
 *       width * height > maxSourcePixels} the image is rejected before any pixel buffer exists.
 *   <li>Animations: the first frame only; a GIF frame is placed on its logical screen.
 *   <li>Colour: see {@link RgbConverter}; alpha is composited over white, and so is a PNG colour
 *       key ({@code tRNS} on an RGB image), which transformers' {@code convert_to_rgb} leaves in
 *       the key colour. 16-bit samples (and PNM samples with any maxval) are scaled to 8 bits as
 *       {@code round(v * 255 / max)}, where Pillow clips 16-bit grey to 255. A PSD merged image
 *       with an alpha channel is un-matted from white first (Photoshop stores it matted; Pillow
 *       composites it a second time). These are the deliberate differences from Pillow
 *       (docs/parity.md).
 *   <li>EXIF orientation 1-8 (JPEG APP1, PNG eXIf, WebP EXIF, TIFF's own Orientation tag) is
 *       applied.
 * </ul>
 *
 * <p>Errors: {@link RejectReason#UNSUPPORTED_IMAGE} for unknown bytes, {@link
 * RejectReason#IMAGE_TOO_MANY_PIXELS} for bombs, {@link RejectReason#CORRUPT_IMAGE} for empty,
 * truncated or damaged files (including JPEGs whose entropy-coded data ends early, which ImageIO
 * only reports as a warning). Every decoder failure, checked or runtime, becomes a {@link
 * RejectedRecordException}.
 *
 * <p>Not thread-safe: an instance holds a native JPEG decompressor and reuses its pixel buffer, so
 * a decoded image is valid until the next call, and one libwebp reader; use one instance per task
 * thread.
 */
public final class ImageDecoder {
    private static final String GIF_IMAGE_FORMAT = "javax_imageio_gif_image_1.0";

    /** QOI's end marker: seven 0x00 bytes and one 0x01. */
    private static final byte[] QOI_END = {0, 0, 0, 0, 0, 0, 0, 1};

    /** The DCT scale denominators libjpeg-turbo's SIMD code covers, largest first. */
    private static final int[] DCT_DENOMINATORS = {8, 4, 2};

    static {
        // before anything in this class touches ImageIO: its JVM-global registry must not load
        // the job's plugins (see ImageReaders)
        ImageReaders.init();
    }

    /** Null when JPEGs go through ImageIO. */
    private final TurboJpegDecoder turbo;

    /** Null when WebP goes through TwelveMonkeys' ImageIO reader. */
    private final LibWebpDecoder webp;

    /**
     * The size an image will be resized to, from its displayed (EXIF-oriented) size.
     *
     * @see #decode(byte[], long, TargetSize)
     */
    @FunctionalInterface
    public interface TargetSize {
        /**
         * @param height displayed height in pixels
         * @param width displayed width in pixels
         * @return {@code {height, width}} in pixels that the decoded image will be resized to
         * @throws RejectedRecordException if the image cannot be resized (the decode fails with it)
         */
        int[] of(int height, int width) throws RejectedRecordException;
    }

    /**
     * A decoder that uses libjpeg-turbo for JPEGs when it is installed and libwebp for WebP when
     * its native library loads.
     */
    public ImageDecoder() {
        this(TurboJpeg.available(), LibWebpDecoder.available());
    }

    /**
     * @param nativeJpeg whether to decode JPEGs with libjpeg-turbo; true needs {@link
     *     TurboJpeg#available()}
     */
    ImageDecoder(boolean nativeJpeg) {
        this(nativeJpeg, LibWebpDecoder.available());
    }

    /**
     * @param nativeJpeg whether to decode JPEGs with libjpeg-turbo; true needs {@link
     *     TurboJpeg#available()}
     * @param nativeWebp whether to decode WebP with libwebp; true needs {@link
     *     LibWebpDecoder#available()}
     */
    ImageDecoder(boolean nativeJpeg, boolean nativeWebp) {
        this.turbo = nativeJpeg ? new TurboJpegDecoder() : null;
        this.webp = nativeWebp ? new LibWebpDecoder() : null;
    }

    /** Whether JPEGs are decoded with libjpeg-turbo (else all with ImageIO). */
    public boolean nativeJpeg() {
        return turbo != null;
    }

    /** Whether WebP is decoded with libwebp (else with TwelveMonkeys' ImageIO reader). */
    public boolean nativeWebp() {
        return webp != null;
    }

    /**
     * Decodes {@code encoded}.
     *
     * @param encoded the file's bytes
     * @param maxSourcePixels largest accepted {@code width * height} of the stored image, in pixels
     * @return the oriented RGB image
     * @throws RejectedRecordException with reason UNSUPPORTED_IMAGE, IMAGE_TOO_MANY_PIXELS or
     *     CORRUPT_IMAGE and a message naming the format and dimensions where known
     */
    public RgbImage decode(byte[] encoded, long maxSourcePixels) throws RejectedRecordException {
        return decode(encoded, maxSourcePixels, null);
    }

    /**
     * Decodes {@code encoded}, for a JPEG decoded by libjpeg-turbo possibly at a reduced size: the
     * DCT-domain scale 1/2, 1/4 or 1/8, the smallest whose output still covers {@code scaleTo}'s
     * target on both sides (see {@link #dctDenominator}); other images are decoded at full size.
     * The pixels then differ from a full decode followed by the same resize (see docs/parity.md).
     *
     * @param encoded the file's bytes
     * @param maxSourcePixels largest accepted {@code width * height} of the stored image, in pixels
     * @param scaleTo the resize target of the displayed image; {@code null} decodes at full size
     * @return the oriented RGB image, at least as large as {@code scaleTo}'s target on each side
     * @throws RejectedRecordException with reason UNSUPPORTED_IMAGE, IMAGE_TOO_MANY_PIXELS or
     *     CORRUPT_IMAGE, or what {@code scaleTo} throws
     */
    public RgbImage decode(byte[] encoded, long maxSourcePixels, TargetSize scaleTo)
            throws RejectedRecordException {
        if (encoded == null || encoded.length == 0) {
            throw new RejectedRecordException(
                    RejectReason.CORRUPT_IMAGE, "empty image file (0 bytes)");
        }
        ImageFormat format = ImageFormat.sniff(encoded);
        if (format == null) {
            String named = RejectedFormats.describe(encoded);
            throw named != null
                    ? notDecoded(named, encoded)
                    : new RejectedRecordException(
                            RejectReason.UNSUPPORTED_IMAGE,
                            "not a supported image (" + describeStart(encoded) + ")");
        }
        String variant = RejectedFormats.unsupportedVariant(format, encoded);
        if (variant != null) {
            throw notDecoded(variant, encoded);
        }
        if (format == ImageFormat.QOI) {
            return decodeQoi(encoded, maxSourcePixels);
        }
        if (format == ImageFormat.PNG) {
            String defect = PngIntegrity.firstDefect(encoded);
            if (defect != null) {
                throw new RejectedRecordException(
                        RejectReason.CORRUPT_IMAGE, "corrupt PNG: " + defect);
            }
        }
        if (format == ImageFormat.WEBP && webp != null) {
            RgbImage stored = webp.decode(encoded, maxSourcePixels);
            return ExifOrientation.apply(stored, ExifOrientation.read(encoded, format));
        }
        if (format == ImageFormat.JPEG && turbo != null) {
            RgbImage decoded = decodeTurbo(encoded, maxSourcePixels, scaleTo);
            if (decoded != null) {
                return decoded;
            }
        }
        ImageReader reader = readerFor(format);
        String size = "";
        try (ImageInputStream in = new EofLimitedInputStream(encoded)) {
            reader.setInput(in, true, format != ImageFormat.GIF);
            int canvasW = 0;
            int canvasH = 0;
            if (format == ImageFormat.GIF && encoded.length >= 10) {
                canvasW = Math.max(1, (encoded[6] & 0xFF) | (encoded[7] & 0xFF) << 8);
                canvasH = Math.max(1, (encoded[8] & 0xFF) | (encoded[9] & 0xFF) << 8);
                checkPixels(format, canvasW, canvasH, maxSourcePixels);
            }
            int index = 0;
            if (format == ImageFormat.ICO) {
                // the reader's sizes are the directory's (at most 256 x 256), not the stored
                // image's
                IconDirectory icons = IconDirectory.read(encoded);
                index = icons.index;
                size = " " + icons.width + "x" + icons.height;
                checkPixels(format, icons.width, icons.height, maxSourcePixels);
            }
            int w = reader.getWidth(index);
            int h = reader.getHeight(index);
            size = " " + w + "x" + h;
            checkPixels(format, w, h, maxSourcePixels);
            if (format != ImageFormat.GIF) {
                canvasW = w;
                canvasH = h;
            }
            List<String> warnings = new ArrayList<>();
            reader.addIIOReadWarningListener((source, warning) -> warnings.add(warning));
            IIOImage frame = reader.readAll(index, null);
            checkWarnings(format, size, warnings);
            BufferedImage img = (BufferedImage) frame.getRenderedImage();
            RgbImage rgb = toCanvas(img, frame.getMetadata(), format, canvasW, canvasH);
            return ExifOrientation.apply(rgb, ExifOrientation.read(encoded, format));
        } catch (IOException | RuntimeException e) {
            throw new RejectedRecordException(
                    RejectReason.CORRUPT_IMAGE, "corrupt " + format + size + ": " + e, e);
        } finally {
            reader.dispose();
        }
    }

    /** UNSUPPORTED_IMAGE for a format (or variant) {@link RejectedFormats} names. */
    private static RejectedRecordException notDecoded(String format, byte[] encoded) {
        return new RejectedRecordException(
                RejectReason.UNSUPPORTED_IMAGE,
                format + ", not decoded by Stoker (" + encoded.length + " bytes)");
    }

    /**
     * Decodes a QOI file with qoi-java (RGB or RGBA, 8 bits per channel; the colour-space byte is
     * informational in QOI and ignored, as Pillow ignores it). A file without QOI's 8-byte end
     * marker decodes when its pixels are complete, as Pillow decodes it.
     */
    private static RgbImage decodeQoi(byte[] encoded, long maxSourcePixels)
            throws RejectedRecordException {
        String size = "";
        try {
            if (encoded.length < 14) {
                throw new IOException("header cut at " + encoded.length + " bytes");
            }
            long w = readUint32(encoded, 4);
            long h = readUint32(encoded, 8);
            size = " " + w + "x" + h;
            checkPixels(ImageFormat.QOI, w, h, maxSourcePixels);
            boolean alpha = encoded[12] == 4;
            QOIImage qoi =
                    QOIUtil.readImage(new ByteArrayInputStream(withQoiEndMarker(encoded)), 4);
            byte[] rgba = qoi.getPixelData();
            int pixels = Math.multiplyExact((int) w, (int) h);
            int[] argb = new int[pixels];
            for (int i = 0, p = 0; i < pixels; i++, p += 4) {
                argb[i] =
                        (rgba[p + 3] & 0xFF) << 24
                                | (rgba[p] & 0xFF) << 16
                                | (rgba[p + 1] & 0xFF) << 8
                                | rgba[p + 2] & 0xFF;
            }
            byte[] out = new byte[Math.multiplyExact(pixels, 3)];
            RgbConverter.convertArgb(argb, (int) w, (int) h, alpha, out, (int) w, 0, 0);
            return new RgbImage((int) w, (int) h, out);
        } catch (IOException | RuntimeException e) {
            throw new RejectedRecordException(
                    RejectReason.CORRUPT_IMAGE, "corrupt QOI" + size + ": " + e, e);
        }
    }

    /** {@code qoi}, or a copy with the end marker appended when it lacks one. */
    private static byte[] withQoiEndMarker(byte[] qoi) {
        int n = qoi.length;
        if (n >= 8 && Arrays.equals(qoi, n - 8, n, QOI_END, 0, 8)) {
            return qoi;
        }
        byte[] ended = Arrays.copyOf(qoi, n + 8);
        ended[n + 7] = 1;
        return ended;
    }

    private static long readUint32(byte[] d, int p) {
        return (d[p] & 0xFFL) << 24
                | (d[p + 1] & 0xFF) << 16
                | (d[p + 2] & 0xFF) << 8
                | d[p + 3] & 0xFF;
    }

    /**
     * Decodes a JPEG with libjpeg-turbo; {@code null} when ImageIO must decode it instead (no
     * readable header, CMYK/YCCK, or libjpeg-turbo failed or warned).
     */
    private RgbImage decodeTurbo(byte[] encoded, long maxSourcePixels, TargetSize scaleTo)
            throws RejectedRecordException {
        if (!turbo.readHeader(withEndMarker(encoded))) {
            return null;
        }
        int w = turbo.width();
        int h = turbo.height();
        checkPixels(ImageFormat.JPEG, w, h, maxSourcePixels);
        if (!turbo.decodesToRgb()) {
            return null;
        }
        int orientation = ExifOrientation.read(encoded, ImageFormat.JPEG);
        int denominator = 1;
        if (scaleTo != null) {
            boolean swap = ExifOrientation.swapsSides(orientation);
            int[] target = scaleTo.of(swap ? w : h, swap ? h : w);
            denominator =
                    swap
                            ? dctDenominator(w, h, target[0], target[1])
                            : dctDenominator(w, h, target[1], target[0]);
        }
        RgbImage stored = turbo.decode(denominator);
        return stored == null ? null : ExifOrientation.apply(stored, orientation);
    }

    /**
     * {@code jpeg}, or a copy with the EOI marker appended when it lacks one. libjpeg-turbo warns
     * "Premature end of JPEG file" both for a file that only lacks its EOI (complete pixels, which
     * the decoder accepts) and for a cut one; with the marker in place only a cut file warns.
     */
    private static byte[] withEndMarker(byte[] jpeg) {
        int n = jpeg.length;
        if (n >= 2 && jpeg[n - 2] == (byte) 0xFF && jpeg[n - 1] == (byte) 0xD9) {
            return jpeg;
        }
        byte[] ended = Arrays.copyOf(jpeg, n + 2);
        ended[n] = (byte) 0xFF;
        ended[n + 1] = (byte) 0xD9;
        return ended;
    }

    /**
     * The DCT scale for decoding a {@code width x height} JPEG that will be resized to {@code
     * targetWidth x targetHeight} (same orientation): the largest of 8, 4 and 2 with {@code
     * ceil(width / d) >= targetWidth} and {@code ceil(height / d) >= targetHeight}, else 1. So the
     * resize after it never enlarges a side that a full decode would have shrunk.
     *
     * @return 1, 2, 4 or 8
     */
    static int dctDenominator(int width, int height, int targetWidth, int targetHeight) {
        for (int d : DCT_DENOMINATORS) {
            if ((width + d - 1) / d >= targetWidth && (height + d - 1) / d >= targetHeight) {
                return d;
            }
        }
        return 1;
    }

    /**
     * An in-memory image stream that fails once a reader keeps reading past the end of the data.
     * Some decoders swallow {@link java.io.EOFException} and go on with zero bits (TwelveMonkeys'
     * WebP lossless bit reader does), so a cut or crafted file of a few dozen bytes can keep a
     * decoder busy for minutes; a plain {@link IIOException} is not swallowed and ends the decode.
     */
    static final class EofLimitedInputStream extends MemoryCacheImageInputStream {
        /** Reads that hit the end of the data before the decode is abandoned. */
        static final int MAX_READS_AT_EOF = 1024;

        private int readsAtEof;

        EofLimitedInputStream(byte[] data) {
            super(new ByteArrayInputStream(data));
        }

        @Override
        public int read() throws IOException {
            int b = super.read();
            if (b < 0) {
                atEof();
            }
            return b;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            int n = super.read(b, off, len);
            if (n < 0) {
                atEof();
            }
            return n;
        }

        private void atEof() throws IIOException {
            if (++readsAtEof > MAX_READS_AT_EOF) {
                throw new IIOException(
                        "data ends early: the decoder read past the end of the file "
                                + MAX_READS_AT_EOF
                                + " times");
            }
        }
    }

    /**
     * The decompression-bomb guard from header dimensions.
     *
     * @throws RejectedRecordException {@link RejectReason#IMAGE_TOO_MANY_PIXELS} when {@code w * h
     *     > maxSourcePixels}
     */
    static void checkPixels(ImageFormat format, long w, long h, long maxSourcePixels)
            throws RejectedRecordException {
        if (w * h > maxSourcePixels) {
            throw new RejectedRecordException(
                    RejectReason.IMAGE_TOO_MANY_PIXELS,
                    "image too large: "
                            + format
                            + " "
                            + w
                            + "x"
                            + h
                            + " = "
                            + w * h
                            + " pixels > limit "
                            + maxSourcePixels);
        }
    }

    /** A new reader for {@code format} (see {@link ImageReaders}). */
    private static ImageReader readerFor(ImageFormat format) throws RejectedRecordException {
        try {
            return ImageReaders.create(format);
        } catch (IOException e) {
            throw new RejectedRecordException(
                    RejectReason.UNSUPPORTED_IMAGE, "no ImageIO reader for " + format + ": " + e);
        }
    }

    /**
     * libjpeg reports a cut or damaged entropy-coded segment only as a warning ("Corrupt JPEG data:
     * premature end of data segment") and fills the rest with grey; such a partial image must not
     * be emitted. Other warnings are tolerated, as Pillow tolerates them: a file that only lacks
     * its final EOI marker decodes completely, and ICC or extraneous-byte warnings are harmless.
     */
    private static void checkWarnings(ImageFormat format, String size, List<String> warnings)
            throws RejectedRecordException {
        for (String warning : warnings) {
            if (warning.toLowerCase(Locale.ROOT).contains("premature end of data segment")) {
                throw new RejectedRecordException(
                        RejectReason.CORRUPT_IMAGE, "truncated " + format + size + ": " + warning);
            }
        }
    }

    private static RgbImage toCanvas(
            BufferedImage img, IIOMetadata meta, ImageFormat format, int canvasW, int canvasH) {
        int dx = 0;
        int dy = 0;
        int cw = img.getWidth();
        int ch = img.getHeight();
        if (format == ImageFormat.GIF && meta != null) {
            Node descriptor = child(meta.getAsTree(GIF_IMAGE_FORMAT), "ImageDescriptor");
            if (descriptor != null) {
                NamedNodeMap attrs = descriptor.getAttributes();
                dx = Integer.parseInt(attrs.getNamedItem("imageLeftPosition").getNodeValue());
                dy = Integer.parseInt(attrs.getNamedItem("imageTopPosition").getNodeValue());
                cw = canvasW;
                ch = canvasH;
            }
        }
        if (dx == 0 && dy == 0 && cw == img.getWidth() && ch == img.getHeight()) {
            byte[] out = new byte[cw * ch * 3];
            RgbConverter.convert(img, out, cw, 0, 0);
            return new RgbImage(cw, ch, out);
        }
        byte[] out = new byte[cw * ch * 3];
        Arrays.fill(out, (byte) 0xFF);
        int fw = Math.min(img.getWidth(), cw - dx);
        int fh = Math.min(img.getHeight(), ch - dy);
        if (fw > 0 && fh > 0) {
            RgbConverter.convert(img.getSubimage(0, 0, fw, fh), out, cw, dx, dy);
        }
        return new RgbImage(cw, ch, out);
    }

    private static Node child(Node parent, String name) {
        for (Node n = parent.getFirstChild(); n != null; n = n.getNextSibling()) {
            if (name.equals(n.getNodeName())) {
                return n;
            }
        }
        return null;
    }

    private static String describeStart(byte[] d) {
        int n = Math.min(d.length, 24);
        StringBuilder text = new StringBuilder();
        boolean printable = true;
        for (int i = 0; i < n; i++) {
            int c = d[i] & 0xFF;
            printable &= c >= 0x20 && c < 0x7F || c == '\n' || c == '\r' || c == '\t';
            text.append(c >= 0x20 && c < 0x7F ? (char) c : ' ');
        }
        if (printable) {
            return d.length + " bytes of text starting '" + text.toString().trim() + "'";
        }
        StringBuilder hex = new StringBuilder();
        for (int i = 0; i < Math.min(n, 8); i++) {
            hex.append(String.format("%02x", d[i] & 0xFF));
        }
        return d.length + " bytes starting 0x" + hex;
    }
}
