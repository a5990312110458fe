package dev.stoker.operators.image;

import java.nio.charset.StandardCharsets;
import java.util.zip.CRC32;

/**
 * Structural check of a PNG file before decoding: every chunk is complete and its CRC-32 matches,
 * and an {@code IEND} chunk is present. The JDK PNG reader ignores CRCs and may return a partially
 * decoded image for a cut file; Pillow and libpng reject both.
 */
final class PngIntegrity {
    private PngIntegrity() {}

    /**
     * A description of the first defect of {@code d} (a PNG), or {@code null} when it is intact.
     */
    static String firstDefect(byte[] d) {
        int i = 8;
        CRC32 crc = new CRC32();
        while (i + 8 <= d.length) {
            long len = u32be(d, i);
            String type = new String(d, i + 4, 4, StandardCharsets.ISO_8859_1);
            if (len > d.length - i - 12L) {
                return "truncated in chunk "
                        + type
                        + " at byte "
                        + i
                        + " (chunk needs "
                        + (len + 12)
                        + " bytes, "
                        + (d.length - i)
                        + " left)";
            }
            crc.reset();
            crc.update(d, i + 4, (int) len + 4);
            if (crc.getValue() != u32be(d, i + 8 + (int) len)) {
                return "CRC mismatch in chunk " + type + " at byte " + i;
            }
            if (type.equals("IEND")) {
                return null;
            }
            i += 12 + (int) len;
        }
        return "truncated: no IEND chunk (" + d.length + " bytes)";
    }

    private static long u32be(byte[] d, int i) {
        return ((d[i] & 0xFFL) << 24)
                | ((d[i + 1] & 0xFFL) << 16)
                | ((d[i + 2] & 0xFFL) << 8)
                | (d[i + 3] & 0xFFL);
    }
}
