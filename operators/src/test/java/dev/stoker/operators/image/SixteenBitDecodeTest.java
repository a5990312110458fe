package dev.stoker.operators.image;

import static org.assertj.core.api.Assertions.assertThat;

import java.awt.Transparency;
import java.awt.color.ColorSpace;
import java.awt.image.BufferedImage;
import java.awt.image.ComponentColorModel;
import java.awt.image.DataBuffer;
import java.awt.image.WritableRaster;
import java.io.ByteArrayOutputStream;
import java.util.function.IntBinaryOperator;
import javax.imageio.ImageIO;
import org.junit.jupiter.api.Test;

/**
 * 16-bit PNGs (written here by the JDK's PNG writer from known 16-bit samples) decode to {@code
 * round(v / 257)} per sample, alpha included, and then alpha is composited over white with the rule
 * of 8-bit images ({@link RgbConverter#overWhite}, Pillow's {@code ImagingAlphaComposite}, which
 * {@code PillowDifferentialDecodeTest} checks against real Pillow, 16-bit grey+alpha and RGBA
 * included). Pillow itself clips 16-bit grey to 255, so its conversion is not the reference here
 * (docs/parity.md).
 */
class SixteenBitDecodeTest {
    private static final int W = 256;
    private static final int H = 256;

    private final ImageDecoder decoder = new ImageDecoder();

    /** Sample (x, y) of band b: every 16-bit value once for the grey ramp (v = y * 256 + x). */
    private static int ramp(int x, int y) {
        return y * W + x;
    }

    @Test
    void greyRampCoversEvery16BitValue() throws Exception {
        RgbImage rgb = decode(png(1, (x, y) -> ramp(x, y)));
        for (int y = 0; y < H; y++) {
            for (int x = 0; x < W; x++) {
                int expected = (int) Math.round(ramp(x, y) / 257.0);
                for (int c = 0; c < 3; c++) {
                    assertThat(rgb.get(x, y, c)).as("v=%d c=%d", ramp(x, y), c).isEqualTo(expected);
                }
            }
        }
        // the ends and the midpoint: 0 -> 0, 65535 -> 255, 32767 -> 127.5 - 1/514 -> 127
        assertThat(rgb.get(0, 0, 0)).isZero();
        assertThat(rgb.get(W - 1, H - 1, 0)).isEqualTo(255);
        assertThat(rgb.get(32767 % W, 32767 / W, 0)).isEqualTo(127);
        assertThat(rgb.get(32768 % W, 32768 / W, 0)).isEqualTo(128);
    }

    @Test
    void constantDarkGreyStaysDarkNotWhite() throws Exception {
        RgbImage rgb = decode(png(1, (x, y) -> 3000));
        // round(3000 / 257) = round(11.67) = 12; Pillow's I;16 conversion clips it to 255
        for (int i = 0; i < W * H * 3; i++) {
            assertThat(rgb.pixels()[i] & 0xFF).isEqualTo(12);
        }
    }

    @Test
    void greyAlphaScalesBothThenCompositesOverWhite() throws Exception {
        IntBinaryOperator grey = (x, y) -> 65535 - ramp(x, y);
        IntBinaryOperator alpha = (x, y) -> (x * 257 + y * 131) & 0xFFFF;
        RgbImage rgb = decode(png(2, grey, alpha));
        for (int y = 0; y < H; y++) {
            for (int x = 0; x < W; x++) {
                int expected = composite(grey.applyAsInt(x, y), alpha.applyAsInt(x, y));
                for (int c = 0; c < 3; c++) {
                    assertThat(rgb.get(x, y, c)).isEqualTo(expected);
                }
            }
        }
    }

    @Test
    void rgb48ScalesEachChannel() throws Exception {
        IntBinaryOperator[] bands = rgbBands();
        RgbImage rgb = decode(png(3, bands));
        for (int y = 0; y < H; y++) {
            for (int x = 0; x < W; x++) {
                for (int c = 0; c < 3; c++) {
                    int v = bands[c].applyAsInt(x, y);
                    assertThat(rgb.get(x, y, c))
                            .as("v=%d", v)
                            .isEqualTo((int) Math.round(v / 257.0));
                }
            }
        }
    }

    @Test
    void rgba64ScalesColourAndAlphaThenCompositesOverWhite() throws Exception {
        IntBinaryOperator[] rgbBands = rgbBands();
        IntBinaryOperator alpha = (x, y) -> (y * W + x) ^ 0x5A5A;
        RgbImage rgb = decode(png(4, rgbBands[0], rgbBands[1], rgbBands[2], alpha));
        int opaque = 0;
        int transparent = 0;
        for (int y = 0; y < H; y++) {
            for (int x = 0; x < W; x++) {
                int a = alpha.applyAsInt(x, y);
                opaque += Math.round(a / 257.0) == 255 ? 1 : 0;
                transparent += Math.round(a / 257.0) == 0 ? 1 : 0;
                for (int c = 0; c < 3; c++) {
                    int expected = composite(rgbBands[c].applyAsInt(x, y), a);
                    assertThat(rgb.get(x, y, c)).isEqualTo(expected);
                }
            }
        }
        assertThat(opaque).as("pixels whose alpha scales to 255").isPositive();
        assertThat(transparent).as("pixels whose alpha scales to 0").isPositive();
    }

    private static IntBinaryOperator[] rgbBands() {
        return new IntBinaryOperator[] {
            (x, y) -> ramp(x, y), (x, y) -> 65535 - ramp(x, y), (x, y) -> (ramp(x, y) * 7) & 0xFFFF
        };
    }

    /** The rule: 16-bit colour and alpha to round(v / 257), then composited over white. */
    private static int composite(int v, int a) {
        int c8 = (int) Math.round(v / 257.0);
        int a8 = (int) Math.round(a / 257.0);
        return a8 == 255 ? c8 : RgbConverter.overWhite(c8, a8);
    }

    private RgbImage decode(byte[] png) throws Exception {
        return decoder.decode(png, Long.MAX_VALUE);
    }

    /** A 16-bit PNG of {@code bands} bands (1 grey, 2 grey+alpha, 3 RGB, 4 RGBA), {@code W x H}. */
    private static byte[] png(int bands, IntBinaryOperator... samples) throws Exception {
        boolean alpha = bands == 2 || bands == 4;
        ColorSpace cs =
                ColorSpace.getInstance(bands <= 2 ? ColorSpace.CS_GRAY : ColorSpace.CS_sRGB);
        ComponentColorModel cm =
                new ComponentColorModel(
                        cs,
                        alpha,
                        false,
                        alpha ? Transparency.TRANSLUCENT : Transparency.OPAQUE,
                        DataBuffer.TYPE_USHORT);
        WritableRaster raster = cm.createCompatibleWritableRaster(W, H);
        for (int y = 0; y < H; y++) {
            for (int x = 0; x < W; x++) {
                for (int b = 0; b < bands; b++) {
                    raster.setSample(x, y, b, samples[b].applyAsInt(x, y));
                }
            }
        }
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        assertThat(ImageIO.write(new BufferedImage(cm, raster, false, null), "png", out)).isTrue();
        byte[] png = out.toByteArray();
        int[] colourTypes = {0, 0, 4, 2, 6};
        assertThat(png[24]).as("IHDR bit depth").isEqualTo((byte) 16);
        assertThat(png[25]).as("IHDR colour type").isEqualTo((byte) colourTypes[bands]);
        return png;
    }
}
