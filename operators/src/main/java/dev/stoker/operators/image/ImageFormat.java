package dev.stoker.operators.image;

/**
 * Encoded image formats the decoder accepts, recognised by their magic bytes (never by file
 * extension, which datasets get wrong).
 */
enum ImageFormat {
    JPEG("jpeg"),
    PNG("png"),
    GIF("gif"),
    WEBP("webp"),
    BMP("bmp");

    /** ImageIO format name. */
    final String imageIoName;

    ImageFormat(String imageIoName) {
        this.imageIoName = imageIoName;
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
        return null;
    }

    private static boolean starts(byte[] d, int... sig) {
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
