package dev.stoker.operators.image;

import com.drew.imaging.ImageMetadataReader;
import com.drew.imaging.ImageProcessingException;
import com.drew.imaging.jpeg.JpegMetadataReader;
import com.drew.metadata.Metadata;
import com.drew.metadata.MetadataException;
import com.drew.metadata.exif.ExifIFD0Directory;
import com.drew.metadata.exif.ExifReader;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.util.List;

/**
 * Reads the EXIF Orientation tag (0x0112, values 1..8) with metadata-extractor (JPEG APP1, PNG
 * {@code eXIf}, WebP {@code EXIF}, a TIFF's first IFD) and applies it to a decoded image the way
 * Pillow's {@code ImageOps.exif_transpose} does.
 *
 * <p>Malformed or missing EXIF data means orientation 1 (no change); it never rejects an image. For
 * a JPEG only the EXIF segment is parsed, not the XMP, ICC, IPTC and other segments that
 * metadata-extractor reads by default (an XMP packet is parsed as XML: measurable CPU and JIT work
 * per image, and its orientation is not used).
 */
final class ExifOrientation {
    private ExifOrientation() {}

    /** The orientation (1..8) found in the encoded image {@code data} of {@code format}, or 1. */
    static int read(byte[] data, ImageFormat format) {
        if (format != ImageFormat.JPEG
                && format != ImageFormat.PNG
                && format != ImageFormat.WEBP
                && format != ImageFormat.TIFF) {
            return 1; // Pillow's exif_transpose finds no EXIF in the other formats it opens
        }
        try {
            ByteArrayInputStream in = new ByteArrayInputStream(data);
            Metadata metadata =
                    format == ImageFormat.JPEG
                            ? JpegMetadataReader.readMetadata(in, List.of(new ExifReader()))
                            : ImageMetadataReader.readMetadata(in, data.length);
            for (ExifIFD0Directory dir : metadata.getDirectoriesOfType(ExifIFD0Directory.class)) {
                if (dir.containsTag(ExifIFD0Directory.TAG_ORIENTATION)) {
                    return dir.getInt(ExifIFD0Directory.TAG_ORIENTATION);
                }
            }
        } catch (ImageProcessingException | IOException | MetadataException | RuntimeException e) {
            // unreadable metadata: keep the stored orientation
        }
        return 1;
    }

    /** Whether {@code orientation} (5..8) swaps width and height. */
    static boolean swapsSides(int orientation) {
        return orientation >= 5 && orientation <= 8;
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
        boolean swap = swapsSides(orientation);
        int ow = swap ? h : w;
        int oh = swap ? w : h;
        byte[] in = img.pixels();
        byte[] out = new byte[w * h * 3];
        for (int y = 0; y < oh; y++) {
            for (int x = 0; x < ow; x++) {
                int sx;
                int sy;
                switch (orientation) {
                    case 2:
                        sx = w - 1 - x;
                        sy = y;
                        break;
                    case 3:
                        sx = w - 1 - x;
                        sy = h - 1 - y;
                        break;
                    case 4:
                        sx = x;
                        sy = h - 1 - y;
                        break;
                    case 5:
                        sx = y;
                        sy = x;
                        break;
                    case 6:
                        sx = y;
                        sy = h - 1 - x;
                        break;
                    case 7:
                        sx = w - 1 - y;
                        sy = h - 1 - x;
                        break;
                    default:
                        sx = w - 1 - y;
                        sy = x;
                        break;
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
}
