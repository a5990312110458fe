package dev.stoker.operators.image;

/**
 * Encoded image formats the decoder accepts, recognised by their magic bytes (never by file
 * extension, which datasets get wrong). The set is what Pillow 12 opens without a plug-in and a
 * well-kept Java decoder reads as Pillow does; formats Pillow opens that Stoker rejects are named
 * by {@link RejectedFormats}.
 */
enum ImageFormat {
    JPEG("JPEG"),
    PNG("PNG"),
    GIF("GIF"),
    WEBP("WEBP"),
    BMP("BMP"),
    /** TIFF and BigTIFF, first page (TwelveMonkeys). */
    TIFF("TIFF"),
    /** Photoshop PSD and PSB (which Pillow does not open), the merged image (TwelveMonkeys). */
    PSD("PSD"),
    /** Windows icon, the entry Pillow picks (TwelveMonkeys; see {@link IconDirectory}). */
    ICO("ICO"),
    /** Truevision TGA (TwelveMonkeys); it has no magic bytes, see {@link #looksLikeTga}. */
    TGA("TGA"),
    /** Netpbm PBM/PGM/PPM, plain and raw (P1-P6; TwelveMonkeys). */
    PNM("PNM"),
    /** ZSoft PCX (TwelveMonkeys). */
    PCX("PCX"),
    /** Quite OK Image format (qoi-java). */
    QOI("QOI"),
    /** JPEG 2000, JP2 container or raw codestream (JJ2000 through jai-imageio). */
    JPEG2000("JPEG 2000");

    /** The name used in reject reasons and logs. */
    final String displayName;

    ImageFormat(String displayName) {
        this.displayName = displayName;
    }

    @Override
    public String toString() {
        return displayName;
    }

    /** The format whose signature {@code d} starts with, or {@code null}. */
    static ImageFormat sniff(byte[] d) {
        if (starts(d, 0xFF, 0xD8, 0xFF)) {
            return JPEG;
        }
        if (starts(d, 0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A)) {
            return PNG;
        }
        if (starts(d, 'G', 'I', 'F', '8')) {
            return GIF;
        }
        if (d.length >= 12
                && starts(d, 'R', 'I', 'F', 'F')
                && d[8] == 'W'
                && d[9] == 'E'
                && d[10] == 'B'
                && d[11] == 'P') {
            return WEBP;
        }
        if (starts(d, 'B', 'M')) {
            return BMP;
        }
        if (starts(d, 'I', 'I', 42, 0)
                || starts(d, 'M', 'M', 0, 42)
                || starts(d, 'I', 'I', 43, 0)
                || starts(d, 'M', 'M', 0, 43)) {
            return TIFF;
        }
        if (starts(d, '8', 'B', 'P', 'S')) {
            return PSD;
        }
        if (starts(d, 0, 0, 1, 0) && hasIconDirectory(d)) {
            return ICO;
        }
        if (starts(d, 0, 0, 2, 0) && hasIconDirectory(d)) {
            return null; // a cursor: RejectedFormats names it
        }
        if (d.length >= 3 && d[0] == 'P' && d[1] >= '1' && d[1] <= '6' && isSpace(d[2])) {
            return PNM;
        }
        if (starts(d, 'q', 'o', 'i', 'f')) {
            return QOI;
        }
        if (starts(d, 0, 0, 0, 0x0C, 'j', 'P', ' ', ' ', 0x0D, 0x0A, 0x87, 0x0A)
                || starts(d, 0xFF, 0x4F, 0xFF, 0x51)) {
            return JPEG2000;
        }
        // PCX as Pillow's PcxImagePlugin accepts it: manufacturer 10, version 0/2/3/5
        if (d.length >= 128 && d[0] == 10 && (d[1] == 0 || d[1] == 2 || d[1] == 3 || d[1] == 5)) {
            return PCX;
        }
        if (looksLikeTga(d)) {
            return TGA;
        }
        return null;
    }

    /**
     * Whether an ICO/CUR header is followed by a plausible directory: at least one entry, and the
     * first entry's reserved byte 0 and its data offset past the directory. A true-colour TGA
     * without ID or colour map starts with the same four bytes as a cursor, and then fails this.
     */
    static boolean hasIconDirectory(byte[] d) {
        if (d.length < 22) {
            return false;
        }
        int count = (d[4] & 0xFF) | (d[5] & 0xFF) << 8;
        long offset =
                (d[18] & 0xFFL)
                        | (d[19] & 0xFFL) << 8
                        | (d[20] & 0xFFL) << 16
                        | (d[21] & 0xFFL) << 24;
        return count > 0 && d[9] == 0 && offset >= 6 + 16L * count && offset < d.length;
    }

    /**
     * A TGA header, as Pillow's {@code TgaImagePlugin} validates it and a little stricter (TGA has
     * no signature, so this is checked after every format that has one): colour-map type 0 or 1,
     * image type 1-3 or 9-11 (colour-mapped, true-colour, grey; raw or RLE), a colour map when the
     * type is colour-mapped (Pillow also opens a colour-mapped type without one, as grey), pixel
     * depth 1, 8, 16, 24 or 32, non-zero width and height, and no interleaving bits (which Pillow
     * ignores). ASCII text never passes (its second byte would have to be 0 or 1); UTF-16 text can,
     * as it can for Pillow, and then fails to decode as a TGA.
     */
    static boolean looksLikeTga(byte[] d) {
        if (d.length < 18) {
            return false;
        }
        int colorMapType = d[1] & 0xFF;
        int imageType = d[2] & 0xFF;
        int depth = d[16] & 0xFF;
        int width = (d[12] & 0xFF) | (d[13] & 0xFF) << 8;
        int height = (d[14] & 0xFF) | (d[15] & 0xFF) << 8;
        int descriptor = d[17] & 0xFF;
        boolean mapped = imageType == 1 || imageType == 9;
        boolean typeOk =
                mapped || imageType == 2 || imageType == 3 || imageType == 10 || imageType == 11;
        boolean depthOk = depth == 1 || depth == 8 || depth == 16 || depth == 24 || depth == 32;
        return typeOk
                && (mapped ? colorMapType == 1 : colorMapType <= 1)
                && depthOk
                && width > 0
                && height > 0
                && (descriptor & 0xC0) == 0;
    }

    private static boolean isSpace(byte b) {
        return b == ' ' || b == '\n' || b == '\r' || b == '\t';
    }

    static boolean starts(byte[] d, int... sig) {
        if (d.length < sig.length) {
            return false;
        }
        for (int i = 0; i < sig.length; i++) {
            if ((d[i] & 0xFF) != sig[i]) {
                return false;
            }
        }
        return true;
    }
}
