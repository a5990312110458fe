package dev.stoker.operators.image;

import java.nio.charset.StandardCharsets;

/**
 * Names the image formats Stoker recognises but does not decode, so that their reject reason says
 * which format and variant a file is ({@code UNSUPPORTED_IMAGE: AVIF (AV1, 10-bit 4:2:0) ...})
 * instead of only its first bytes; and the variants of decoded formats that are rejected ({@link
 * #unsupportedVariant}). Formats it does not know (e.g. Pillow's IM, DCX, FLI, GBR, SPIDER, PCD)
 * are {@code not a supported image} with their first bytes.
 *
 * <ul>
 *   <li>HEIF family (ISO BMFF {@code ftyp} box): AVIF ({@code avif}/{@code avis} brands, with the
 *       AV1 bit depth and chroma subsampling from the {@code av1C} box) and HEIC/HEIF. Pillow 12
 *       opens AVIF; no maintained Java AV1 decoder with natives on Maven Central exists. HEIC needs
 *       a Pillow plug-in too ({@code pillow-heif}).
 *   <li>CUR (Windows cursors): Pillow's {@code CurImagePlugin} picks an entry and treats the AND
 *       mask and alpha in its own way (by entry position), which TwelveMonkeys' reader does not.
 *   <li>JPEG XL (Pillow needs a plug-in).
 *   <li>Formats Pillow opens that are rare in training data: SGI, ICNS, DDS, XBM, XPM, EPS, BLP,
 *       Sun raster, MSP, FITS, PFM (floating point).
 *   <li>Documents that are not images: PDF, SVG.
 * </ul>
 */
final class RejectedFormats {
    private RejectedFormats() {}

    /**
     * The name (and variant, where the header tells it) of the format {@code d} starts with, when
     * Stoker does not decode it; {@code null} when the bytes are not a known format.
     */
    static String describe(byte[] d) {
        if (ImageFormat.starts(d, 0, 0, 2, 0) && ImageFormat.hasIconDirectory(d)) {
            return "CUR (Windows cursor: Pillow picks its entry and ignores its AND mask in its own"
                    + " way, which no Java reader reproduces)";
        }
        String heif = heif(d);
        if (heif != null) {
            return heif;
        }
        if (ImageFormat.starts(d, 0xFF, 0x0A)
                || ImageFormat.starts(d, 0, 0, 0, 0x0C, 'J', 'X', 'L', ' ')) {
            return "JPEG XL (Pillow needs a plug-in for it too)";
        }
        if (ImageFormat.starts(d, 0x01, 0xDA)) {
            return "SGI";
        }
        if (ImageFormat.starts(d, 'i', 'c', 'n', 's')) {
            return "ICNS";
        }
        if (ImageFormat.starts(d, 'D', 'D', 'S', ' ')) {
            return "DDS";
        }
        if (ImageFormat.starts(d, 'B', 'L', 'P', '1')
                || ImageFormat.starts(d, 'B', 'L', 'P', '2')) {
            return "BLP";
        }
        if (ImageFormat.starts(d, 0x59, 0xA6, 0x6A, 0x95)) {
            return "Sun raster";
        }
        if (ImageFormat.starts(d, 'D', 'a', 'n', 'M')
                || ImageFormat.starts(d, 'L', 'i', 'n', 'S')) {
            return "MSP";
        }
        if (d.length >= 3
                && d[0] == 'P'
                && (d[1] == 'f' || d[1] == 'F')
                && (d[2] == ' ' || d[2] == '\n' || d[2] == '\r' || d[2] == '\t')) {
            return "PFM (floating-point Netpbm)";
        }
        if (ImageFormat.starts(d, 0xC5, 0xD0, 0xD3, 0xC6)
                || ImageFormat.starts(d, '%', '!', 'P', 'S')) {
            return "EPS (PostScript)";
        }
        if (ImageFormat.starts(d, '%', 'P', 'D', 'F')) {
            return "PDF (a document, not an image)";
        }
        String head = new String(d, 0, Math.min(d.length, 512), StandardCharsets.ISO_8859_1);
        if (head.startsWith("SIMPLE  =")) {
            return "FITS";
        }
        if (head.startsWith("#define") && head.contains("_width")) {
            return "XBM";
        }
        if (head.startsWith("/* XPM */")) {
            return "XPM";
        }
        String start =
                (head.startsWith("\u00EF\u00BB\u00BF") ? head.substring(3) : head).stripLeading();
        if (start.startsWith("<svg")
                || (start.startsWith("<?xml") || start.startsWith("<!DOCTYPE svg"))
                        && head.contains("<svg")) {
            return "SVG (vector graphics, not a raster image)";
        }
        return null;
    }

    /**
     * The variant of a file of a decoded {@code format} that Stoker rejects, because no Java reader
     * decodes it as Pillow does; {@code null} for every other file. TGA: grey with alpha (16-bit
     * grey, which TwelveMonkeys reads as one 16-bit sample) and 1-bit images (which it does not
     * read).
     */
    static String unsupportedVariant(ImageFormat format, byte[] d) {
        if (format == ImageFormat.TGA) {
            int imageType = d[2] & 0xFF;
            int depth = d[16] & 0xFF;
            if ((imageType == 3 || imageType == 11) && depth == 16) {
                return "TGA (grey with alpha, 16 bits per pixel)";
            }
            if (depth == 1) {
                return "TGA (1 bit per pixel)";
            }
        }
        return null;
    }

    /** AVIF, HEIC or HEIF from an ISO BMFF {@code ftyp} box, or {@code null}. */
    private static String heif(byte[] d) {
        if (d.length < 16 || d[4] != 'f' || d[5] != 't' || d[6] != 'y' || d[7] != 'p') {
            return null;
        }
        int boxSize = readInt(d, 0);
        int end = Math.min(d.length, boxSize < 16 ? 16 : boxSize);
        boolean avif = false;
        boolean heic = false;
        boolean heif = false;
        for (int p = 8; p + 4 <= end; p += 4) {
            if (p == 12) {
                continue; // minor version
            }
            String brand = new String(d, p, 4, StandardCharsets.ISO_8859_1);
            switch (brand) {
                case "avif":
                case "avis":
                    avif = true;
                    break;
                case "heic":
                case "heix":
                case "heim":
                case "heis":
                case "hevc":
                case "hevx":
                    heic = true;
                    break;
                case "mif1":
                case "msf1":
                    heif = true;
                    break;
                default:
                    break;
            }
        }
        if (avif) {
            return "AVIF (" + av1Variant(d) + "; Stoker has no AV1 decoder)";
        }
        if (heic) {
            return "HEIC (HEVC in HEIF; Pillow needs the pillow-heif plug-in for it too)";
        }
        return heif ? "HEIF" : null;
    }

    /**
     * "AV1, B-bit S" from the first {@code av1C} box (AV1 codec configuration: high_bitdepth,
     * twelve_bit, monochrome and chroma subsampling in its third byte), or "AV1".
     */
    private static String av1Variant(byte[] d) {
        for (int i = 4; i + 7 <= d.length; i++) {
            if (d[i] == 'a' && d[i + 1] == 'v' && d[i + 2] == '1' && d[i + 3] == 'C') {
                int flags = d[i + 6] & 0xFF;
                boolean high = (flags & 0x40) != 0;
                boolean twelve = (flags & 0x20) != 0;
                boolean mono = (flags & 0x10) != 0;
                boolean subX = (flags & 0x08) != 0;
                boolean subY = (flags & 0x04) != 0;
                int bits = high ? (twelve ? 12 : 10) : 8;
                String chroma =
                        mono ? "monochrome" : subX && subY ? "4:2:0" : subX ? "4:2:2" : "4:4:4";
                return "AV1, " + bits + "-bit " + chroma;
            }
        }
        return "AV1";
    }

    private static int readInt(byte[] d, int p) {
        return (d[p] & 0xFF) << 24
                | (d[p + 1] & 0xFF) << 16
                | (d[p + 2] & 0xFF) << 8
                | d[p + 3] & 0xFF;
    }
}
