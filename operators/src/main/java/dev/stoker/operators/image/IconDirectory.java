package dev.stoker.operators.image;

import dev.stoker.operators.model.RejectedRecordException;

/**
 * The directory of an ICO file, read from its bytes: which icon Pillow's {@code IcoImagePlugin}
 * (12.0) opens, and that icon's stored size for the decompression-bomb guard.
 *
 * <p>Pillow's choice: the entries sorted by colour depth (ascending), then, stably, by directory
 * area (descending); the first wins, so the largest icon and, among equally large ones, the lowest
 * colour depth, then the first in the file. A directory width or height of 0 means 256; the colour
 * depth is the entry's bit count, else {@code ceil(log2(colour count))}, else 256.
 *
 * <p>The directory's sizes are at most 256 x 256, but the PNG or BMP stored for an entry can be of
 * any size (and the reader decodes it at that size), so the guard reads the stored image's own
 * header: a PNG's IHDR, or a BMP's BITMAPINFOHEADER (whose height counts the AND mask too).
 */
final class IconDirectory {
    private static final int ENTRY = 16;

    /** The entry Pillow opens, in directory (file) order, which is the reader's image index. */
    final int index;

    /** Width and height of the image stored for that entry, in pixels. */
    final long width;

    final long height;

    private IconDirectory(int index, long width, long height) {
        this.index = index;
        this.width = width;
        this.height = height;
    }

    /**
     * Reads the directory of an ICO file that {@link ImageFormat#sniff} recognised.
     *
     * @throws RejectedRecordException CORRUPT_IMAGE when the directory or the chosen entry's header
     *     lies outside the file
     */
    static IconDirectory read(byte[] d) throws RejectedRecordException {
        int count = u16(d, 4);
        if (6 + (long) ENTRY * count > d.length) {
            throw corrupt("directory of " + count + " entries is longer than the file");
        }
        int best = 0;
        for (int i = 1; i < count; i++) {
            long area = area(d, i);
            long bestArea = area(d, best);
            if (area > bestArea || area == bestArea && depth(d, i) < depth(d, best)) {
                best = i;
            }
        }
        long offset = u32(d, 6 + ENTRY * best + 12);
        if (offset + 24 > d.length) {
            throw corrupt("icon " + best + " starts at byte " + offset + ", past the end");
        }
        int o = (int) offset;
        if (ImageFormat.starts(slice(d, o, 8), 0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A)) {
            return new IconDirectory(best, u32be(d, o + 16), u32be(d, o + 20));
        }
        long w = Math.abs((long) (int) u32(d, o + 4));
        long h = Math.abs((long) (int) u32(d, o + 8)) / 2;
        return new IconDirectory(best, w, h);
    }

    private static long area(byte[] d, int i) {
        int e = 6 + ENTRY * i;
        int w = d[e] & 0xFF;
        int h = d[e + 1] & 0xFF;
        return (long) (w == 0 ? 256 : w) * (h == 0 ? 256 : h);
    }

    private static int depth(byte[] d, int i) {
        int e = 6 + ENTRY * i;
        int bpp = u16(d, e + 6);
        int colours = d[e + 2] & 0xFF;
        if (bpp != 0) {
            return bpp;
        }
        return colours != 0 ? 32 - Integer.numberOfLeadingZeros(colours - 1) : 256;
    }

    private static byte[] slice(byte[] d, int from, int n) {
        byte[] out = new byte[Math.min(n, d.length - from)];
        System.arraycopy(d, from, out, 0, out.length);
        return out;
    }

    private static int u16(byte[] d, int p) {
        return (d[p] & 0xFF) | (d[p + 1] & 0xFF) << 8;
    }

    private static long u32(byte[] d, int p) {
        return (d[p] & 0xFFL)
                | (d[p + 1] & 0xFFL) << 8
                | (d[p + 2] & 0xFFL) << 16
                | (d[p + 3] & 0xFFL) << 24;
    }

    private static long u32be(byte[] d, int p) {
        return (d[p] & 0xFFL) << 24
                | (d[p + 1] & 0xFFL) << 16
                | (d[p + 2] & 0xFFL) << 8
                | d[p + 3] & 0xFFL;
    }

    private static RejectedRecordException corrupt(String why) {
        return new RejectedRecordException(
                dev.stoker.operators.model.RejectReason.CORRUPT_IMAGE, "corrupt ICO: " + why);
    }
}
