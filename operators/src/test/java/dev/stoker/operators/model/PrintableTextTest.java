package dev.stoker.operators.model;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * {@link PrintableText} escapes what a terminal cannot show as itself, exactly as the Python tools'
 * {@code stoker.printable} does: both tests read their cases from {@code
 * schema/printable-cases.json}.
 */
class PrintableTextTest {
    static Stream<Arguments> cases() throws IOException {
        JsonNode doc =
                new ObjectMapper().readTree(Path.of("../schema/printable-cases.json").toFile());
        List<Arguments> cases = new ArrayList<>();
        for (JsonNode c : doc.get("cases")) {
            cases.add(Arguments.of(c.get("text").asText(), c.get("shown").asText()));
        }
        assertThat(cases).hasSizeGreaterThanOrEqualTo(10);
        return cases.stream();
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
