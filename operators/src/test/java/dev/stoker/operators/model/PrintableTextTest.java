package dev.stoker.operators.model;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.stream.Stream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * {@link PrintableText} escapes what a terminal cannot show as itself, in the notation of the
 * Python tools' {@code stoker.printable} (the expected strings are what Python's {@code printable}
 * gives for the same input; {@code python/tests/test_printable.py} checks that side).
 */
class PrintableTextTest {
    static Stream<Arguments> cases() {
        return Stream.of(
                Arguments.of("plain text, é 中 ✓", "plain text, é 中 ✓"),
                Arguments.of("a\uD800b", "a\\ud800b"),
                Arguments.of("\u001B]0;pwned\u0007", "\\x1b]0;pwned\\x07"),
                Arguments.of("abc\u202Edef\u2066x\u2069", "abc\\u202edef\\u2066x\\u2069"),
                Arguments.of("nul\u0000 del\u007F c1\u009B", "nul\\x00 del\\x7f c1\\x9b"),
                Arguments.of("tab\there\nline\rcr", "tab\\there\\nline\\rcr"),
                Arguments.of("C:\\data\\x.png", "C:\\\\data\\\\x.png"),
                Arguments.of("nb\u00A0sp zw\u200Bsp ls\u2028", "nb\\xa0sp zw\\u200bsp ls\\u2028"),
                Arguments.of("private\uE000", "private\\ue000"),
                Arguments.of(
                        "emoji \uD83D\uDE00 lone low \uDE00",
                        "emoji \uD83D\uDE00 lone low \\ude00"),
                Arguments.of("plane 16 private \uDBFF\uDFFD", "plane 16 private \\U0010fffd"));
    }

    @ParameterizedTest
    @MethodSource("cases")
    void escapesWhatATerminalCannotShow(String input, String expected) {
        assertThat(PrintableText.escape(input)).isEqualTo(expected);
    }

    @org.junit.jupiter.api.Test
    void deadLettersPrintEscaped() {
        DeadLetter dl =
                new DeadLetter(
                        new RecordRef("evil\u202Egpj.jsonl", 3, 0, "id\u001B[2J"),
                        RejectReason.INVALID_RECORD,
                        "invalid Unicode scalar \uD800 in 'value'");
        assertThat(dl.toString())
                .contains("evil\\u202egpj.jsonl", "id\\x1b[2J", "scalar \\ud800 in")
                .doesNotContain("\u202E", "\u001B", "\uD800");
    }
}
