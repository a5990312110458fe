package dev.stoker.operators.parse;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Detection against the JDK's own encoders that write a byte order mark (independent of {@link
 * ByteOrderMark}'s table): the mark found, and the text decoded from the bytes after it with the
 * detected encoding, must be the text that was encoded.
 */
class ByteOrderMarkTest {
    private static final String TEXT = "{\"id\": \"caf\u00e9-\u732b\"}\n";

    @ParameterizedTest
    @CsvSource({
        // JDK charset that writes a BOM, expected mark, its bytes
        "UTF-16, UTF_16BE, FE FF",
        "x-UTF-16LE-BOM, UTF_16LE, FF FE",
        "X-UTF-32BE-BOM, UTF_32BE, 00 00 FE FF",
        "X-UTF-32LE-BOM, UTF_32LE, FF FE 00 00"
    })
    void detectsTheMarkTheJdkEncoderWritesAndNamesAnEncodingThatDecodesTheRest(
            String jdkCharset, ByteOrderMark expected, String hex) {
        byte[] bytes = TEXT.getBytes(Charset.forName(jdkCharset));

        ByteOrderMark bom = ByteOrderMark.detect(bytes);

        assertThat(bom).isEqualTo(expected);
        assertThat(bom.isUtf8()).isFalse();
        assertThat(bom.hex()).isEqualTo(hex);
        byte[] rest = Arrays.copyOfRange(bytes, bom.length(), bytes.length);
        assertThat(new String(rest, Charset.forName(bom.encoding()))).isEqualTo(TEXT);
    }

    @Test
    void utf8MarkIsDetectedAndIsTheOnlySupportedOne() {
        byte[] bytes = ("\uFEFF" + TEXT).getBytes(StandardCharsets.UTF_8);
        ByteOrderMark bom = ByteOrderMark.detect(bytes);
        assertThat(bom).isEqualTo(ByteOrderMark.UTF_8);
        assertThat(bom.isUtf8()).isTrue();
        assertThat(bom.hex()).isEqualTo("EF BB BF");
        assertThat(new String(bytes, 3, bytes.length - 3, StandardCharsets.UTF_8)).isEqualTo(TEXT);
    }

    @Test
    void noMarkInPlainUtf8OrShortInput() {
        assertThat(ByteOrderMark.detect(TEXT.getBytes(StandardCharsets.UTF_8))).isNull();
        assertThat(ByteOrderMark.detect(new byte[0])).isNull();
        assertThat(ByteOrderMark.detect(new byte[] {(byte) 0xEF, (byte) 0xBB})).isNull();
        assertThat(ByteOrderMark.detect(new byte[] {(byte) 0xFE})).isNull();
        // a UTF-16 text without a BOM is not guessed
        assertThat(ByteOrderMark.detect("{}".getBytes(StandardCharsets.UTF_16LE))).isNull();
    }

    @Test
    void utf16LeMarkBeforeANonZeroUnitIsUtf16NotUtf32() {
        byte[] twoBytes = {(byte) 0xFF, (byte) 0xFE};
        byte[] utf16 = {(byte) 0xFF, (byte) 0xFE, '{', 0};
        assertThat(ByteOrderMark.detect(twoBytes)).isEqualTo(ByteOrderMark.UTF_16LE);
        assertThat(ByteOrderMark.detect(utf16)).isEqualTo(ByteOrderMark.UTF_16LE);
    }
}
