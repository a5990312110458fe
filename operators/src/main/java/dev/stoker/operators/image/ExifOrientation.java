package dev.stoker.operators.image;

/**
 * Reads the EXIF Orientation tag (0x0112, values 1..8) from encoded JPEG (APP1 {@code Exif}), PNG
 * ({@code eXIf} chunk) and WebP ({@code EXIF} chunk) bytes, and applies it to a decoded image the
 * way Pillow's {@code ImageOps.exif_transpose} does.
 *
 * <p>Malformed or missing EXIF data means orientation 1 (no change); it never rejects an image.
 */
final class ExifOrientation {
    private static final int TAG_ORIENTATION = 0x0112;

    private ExifOrientation() {}

    /** The orientation (1..8) found in {@code data} of the given format, or 1. */
    static int read(byte[] data, ImageFormat format) {
        try {
            switch (format) {
                case JPEG:
                    return fromJpeg(data);
                case PNG:
                    return fromPng(data);
                case WEBP:
                    return fromWebp(data);
                default:
                    return 1;
            }
        } catch (IndexOutOfBoundsException e) {
            return 1;
        }
    }

    private static int fromJpeg(byte[] d) {
        int i = 2;
        while (i + 4 <= d.length && (d[i] & 0xFF) == 0xFF) {
            int marker = d[i + 1] & 0xFF;
            if (marker == 0xFF) {
                i++;
                continue;
            }
            if (marker == 0xDA || marker == 0xD9) {
                break;
            }
            int len = u16be(d, i + 2);
            if (marker == 0xE1 && len >= 8 && startsWith(d, i + 4, "Exif\0\0")) {
                int o = tiff(d, i + 10, len - 8);
                if (o != 1) {
                    return o;
                }
            }
            i += 2 + len;
        }
        return 1;
    }

    private static int fromPng(byte[] d) {
        int i = 8;
        while (i + 8 <= d.length) {
            int len = (int) Math.min(u32be(d, i), d.length);
            if (startsWith(d, i + 4, "eXIf")) {
                int start = i + 8;
                if (startsWith(d, start, "Exif\0\0")) {
                    return tiff(d, start + 6, len - 6);
                }
                return tiff(d, start, len);
            }
            i += 12 + len;
        }
        return 1;
    }

    private static int fromWebp(byte[] d) {
        int i = 12;
        while (i + 8 <= d.length) {
            int len = (int) Math.min(u32le(d, i + 4), d.length);
            if (startsWith(d, i, "EXIF")) {
                int start = i + 8;
                if (startsWith(d, start, "Exif\0\0")) {
                    return tiff(d, start + 6, len - 6);
                }
                return tiff(d, start, len);
            }
            i += 8 + len + (len & 1);
        }
        return 1;
    }

    /** Orientation from a TIFF structure of {@code len} bytes at {@code base}; 1 if absent or invalid. */
    private static int tiff(byte[] d, int base, int len) {
        if (len < 8) {
            return 1;
        }
        boolean le = d[base] == 'I' && d[base + 1] == 'I';
        if (!le && !(d[base] == 'M' && d[base + 1] == 'M')) {
            return 1;
        }
        long ifd = u32(d, base + 4, le);
        if (ifd < 8 || ifd + 2 > len) {
            return 1;
        }
        int p = base + (int) ifd;
        int count = u16(d, p, le);
        for (int e = 0; e < count; e++) {
            int entry = p + 2 + e * 12;
            if (entry + 12 > base + len) {
                return 1;
            }
            if (u16(d, entry, le) == TAG_ORIENTATION) {
                int type = u16(d, entry + 2, le);
                int value = type == 3 ? u16(d, entry + 8, le) : (int) u32(d, entry + 8, le);
                return value >= 1 && value <= 8 ? value : 1;
            }
        }
        return 1;
    }

    /**
     * Returns the displayed image for a stored image with EXIF {@code orientation}: 2 mirror
     * left-right, 3 rotate 180, 4 mirror top-bottom, 5 transpose, 6 rotate 90 clockwise, 7
     * transverse, 8 rotate 90 counter-clockwise; 1 (or anything else) returns {@code img}.
     */
    static RgbImage apply(RgbImage img, int orientation) {
        if (orientation < 2 || orientation > 8) {
            return img;
        }
        int w = img.width();
        int h = img.height();
        boolean swap = orientation >= 5;
        int ow = swap ? h : w;
        int oh = swap ? w : h;
        byte[] in = img.pixels();
        byte[] out = new byte[in.length];
        for (int y = 0; y < oh; y++) {
            for (int x = 0; x < ow; x++) {
                int sx;
                int sy;
                switch (orientation) {
                    case 2: sx = w - 1 - x; sy = y; break;
                    case 3: sx = w - 1 - x; sy = h - 1 - y; break;
                    case 4: sx = x; sy = h - 1 - y; break;
                    case 5: sx = y; sy = x; break;
                    case 6: sx = y; sy = h - 1 - x; break;
                    case 7: sx = w - 1 - y; sy = h - 1 - x; break;
                    default: sx = w - 1 - y; sy = x; break;
                }
                int s = (sy * w + sx) * 3;
                int o = (y * ow + x) * 3;
                out[o] = in[s];
                out[o + 1] = in[s + 1];
                out[o + 2] = in[s + 2];
            }
        }
        return new RgbImage(ow, oh, out);
    }

    private static boolean startsWith(byte[] d, int off, String s) {
        if (off < 0 || off + s.length() > d.length) {
            return false;
        }
        for (int i = 0; i < s.length(); i++) {
            if (d[off + i] != (byte) s.charAt(i)) {
                return false;
            }
        }
        return true;
    }

    private static int u16(byte[] d, int i, boolean le) {
        return le ? (d[i] & 0xFF) | (d[i + 1] & 0xFF) << 8 : u16be(d, i);
    }

    private static long u32(byte[] d, int i, boolean le) {
        return le ? u32le(d, i) : u32be(d, i);
    }

    private static int u16be(byte[] d, int i) {
        return (d[i] & 0xFF) << 8 | (d[i + 1] & 0xFF);
    }

    static long u32be(byte[] d, int i) {
        return (long) u16be(d, i) << 16 | u16be(d, i + 2);
    }

    private static long u32le(byte[] d, int i) {
        return (d[i] & 0xFFL) | (d[i + 1] & 0xFFL) << 8 | (d[i + 2] & 0xFFL) << 16 | (d[i + 3] & 0xFFL) << 24;
    }
}
