package dev.stoker.operators.image;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.operators.SharedData;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.Arrays;
import java.util.Set;
import java.util.TreeSet;
import org.assertj.core.api.AbstractThrowableAssert;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class ImageDecoderTest {
    private static final long LIMIT = QwenVisionConfig.DEFAULT_MAX_SOURCE_PIXELS;

    private final ImageDecoder decoder = new ImageDecoder();

    private RgbImage decode(String relative) throws RejectedRecordException {
        return decoder.decode(SharedData.bytes(relative), LIMIT);
    }

    @Test
    void everyDatasetImageDecodesToItsOrientedReferenceSize() throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        int decoded = 0;
        for (String line : Files.readAllLines(SharedData.path("smart_resize_reference.jsonl"))) {
            JsonNode row = mapper.readTree(line);
            String file = row.get("dataset").asText() + "/" + row.get("path").asText();
            RgbImage img = decode(file);
            assertThat(img.width())
                    .as(file + " width")
                    .isEqualTo(row.get("width_after_exif").asInt());
            assertThat(img.height())
                    .as(file + " height")
                    .isEqualTo(row.get("height_after_exif").asInt());
            decoded++;
        }
        assertThat(decoded).isEqualTo(51);
    }

    @ParameterizedTest
    @ValueSource(
            strings = {
                "orient_1.jpg",
                "orient_2.jpg",
                "orient_3.jpg",
                "orient_4.jpg",
                "orient_5.jpg",
                "orient_6.jpg",
                "orient_7.jpg",
                "orient_8.jpg",
                "orient_6_in_png_exif.png"
            })
    void exifOrientationIsApplied(String name) throws Exception {
        RgbImage img = decode("bad-inputs/exif-orientation/images/" + name);
        assertThat(img.width()).isEqualTo(60);
        assertThat(img.height()).isEqualTo(40);
        assertColour(img, 5, 5, 255, 0, 0, 40);
        assertColour(img, 54, 5, 0, 255, 0, 40);
        assertColour(img, 5, 34, 0, 0, 255, 40);
        assertColour(img, 54, 34, 255, 255, 255, 40);
    }

    @ParameterizedTest
    @ValueSource(
            strings = {
                "rgba_hidden_green.png",
                "rgba_black_transparent.png",
                "rgba_hidden_green.webp"
            })
    void transparentPixelsBecomeWhiteAndOpaqueCentreStaysRed(String name) throws Exception {
        RgbImage img = decode("bad-inputs/alpha-compositing/images/" + name);
        assertColour(img, 0, 0, 255, 255, 255, 0);
        assertColour(img, img.width() - 1, img.height() - 1, 255, 255, 255, 0);
        assertColour(img, img.width() / 2, img.height() / 2, 255, 0, 0, 0);
        for (int y = 0; y < img.height(); y++) {
            for (int x = 0; x < img.width(); x++) {
                boolean white =
                        img.get(x, y, 0) == 255
                                && img.get(x, y, 1) == 255
                                && img.get(x, y, 2) == 255;
                boolean red =
                        img.get(x, y, 0) == 255 && img.get(x, y, 1) == 0 && img.get(x, y, 2) == 0;
                assertThat(white || red).as("%s pixel %d,%d is white or red", name, x, y).isTrue();
            }
        }
    }

    @ParameterizedTest
    @ValueSource(
            strings = {
                "la_transparent_border.png",
                "palette_trns.png",
                "gif_transparent_index.gif"
            })
    void otherTransparencyKindsCompositeOnWhite(String name) throws Exception {
        RgbImage img = decode("bad-inputs/alpha-compositing/images/" + name);
        assertColour(img, 0, 0, 255, 255, 255, 0);
        if (name.startsWith("la_")) {
            assertColour(img, img.width() / 2, img.height() / 2, 0, 0, 0, 0);
        }
    }

    @Test
    void halfAlphaBlueBlendsWithWhite() throws Exception {
        RgbImage img = decode("bad-inputs/alpha-compositing/images/rgba_half_alpha_blue.png");
        for (int y = 0; y < img.height(); y++) {
            for (int x = 0; x < img.width(); x++) {
                assertColour(img, x, y, 127, 127, 255, 1);
            }
        }
    }

    @Test
    void grayscaleBecomesThreeEqualChannelsAtFullRange() throws Exception {
        String dir = "bad-inputs/grayscale-variants/images/";
        assertThat(grayLevels(decode(dir + "gray1bit_checker.png"))).containsExactly(0, 255);
        assertThat(grayLevels(decode(dir + "gray2bit_levels.png")))
                .containsExactly(0, 85, 170, 255);
        Set<Integer> four = grayLevels(decode(dir + "gray4bit_levels.png"));
        assertThat(four).hasSize(16).allMatch(v -> v % 17 == 0);
        assertThat(grayLevels(decode(dir + "gray8.png")).size()).isGreaterThan(16);
        assertThat(grayLevels(decode(dir + "gray_1component.jpg")).size()).isGreaterThan(16);
    }

    @Test
    void cmykJpegsAreNotInverted() throws Exception {
        String dir = "bad-inputs/cmyk-jpeg/images/";
        assertThat(meanAbsDiff(decode(dir + "cmyk_adobe.jpg"), decode(dir + "reference_rgb.png")))
                .isLessThanOrEqualTo(12);
        RgbImage cmyk = decode(dir + "pil_sample_cmyk.jpg");
        RgbImage rgb =
                new ImageDecoder()
                        .decode(SharedData.bytes(dir + "pil_sample_rgb_reference.jpg"), LIMIT);
        assertThat(meanAbsDiff(cmyk, rgb)).isLessThanOrEqualTo(12);
    }

    @ParameterizedTest
    @ValueSource(
            strings = {
                "png_20000x20000_1bit.png:20000x20000",
                "gif_65535x65535_header.gif:65535x65535",
                "jpeg_sof_60000x60000.jpg:60000x60000"
            })
    void decompressionBombsAreRejectedFromTheHeader(String spec) {
        String[] parts = spec.split(":");
        long start = System.nanoTime();
        assertRejected(
                        "bad-inputs/decompression-bomb/images/" + parts[0],
                        RejectReason.IMAGE_TOO_MANY_PIXELS)
                .hasMessageContaining("image too large")
                .hasMessageContaining(parts[1])
                .hasMessageContaining("limit 178956970");
        assertThat((System.nanoTime() - start) / 1_000_000).as("ms to reject").isLessThan(2000);
    }

    @Test
    void smallControlImageNextToTheBombsDecodes() throws Exception {
        RgbImage img = decode("bad-inputs/decompression-bomb/images/ok_small.png");
        assertThat(img.width() * img.height()).isPositive();
    }

    @Test
    void jpegMissingOnlyItsEndMarkerDecodesToTheSamePixels() throws Exception {
        RgbImage ok = decode("bad-inputs/truncated-files/images/ok.jpg");
        byte[] okPixels = Arrays.copyOf(ok.pixels(), ok.width() * ok.height() * 3);
        RgbImage missingEoi = decode("bad-inputs/truncated-files/images/missing_eoi.jpg");
        assertThat(missingEoi.width()).isEqualTo(ok.width());
        assertThat(missingEoi.height()).isEqualTo(ok.height());
        assertThat(Arrays.copyOf(missingEoi.pixels(), okPixels.length)).isEqualTo(okPixels);
    }

    @Test
    void truncatedAndDamagedFilesAreRejectedWithTheCause() {
        String dir = "bad-inputs/truncated-files/images/";
        assertRejected(dir + "truncated_60pct.jpg", RejectReason.CORRUPT_IMAGE)
                .hasMessageContaining("truncated JPEG");
        assertRejected(dir + "truncated_progressive_50pct.jpg", RejectReason.CORRUPT_IMAGE)
                .hasMessageContaining("truncated JPEG");
        assertRejected(dir + "truncated_in_idat.png", RejectReason.CORRUPT_IMAGE)
                .hasMessageContaining("truncated");
        assertRejected(dir + "idat_crc_mismatch.png", RejectReason.CORRUPT_IMAGE)
                .hasMessageContaining("CRC mismatch");
        assertRejected(dir + "empty.jpg", RejectReason.CORRUPT_IMAGE).hasMessageContaining("empty");
        assertRejected(dir + "s3_error_body.jpg", RejectReason.UNSUPPORTED_IMAGE)
                .hasMessageContaining("text");
    }

    /**
     * The bomb guard reads the header of every format added for Pillow's set (headers of
     * 60000x60000) before any pixel buffer exists; for an ICO that is the stored PNG's or BMP's
     * header, not the directory's sizes (which stop at 256).
     */
    @ParameterizedTest
    @ValueSource(strings = {"QOI", "TIFF", "TGA", "PNM", "PSD", "PCX", "JPEG 2000", "ICO"})
    void bombsInTheOtherFormatsAreRejectedFromTheHeader(String format) throws Exception {
        // PSD allows at most 30000 per side (PSB more)
        int side = format.equals("PSD") ? 20000 : 60000;
        byte[] bomb =
                format.equals("JPEG 2000") ? jpeg2000Bomb(side) : bombHeader(format, side, side);
        long start = System.nanoTime();
        assertThatThrownBy(() -> decoder.decode(bomb, LIMIT))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> {
                            assertThat(e.reason())
                                    .as(e.getMessage())
                                    .isEqualTo(RejectReason.IMAGE_TOO_MANY_PIXELS);
                            assertThat(e.getMessage()).contains(format + " " + side + "x" + side);
                        });
        assertThat((System.nanoTime() - start) / 1_000_000).as("ms to reject").isLessThan(2000);
    }

    /**
     * The small JP2 of the fuzz seeds with its image header box ({@code ihdr}) and codestream (SIZ:
     * image and tile size) saying {@code side x side}.
     */
    private byte[] jpeg2000Bomb(int side) throws java.io.IOException {
        byte[] d;
        try (var in =
                getClass()
                        .getResourceAsStream(
                                "ImageDecodeFuzzTestInputs/process/formats-lossless.jp2")) {
            d = in.readAllBytes();
        }
        java.nio.ByteBuffer b = java.nio.ByteBuffer.wrap(d);
        for (int i = 0; i + 4 < d.length; i++) {
            if (d[i] == 'i' && d[i + 1] == 'h' && d[i + 2] == 'd' && d[i + 3] == 'r') {
                b.putInt(i + 4, side).putInt(i + 8, side);
            }
            if (d[i] == (byte) 0xFF && d[i + 1] == 0x51) {
                // SIZ: marker, Lsiz, Rsiz, Xsiz, Ysiz, XOsiz, YOsiz, XTsiz, YTsiz
                b.putInt(i + 6, side)
                        .putInt(i + 10, side)
                        .putInt(i + 22, side)
                        .putInt(i + 26, side);
                break;
            }
        }
        return d;
    }

    /** A header of {@code format} announcing a {@code w x h} 8-bit RGB image, with no pixels. */
    private static byte[] bombHeader(String format, int w, int h) {
        java.nio.ByteBuffer b = java.nio.ByteBuffer.allocate(256);
        switch (format) {
            case "QOI":
                b.put(new byte[] {'q', 'o', 'i', 'f'})
                        .putInt(w)
                        .putInt(h)
                        .put((byte) 3)
                        .put((byte) 0);
                break;
            case "TIFF":
                // little-endian; IFD at 8: width, height, bits 8, photometric RGB, samples 3
                b.order(java.nio.ByteOrder.LITTLE_ENDIAN)
                        .put(new byte[] {'I', 'I', 42, 0})
                        .putInt(8);
                b.putShort((short) 5);
                b.putShort((short) 256).putShort((short) 4).putInt(1).putInt(w);
                b.putShort((short) 257).putShort((short) 4).putInt(1).putInt(h);
                b.putShort((short) 258).putShort((short) 3).putInt(1).putInt(8);
                b.putShort((short) 262).putShort((short) 3).putInt(1).putInt(2);
                b.putShort((short) 277).putShort((short) 3).putInt(1).putInt(3);
                b.putInt(0);
                break;
            case "TGA":
                b.order(java.nio.ByteOrder.LITTLE_ENDIAN)
                        .put(new byte[] {0, 0, 2})
                        .put(new byte[9]);
                b.putShort((short) w).putShort((short) h).put((byte) 24).put((byte) 0x20);
                break;
            case "PSD":
                b.put(new byte[] {'8', 'B', 'P', 'S', 0, 1, 0, 0, 0, 0, 0, 0, 0, 3});
                b.putInt(h).putInt(w).putShort((short) 8).putShort((short) 3);
                b.putInt(0).putInt(0).putInt(0).putShort((short) 0);
                break;
            case "PCX":
                // version 5, RLE, 8 bits, window 0..w-1 x 0..h-1, 3 planes, 128-byte header
                b.order(java.nio.ByteOrder.LITTLE_ENDIAN).put(new byte[] {10, 5, 1, 8});
                b.putShort((short) 0).putShort((short) 0);
                b.putShort((short) (w - 1)).putShort((short) (h - 1));
                b.position(65).put((byte) 3).putShort((short) w).putShort((short) 1);
                b.position(128);
                break;
            case "ICO":
                // one 16x16 entry whose PNG says w x h (the directory's sizes stop at 256)
                b.order(java.nio.ByteOrder.LITTLE_ENDIAN).put(new byte[] {0, 0, 1, 0, 1, 0});
                b.put(new byte[] {16, 16, 0, 0}).putShort((short) 1).putShort((short) 32);
                b.putInt(64).putInt(22);
                b.order(java.nio.ByteOrder.BIG_ENDIAN);
                b.put(new byte[] {(byte) 0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A});
                b.putInt(13).put(new byte[] {'I', 'H', 'D', 'R'}).putInt(w).putInt(h);
                b.put(new byte[] {8, 6, 0, 0, 0}).putInt(0);
                break;
            default:
                b.put(("P6\n" + w + " " + h + "\n255\n").getBytes(StandardCharsets.US_ASCII));
                break;
        }
        b.put(new byte[64]);
        return Arrays.copyOf(b.array(), b.position());
    }

    /** A file of a format recognised by its magic bytes but cut short is corrupt, naming it. */
    @ParameterizedTest
    @ValueSource(
            strings = {
                "formats-jpeg_cut.tif:TIFF",
                "formats-qoi_cut.qoi:QOI",
                "formats-jp2_cut.jp2:JPEG 2000"
            })
    void cutFilesOfTheOtherFormatsAreCorrupt(String spec) throws Exception {
        String[] parts = spec.split(":");
        byte[] bytes;
        try (var in =
                getClass().getResourceAsStream("ImageDecodeFuzzTestInputs/process/" + parts[0])) {
            bytes = in.readAllBytes();
        }
        assertCorruptWithinFiveSeconds(decoder, bytes, "corrupt " + parts[1]);
    }

    @Test
    void garbageAfterAValidSignatureIsCorruptNotAnException() {
        byte[] bytes = {(byte) 0xFF, (byte) 0xD8, (byte) 0xFF, 0, 1, 2, 3, 4, 5};
        assertThatThrownBy(() -> decoder.decode(bytes, LIMIT))
                .isInstanceOf(RejectedRecordException.class)
                .extracting(e -> ((RejectedRecordException) e).reason())
                .isEqualTo(RejectReason.CORRUPT_IMAGE);
    }

    /**
     * Found by ImageDecodeFuzzTest: an 83-byte lossless WebP (64x64) whose Huffman codes run past
     * the end of the data. TwelveMonkeys' bit reader (the fallback when libwebp does not load)
     * swallows the EOFException and reads zero bits, so the decode spun for minutes; the decoder's
     * stream now fails after repeated reads at the end. libwebp rejects the file from its header.
     */
    @Test
    void webpThatReadsPastItsEndIsCorruptAndFast() throws Exception {
        byte[] bytes;
        try (var in =
                getClass()
                        .getResourceAsStream(
                                "ImageDecodeFuzzTestInputs/process/crash-aa07b4c9ae5c0589b24604aa1648704d84927cac")) {
            bytes = in.readAllBytes();
        }
        assertThat(decoder.nativeWebp()).isTrue();
        assertCorruptWithinFiveSeconds(decoder, bytes, "corrupt WEBP", "libwebp");
        ImageDecoder fallback = new ImageDecoder(TurboJpeg.available(), false);
        assertCorruptWithinFiveSeconds(fallback, bytes, "WEBP 64x64", "read past the end");
    }

    private static void assertCorruptWithinFiveSeconds(
            ImageDecoder decoder, byte[] bytes, String... message) {
        long start = System.nanoTime();
        assertThatThrownBy(() -> decoder.decode(bytes, LIMIT))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> {
                            assertThat(e.reason()).isEqualTo(RejectReason.CORRUPT_IMAGE);
                            assertThat(e.getMessage()).contains(message);
                        });
        assertThat(System.nanoTime() - start).as("decode time (ns)").isLessThan(5_000_000_000L);
    }

    @ParameterizedTest
    @ValueSource(strings = {"three_frames_subrect.gif", "three_frames_full.webp"})
    void animationsGiveTheirFirstFrameOnTheCanvas(String name) throws Exception {
        RgbImage img = decode("bad-inputs/animated-images/images/" + name);
        assertThat(img.width()).isEqualTo(40);
        assertThat(img.height()).isEqualTo(30);
        for (int y = 0; y < 30; y++) {
            for (int x = 0; x < 40; x++) {
                assertColour(img, x, y, 255, 0, 0, 8);
            }
        }
    }

    /** An animated WebP whose VP8X canvas is made smaller than its first frame (40x30). */
    @Test
    void animatedWebpWhoseFrameDoesNotFitItsCanvasIsCorrupt() {
        byte[] bytes = SharedData.bytes("bad-inputs/animated-images/images/three_frames_full.webp");
        assertThat(bytes[24]).as("canvas width - 1 at VP8X + 4").isEqualTo((byte) 39);
        bytes[24] = 19;
        assertThatThrownBy(() -> decoder.decode(bytes, LIMIT))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> {
                            assertThat(e.reason()).isEqualTo(RejectReason.CORRUPT_IMAGE);
                            assertThat(e.getMessage())
                                    .contains("WEBP 20x30", "first frame 40x30", "canvas");
                        });
    }

    /** The canvas size of an animated WebP is checked against the limit before any decoding. */
    @Test
    void animatedWebpCanvasBombIsRejectedFromTheHeader() {
        byte[] bytes = SharedData.bytes("bad-inputs/animated-images/images/three_frames_full.webp");
        byte[] canvas = {(byte) 0xFF, 0x3F, 0, (byte) 0xFF, 0x3F, 0}; // 16384 x 16384
        System.arraycopy(canvas, 0, bytes, 24, canvas.length);
        assertThatThrownBy(() -> decoder.decode(bytes, LIMIT))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> {
                            assertThat(e.reason()).isEqualTo(RejectReason.IMAGE_TOO_MANY_PIXELS);
                            assertThat(e.getMessage()).contains("WEBP 16384x16384");
                        });
    }

    @Test
    void animatedWebpWithoutFramesAndCutWebpAreCorrupt() {
        byte[] anim = SharedData.bytes("bad-inputs/animated-images/images/three_frames_full.webp");
        byte[] noFrames = Arrays.copyOf(anim, 44); // RIFF, VP8X, ANIM
        assertThatThrownBy(() -> decoder.decode(noFrames, LIMIT))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> {
                            assertThat(e.reason()).isEqualTo(RejectReason.CORRUPT_IMAGE);
                            assertThat(e.getMessage()).contains("without an image");
                        });
        byte[] still = SharedData.bytes("llava-style/images/webp/flower.webp");
        byte[] cut = Arrays.copyOf(still, still.length * 6 / 10);
        assertThatThrownBy(() -> decoder.decode(cut, LIMIT))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> {
                            assertThat(e.reason()).isEqualTo(RejectReason.CORRUPT_IMAGE);
                            assertThat(e.getMessage()).contains("corrupt WEBP 480x360", "libwebp");
                        });
    }

    @ParameterizedTest
    @ValueSource(strings = {"apng_real.png", "gif_real_42frames.gif"})
    void realAnimationsUseTheLogicalCanvas(String name) throws Exception {
        RgbImage img = decode("bad-inputs/animated-images/images/" + name);
        assertThat(img.width()).isEqualTo(245);
        assertThat(img.height()).isEqualTo(245);
    }

    private AbstractThrowableAssert<?, ? extends Throwable> assertRejected(
            String relative, RejectReason reason) {
        byte[] bytes = SharedData.bytes(relative);
        AbstractThrowableAssert<?, ? extends Throwable> a =
                assertThatThrownBy(() -> decoder.decode(bytes, LIMIT))
                        .isInstanceOf(RejectedRecordException.class);
        a.extracting(e -> ((RejectedRecordException) e).reason()).isEqualTo(reason);
        return a;
    }

    private static void assertColour(
            RgbImage img, int x, int y, int r, int g, int b, int tolerance) {
        int[] actual = {img.get(x, y, 0), img.get(x, y, 1), img.get(x, y, 2)};
        int[] expected = {r, g, b};
        for (int c = 0; c < 3; c++) {
            assertThat(Math.abs(actual[c] - expected[c]))
                    .as("pixel %d,%d channel %d: %d vs %d", x, y, c, actual[c], expected[c])
                    .isLessThanOrEqualTo(tolerance);
        }
    }

    private static Set<Integer> grayLevels(RgbImage img) {
        Set<Integer> levels = new TreeSet<>();
        for (int y = 0; y < img.height(); y++) {
            for (int x = 0; x < img.width(); x++) {
                assertThat(img.get(x, y, 1)).isEqualTo(img.get(x, y, 0));
                assertThat(img.get(x, y, 2)).isEqualTo(img.get(x, y, 0));
                levels.add(img.get(x, y, 0));
            }
        }
        return levels;
    }

    private static double meanAbsDiff(RgbImage a, RgbImage b) {
        assertThat(a.width()).isEqualTo(b.width());
        assertThat(a.height()).isEqualTo(b.height());
        long sum = 0;
        int n = a.width() * a.height() * 3;
        for (int i = 0; i < n; i++) {
            sum += Math.abs((a.pixels()[i] & 0xFF) - (b.pixels()[i] & 0xFF));
        }
        return (double) sum / n;
    }
}
