package dev.stoker.operators.image;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.stoker.operators.SharedData;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * JPEG decoding through libjpeg-turbo ({@link TurboJpegDecoder}) against the ImageIO path it
 * replaces, and the cases it hands back to ImageIO. Needs libjpeg-turbo installed (the {@code
 * ./stoker} setup installs it); skipped otherwise.
 */
class NativeJpegDecodeTest {
    private static final long LIMIT = QwenVisionConfig.DEFAULT_MAX_SOURCE_PIXELS;

    private ImageDecoder nativeDecoder;
    private final ImageDecoder imageIo = new ImageDecoder(false);

    @BeforeEach
    void nativeDecoderIsInstalled() {
        assumeTrue(TurboJpeg.available(), "libjpeg-turbo (libturbojpeg-java) not installed");
        nativeDecoder = new ImageDecoder(true);
    }

    /**
     * Same library family, same settings (accurate IDCT, fancy upsampling): libjpeg-turbo and the
     * JDK's IJG libjpeg 6b agree to within rounding on files without an ICC profile, baseline and
     * progressive, colour and grey, every EXIF orientation.
     */
    @ParameterizedTest
    @ValueSource(
            strings = {
                "llava-style/images/photos/extreme_ironing.jpg",
                "llava-style/images/photos/retina.jpg",
                "llava-style/images/exif/landscape_orient6.jpg",
                "llava-style/images/exif/portrait_orient5.jpg",
                "llava-style/images/gray/hopper_gray.jpg",
                "qwen-messages/images/photos/landmark.jpg",
                "bad-inputs/exif-orientation/images/orient_7.jpg"
            })
    void nativeDecodeAgreesWithImageIo(String file) throws Exception {
        byte[] bytes = SharedData.bytes(file);
        RgbImage turbo = nativeDecoder.decode(bytes, LIMIT);
        RgbImage reference = imageIo.decode(bytes, LIMIT);
        assertThat(turbo.width()).isEqualTo(reference.width());
        assertThat(turbo.height()).isEqualTo(reference.height());
        int[] diff = absDiff(turbo, reference);
        assertThat(diff[0]).as("max abs diff").isLessThanOrEqualTo(2);
        assertThat(diff[1] / (3.0 * turbo.width() * turbo.height()))
                .as("mean abs diff")
                .isLessThan(0.05);
    }

    @Test
    void progressiveJpegDecodesNatively() throws Exception {
        byte[] bytes = SharedData.bytes("llava-style/images/photos/waterview.jpg");
        RgbImage img = nativeDecoder.decode(bytes, LIMIT);
        assertThat(img.width()).isEqualTo(1000);
        assertThat(img.height()).isEqualTo(667);
        assertThat(img.pixels()).isSameAs(nativeDecoder.decode(bytes, LIMIT).pixels());
    }

    @ParameterizedTest
    @ValueSource(
            strings = {
                "bad-inputs/cmyk-jpeg/images/cmyk_adobe.jpg",
                "bad-inputs/cmyk-jpeg/images/pil_sample_cmyk.jpg"
            })
    void cmykAndYcckJpegsFallBackToImageIo(String file) throws Exception {
        byte[] bytes = SharedData.bytes(file);
        RgbImage viaNative = nativeDecoder.decode(bytes, LIMIT);
        RgbImage viaImageIo = imageIo.decode(bytes, LIMIT);
        assertThat(nativeDecoder.nativeJpeg()).isTrue();
        assertThat(pixels(viaNative)).isEqualTo(pixels(viaImageIo));
    }

    @Test
    void truncatedJpegsAreCorruptAndAMissingEndMarkerIsNot() throws Exception {
        String dir = "bad-inputs/truncated-files/images/";
        for (String cut : List.of("truncated_60pct.jpg", "truncated_progressive_50pct.jpg")) {
            assertThatThrownBy(() -> nativeDecoder.decode(SharedData.bytes(dir + cut), LIMIT))
                    .isInstanceOf(RejectedRecordException.class)
                    .hasMessageContaining("truncated JPEG")
                    .extracting(e -> ((RejectedRecordException) e).reason())
                    .isEqualTo(RejectReason.CORRUPT_IMAGE);
        }
        byte[] ok = pixels(nativeDecoder.decode(SharedData.bytes(dir + "ok.jpg"), LIMIT));
        byte[] missingEoi =
                pixels(nativeDecoder.decode(SharedData.bytes(dir + "missing_eoi.jpg"), LIMIT));
        assertThat(missingEoi).isEqualTo(ok);
    }

    @Test
    void bombIsRejectedFromTheHeaderBeforeAnyBuffer() {
        byte[] bomb =
                SharedData.bytes("bad-inputs/decompression-bomb/images/jpeg_sof_60000x60000.jpg");
        long start = System.nanoTime();
        assertThatThrownBy(() -> nativeDecoder.decode(bomb, LIMIT))
                .isInstanceOf(RejectedRecordException.class)
                .hasMessageContaining("JPEG 60000x60000")
                .extracting(e -> ((RejectedRecordException) e).reason())
                .isEqualTo(RejectReason.IMAGE_TOO_MANY_PIXELS);
        assertThat((System.nanoTime() - start) / 1_000_000).as("ms to reject").isLessThan(500);
    }

    @Test
    void dctScaleIsTheLargestPowerOfTwoThatStillCoversTheTarget() {
        assertThat(ImageDecoder.dctDenominator(1920, 1080, 1316, 728)).isEqualTo(1);
        assertThat(ImageDecoder.dctDenominator(4000, 3000, 1148, 840)).isEqualTo(2);
        assertThat(ImageDecoder.dctDenominator(4000, 3000, 1000, 750)).isEqualTo(4);
        assertThat(ImageDecoder.dctDenominator(4000, 3000, 1000, 751)).isEqualTo(2);
        assertThat(ImageDecoder.dctDenominator(4000, 3000, 56, 56)).isEqualTo(8);
        // sides round up: ceil(1001 / 2) = 501
        assertThat(ImageDecoder.dctDenominator(1001, 1001, 501, 501)).isEqualTo(2);
        assertThat(ImageDecoder.dctDenominator(1000, 1000, 501, 501)).isEqualTo(1);
        // never smaller than the target on either side, even for an upscaled side
        assertThat(ImageDecoder.dctDenominator(100, 4000, 200, 500)).isEqualTo(1);
    }

    @Test
    void dctScaledDecodeTargetsTheDisplayedSize() throws Exception {
        // stored 1200x1800 with EXIF orientation 6: displayed 1800x1200
        byte[] bytes = SharedData.bytes("llava-style/images/exif/landscape_orient6.jpg");
        List<int[]> asked = new ArrayList<>();
        RgbImage img =
                nativeDecoder.decode(
                        bytes,
                        LIMIT,
                        (h, w) -> {
                            asked.add(new int[] {h, w});
                            return new int[] {500, 800};
                        });
        assertThat(asked).containsExactly(new int[] {1200, 1800});
        assertThat(img.width()).isEqualTo(900);
        assertThat(img.height()).isEqualTo(600);
        RgbImage full = imageIo.decode(bytes, LIMIT);
        assertThat(full.width()).isEqualTo(1800);
        // the same picture, turned the same way: a 2x2 box of the full decode is close
        int[] box = new int[3];
        for (int c = 0; c < 3; c++) {
            box[c] =
                    (full.get(600, 400, c)
                                    + full.get(601, 400, c)
                                    + full.get(600, 401, c)
                                    + full.get(601, 401, c))
                            / 4;
            assertThat(Math.abs(img.get(300, 200, c) - box[c])).isLessThanOrEqualTo(12);
        }
    }

    @Test
    void scalingIsOnlyForNativeJpegs() throws Exception {
        byte[] png = SharedData.bytes("bad-inputs/decompression-bomb/images/ok_small.png");
        RgbImage plain = nativeDecoder.decode(png, LIMIT);
        RgbImage asked = nativeDecoder.decode(png, LIMIT, (h, w) -> new int[] {1, 1});
        assertThat(asked.width()).isEqualTo(plain.width());
        byte[] jpeg = SharedData.bytes("llava-style/images/photos/retina.jpg");
        RgbImage viaImageIo = imageIo.decode(jpeg, LIMIT, (h, w) -> new int[] {28, 28});
        assertThat(viaImageIo.width()).isEqualTo(1411);
    }

    private static byte[] pixels(RgbImage img) {
        return Arrays.copyOf(img.pixels(), img.width() * img.height() * 3);
    }

    /** {max abs diff, sum of abs diffs} over all samples. */
    private static int[] absDiff(RgbImage a, RgbImage b) {
        int max = 0;
        int sum = 0;
        int n = a.width() * a.height() * 3;
        for (int i = 0; i < n; i++) {
            int d = Math.abs((a.pixels()[i] & 0xFF) - (b.pixels()[i] & 0xFF));
            max = Math.max(max, d);
            sum += d;
        }
        return new int[] {max, sum};
    }
}
