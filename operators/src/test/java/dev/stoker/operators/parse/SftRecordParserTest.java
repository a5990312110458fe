package dev.stoker.operators.parse;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.SharedData;
import dev.stoker.operators.model.ContentPart;
import dev.stoker.operators.model.JsonlLine;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SftRecord;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

class SftRecordParserTest {
    private final SftRecordParser parser = new SftRecordParser();

    /** Each record parses per record ({@code auto}) and as its dataset's format, to the same. */
    @ParameterizedTest
    @CsvSource({
        "llava-style, 38, LLAVA",
        "qwen-messages, 19, MESSAGES",
        "llamafactory-sharegpt, 6, SHAREGPT"
    })
    void everyLineOfTheSampleDatasetsParses(String dataset, int records, RecordFormat format)
            throws Exception {
        List<JsonlLine> lines =
                JsonlLines.read(SharedData.root().resolve(dataset).resolve("train.jsonl"));
        assertThat(lines).hasSize(records);
        for (JsonlLine line : lines) {
            SftRecord record = parser.parse(line, RecordFormat.AUTO);
            assertThat(parser.parse(line, format))
                    .usingRecursiveComparison()
                    .as(record.ref.recordId)
                    .isEqualTo(record);
            assertThat(record.ref.recordId).isNotBlank();
            assertThat(record.ref.line).isEqualTo(line.ref.line);
            long imageParts =
                    Arrays.stream(record.messages)
                            .flatMap(m -> Arrays.stream(m.content))
                            .filter(ContentPart::isImage)
                            .count();
            assertThat(imageParts).as(record.ref.recordId).isEqualTo(record.images.length);
        }
    }

    @Test
    void llavaThreeImagesInOrderBeforeTheQuestion() throws Exception {
        SftRecord r = record("llava-style", "llava-0036");
        assertThat(r.images)
                .extracting(i -> i.path)
                .containsExactly(
                        "images/photos/hopper.jpg",
                        "images/gray/hopper_gray.jpg",
                        "images/webp/hopper.webp");
        assertThat(r.messages).extracting(m -> m.role).containsExactly("user", "assistant");
        ContentPart[] user = r.messages[0].content;
        assertThat(user)
                .extracting(p -> p.type)
                .containsExactly("image", "text", "image", "text", "image", "text");
        assertThat(user).extracting(p -> p.imageIndex).containsExactly(0, -1, 1, -1, 2, -1);
        assertThat(user[5].text).isEqualTo("\nWhich of these three pictures is not in colour?");
    }

    @Test
    void llavaThreeTurnsWithOneImage() throws Exception {
        SftRecord r = record("llava-style", "llava-0038");
        assertThat(r.messages)
                .extracting(m -> m.role)
                .containsExactly("user", "assistant", "user", "assistant", "user", "assistant");
        assertThat(r.images).hasSize(1);
        assertThat(r.messages[4].content[0].text).isEqualTo("Give the image a one-line caption.");
    }

    @Test
    void llavaPlaceholderAfterTheQuestion() throws Exception {
        SftRecord r = record("llava-style", "llava-0003");
        assertThat(r.messages[0].content).extracting(p -> p.type).containsExactly("text", "image");
        assertThat(r.messages[0].content[0].text).isEqualTo("What drink is this?\n");
    }

    @Test
    void messagesWithSystemPromptAndPerImageMaxPixels() throws Exception {
        SftRecord r = record("qwen-messages", "msg-0002");
        assertThat(r.messages)
                .extracting(m -> m.role)
                .containsExactly("system", "user", "assistant");
        assertThat(r.images).hasSize(1);
        assertThat(r.images[0].path).isEqualTo("images/photos/origamis.jpg");
        assertThat(r.images[0].maxPixels).isEqualTo(401408);
        assertThat(r.images[0].minPixels).isZero();
    }

    @Test
    void messagesThreeImagesImageUrlAndPlainStrings() throws Exception {
        assertThat(record("qwen-messages", "msg-0015").images)
                .extracting(i -> i.path)
                .containsExactly(
                        "images/photos/landmark.jpg",
                        "images/photos/origamis.jpg",
                        "images/photos/cakes.png");
        SftRecord url = record("qwen-messages", "msg-0016");
        assertThat(url.images)
                .extracting(i -> i.path)
                .containsExactly("images/drawings/items_actually_webp.png");
        assertThat(url.messages[0].content)
                .extracting(p -> p.type)
                .containsExactly("text", "image");
        SftRecord plain = record("qwen-messages", "msg-0018");
        assertThat(plain.images).isEmpty();
        assertThat(plain.messages[0].content[0].text)
                .isEqualTo("What resolution is best for reading receipts with a vision model?");
    }

    @Test
    void shareGptSameImageTwiceAtStartAndEndOfTurns() throws Exception {
        SftRecord r = record("llamafactory-sharegpt", "lf-0001");
        assertThat(r.images)
                .extracting(i -> i.path)
                .containsExactly("images/1.jpg", "images/1.jpg");
        assertThat(r.messages).hasSize(4);
        assertThat(r.messages[0].content).extracting(p -> p.type).containsExactly("image", "text");
        assertThat(r.messages[0].content[1].text).isEqualTo("Who are they?");
        assertThat(r.messages[2].content).extracting(p -> p.type).containsExactly("text", "image");
        assertThat(r.messages[2].content[1].imageIndex).isEqualTo(1);
        assertThat(record("llamafactory-sharegpt", "lf-0004").messages[0].content[1].text)
                .isEqualTo("他们是谁？");
    }

    @Test
    void badEncodingLinesAsTheReadmeSays() throws Exception {
        Map<Long, Outcome> byLine =
                outcomesByLine(Path.of("bad-inputs", "bad-encoding-jsonl", "train.jsonl"));
        assertThat(byLine.keySet()).containsExactlyInAnyOrder(1L, 2L, 3L, 5L, 6L, 8L, 9L, 10L, 11L);
        assertThat(byLine.get(1L).id()).isEqualTo("enc-1-ok");
        assertThat(byLine.get(5L).id()).isEqualTo("enc-5-crlf");
        assertThat(byLine.get(10L).id()).isEqualTo("enc-10-cjk-ok");
        assertThat(byLine.get(11L).id()).isEqualTo("enc-11-last-line-no-newline");
        for (long ok : new long[] {1, 5, 10, 11}) {
            assertThat(byLine.get(ok).reason()).as("line " + ok).isNull();
        }
        assertThat(byLine.get(2L).reason()).isEqualTo(RejectReason.INVALID_UTF8);
        assertThat(byLine.get(2L).message()).contains("0xE9");
        assertThat(byLine.get(3L).reason()).isEqualTo(RejectReason.INVALID_UTF8);
        assertThat(byLine.get(3L).message()).contains("0xC3");
        assertThat(byLine.get(6L).reason()).isEqualTo(RejectReason.INVALID_RECORD);
        assertThat(byLine.get(6L).message()).contains("invalid Unicode scalar");
        assertThat(byLine.get(6L).id()).isEqualTo("enc-6-lone-surrogate-escape");
        assertThat(byLine.get(8L).reason()).isEqualTo(RejectReason.MALFORMED_JSON);
        assertThat(byLine.get(8L).message()).containsIgnoringCase("CTRL-CHAR");
        assertThat(byLine.get(9L).reason()).isEqualTo(RejectReason.MALFORMED_JSON);
        assertThat(byLine.get(9L).message()).contains("end-of-input");
        // the id that precedes the defect still names the record in the dead letter
        assertThat(byLine.get(2L).id()).isEqualTo("enc-2-latin1");
        assertThat(byLine.get(3L).id()).isEqualTo("enc-3-invalid-continuation");
        assertThat(byLine.get(8L).id()).isEqualTo("enc-8-nul-byte");
        assertThat(byLine.get(9L).id()).isEqualTo("enc-9-truncated-json");
    }

    @ParameterizedTest
    @ValueSource(
            strings = {
                "{\"a\": 1,",
                "{\"id\": {\"x\": 1}, ",
                "[\"id\", \"x\"",
                "{\"id\": \"\\ud800\", ",
                "{\"conversations\": [], \"x\": ",
                "",
                "{\"id\": tru"
            })
    void noLeadingIdWhenNoneCanBeRead(String text) {
        assertThatThrownBy(
                        () ->
                                parser.parse(
                                        line(text.getBytes(StandardCharsets.UTF_8)),
                                        RecordFormat.AUTO))
                .isInstanceOfSatisfying(
                        RecordParseException.class, e -> assertThat(e.ref().recordId).isNull());
    }

    @Test
    void leadingIdAfterOtherFieldsAndNumericIds() {
        assertThatThrownBy(
                        () ->
                                parser.parse(
                                        line(
                                                "{\"image\": [\"a.jpg\"], \"id\": 42, \"x\": "
                                                        .getBytes(StandardCharsets.UTF_8)),
                                        RecordFormat.AUTO))
                .isInstanceOfSatisfying(
                        RecordParseException.class,
                        e -> assertThat(e.ref().recordId).isEqualTo("42"));
    }

    @Test
    void invalidUtf8NamesTheByteOffset() {
        byte[] bytes = "{\"id\": \"Caf\u00e9\"}".getBytes(StandardCharsets.ISO_8859_1);
        assertRejected(bytes, RejectReason.INVALID_UTF8, "byte offset 11");
    }

    @Test
    void carriageReturnTolerated() throws Exception {
        String json =
                "{\"id\": 7, \"conversations\": [{\"from\": \"human\", \"value\": \"Hi\"}, {\"from\": \"gpt\", \"value\": \"Hello\"}]}";
        SftRecord r =
                parser.parse(
                        line((json + "\r").getBytes(StandardCharsets.UTF_8)), RecordFormat.AUTO);
        assertThat(r.ref.recordId).isEqualTo("7");
        assertThat(r.images).isEmpty();
    }

    /**
     * The source skips a UTF-8 BOM at the start of a file and of a line (JsonlLineReaderTest); a
     * U+FEFF that still starts a record the parser sees (a second one) is text, and JSON does not
     * allow it before a value.
     */
    @Test
    void aByteOrderMarkTheSourceLeftIsNotSkipped() {
        String json =
                "{\"id\": 7, \"conversations\": [{\"from\": \"human\", \"value\": \"Hi\"}, {\"from\": \"gpt\", \"value\": \"Hello\"}]}";
        assertRejected(
                ("\uFEFF" + json).getBytes(StandardCharsets.UTF_8),
                RejectReason.MALFORMED_JSON,
                "malformed JSON at column 1");
    }

    /**
     * Line 1 of a UTF-16/32 file (which the source lists as the file's only record): one rejection
     * naming the file and the encoding, and no record id, although Jackson could decode the first
     * line's id from UTF-16.
     */
    @ParameterizedTest
    @CsvSource({
        "UTF-16, UTF-16BE, FE FF",
        "x-UTF-16LE-BOM, UTF-16LE, FF FE",
        "X-UTF-32BE-BOM, UTF-32BE, 00 00 FE FF",
        "X-UTF-32LE-BOM, UTF-32LE, FF FE 00 00"
    })
    void firstLineOfAUtf16Or32FileIsRejectedNamingFileAndEncoding(
            String jdkCharset, String encoding, String mark) {
        String json =
                "{\"id\": \"u-1\", \"conversations\": [{\"from\": \"human\", \"value\": \"Hi\"}, {\"from\": \"gpt\", \"value\": \"Yo\"}]}";
        byte[] bytes = json.getBytes(java.nio.charset.Charset.forName(jdkCharset));
        JsonlLine first =
                new JsonlLine(new RecordRef("s3://b/u.jsonl", 1, 0, null), bytes, 1 << 20);
        assertThatThrownBy(() -> parser.parse(first, RecordFormat.AUTO))
                .isInstanceOfSatisfying(
                        RecordParseException.class,
                        e -> {
                            assertThat(e.reason()).isEqualTo(RejectReason.UNSUPPORTED_ENCODING);
                            assertThat(e.reason().stage())
                                    .isEqualTo(dev.stoker.operators.model.Stage.PARSE);
                            assertThat(e.getMessage())
                                    .contains(
                                            "file s3://b/u.jsonl is " + encoding,
                                            "byte order mark " + mark,
                                            "JSONL must be UTF-8");
                            assertThat(e.ref().recordId).isNull();
                        });
        // the same bytes further down a file are just not UTF-8 (the source checks file starts)
        JsonlLine later = new JsonlLine(new RecordRef("u.jsonl", 5, 4, null), bytes, bytes.length);
        assertThatThrownBy(() -> parser.parse(later, RecordFormat.AUTO))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e ->
                                assertThat(e.reason())
                                        .isNotEqualTo(RejectReason.UNSUPPORTED_ENCODING));
    }

    @Test
    void placeholderMismatchCasesAsTheReadmeSays() throws Exception {
        Map<String, Outcome> byId = new HashMap<>();
        for (String file : new String[] {"train.jsonl", "train_messages.jsonl"}) {
            for (Outcome o :
                    outcomesByLine(Path.of("bad-inputs", "placeholder-mismatch", file)).values()) {
                byId.put(o.id(), o);
            }
        }
        assertThat(byId).hasSize(14);
        byId.forEach(
                (id, o) -> {
                    boolean valid =
                            List.of("ph-0", "ph-5", "ph-6", "ph-8", "phm-0", "phm-1")
                                    .contains(id.replaceAll("^(phm?-\\d+).*", "$1"));
                    assertThat(o.reason() == null).as(id + ": " + o.message()).isEqualTo(valid);
                });
        assertMismatch(byId, "ph-1-no-placeholder", "0 placeholders vs 1 images");
        assertMismatch(byId, "ph-2-two-placeholders-one-image", "2 placeholders vs 1 images");
        assertMismatch(byId, "ph-3-placeholder-in-assistant", "image in assistant turn 2");
        assertMismatch(byId, "ph-4-wrong-case", "0 placeholders vs 1 images");
        assertMismatch(byId, "ph-7-two-images-one-placeholder", "1 placeholders vs 2 images");
        assertMismatch(byId, "ph-9-text-only-with-placeholder", "1 placeholders vs 0 images");
        assertMismatch(byId, "phm-2-image-part-in-assistant", "image in assistant turn 2");
        assertMismatch(byId, "phm-3-image-part-missing-path", "image part without source");
    }

    @Test
    void literalImageTagInMessagesTextStaysText() throws Exception {
        SftRecord r =
                record(
                        Path.of("bad-inputs", "placeholder-mismatch", "train_messages.jsonl"),
                        "phm-1-literal-image-tag-in-text");
        assertThat(r.images).hasSize(1);
        assertThat(r.messages[0].content[1].text).contains("the tag <image> marks");
        SftRecord twice =
                record(
                        Path.of("bad-inputs", "placeholder-mismatch", "train.jsonl"),
                        "ph-5-same-image-twice");
        assertThat(twice.images)
                .extracting(i -> i.path)
                .containsExactly("images/cat.jpg", "images/cat.jpg");
    }

    @Test
    void emptyTurnCasesAsTheReadmeSays() throws Exception {
        Map<String, Outcome> byId = new HashMap<>();
        for (Outcome o :
                outcomesByLine(Path.of("bad-inputs", "empty-turns", "train.jsonl")).values()) {
            byId.put(o.id().replaceAll("^(empty-\\d+).*", "$1"), o);
        }
        assertThat(byId).hasSize(12);
        assertThat(byId.get("empty-0").reason()).isNull();
        assertThat(byId.get("empty-11").reason()).isNull();
        Map<String, String> expected =
                Map.of(
                        "empty-1", "no trainable assistant tokens",
                        "empty-2", "no trainable assistant tokens",
                        "empty-3", "ends with user turn 3",
                        "empty-4", "'conversations' is missing",
                        "empty-5", "no messages",
                        "empty-6", "'value' is null",
                        "empty-7", "unknown role 'bot'",
                        "empty-8", "roles out of order: turn 2",
                        "empty-9", "roles out of order: turn 1",
                        "empty-10", "no assistant turn");
        expected.forEach(
                (id, fragment) -> {
                    assertThat(byId.get(id).reason()).as(id).isEqualTo(RejectReason.INVALID_RECORD);
                    assertThat(byId.get(id).message()).as(id).contains(fragment);
                });
    }

    @Test
    void emptyTextPartBesideAnImageIsDropped() throws Exception {
        SftRecord r =
                record(
                        Path.of("bad-inputs", "empty-turns", "train.jsonl"),
                        "empty-11-messages-empty-text-part");
        assertThat(r.messages[0].content).extracting(p -> p.type).containsExactly("image");
    }

    @Test
    void longLinesWithinTheLimitParseAndLongerOnesAreRejected() throws Exception {
        int limit = 8 << 20;
        List<JsonlLine> lines =
                JsonlLines.read(SharedData.root().resolve("bad-inputs/long-lines/train.jsonl"));
        assertThat(lines).hasSize(4);
        SftRecord long1 = parser.parse(lines.get(1), RecordFormat.AUTO);
        assertThat(long1.ref.recordId).isEqualTo("long-1-5.2M-chars");
        assertThat(long1.messages[1].content[0].text.length()).isEqualTo(5_200_000);
        JsonlLine cut =
                new JsonlLine(
                        lines.get(2).ref,
                        Arrays.copyOf(lines.get(2).bytes, limit),
                        lines.get(2).bytes.length);
        assertThatThrownBy(() -> parser.parse(cut, RecordFormat.AUTO))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> {
                            assertThat(e.reason()).isEqualTo(RejectReason.LINE_TOO_LONG);
                            assertThat(e.getMessage())
                                    .contains(String.valueOf(limit))
                                    .startsWith("record larger than 8 MiB");
                            assertThat(((RecordParseException) e).ref().recordId)
                                    .isEqualTo("long-2-9M-chars");
                        });
        assertThat(parser.parse(lines.get(3), RecordFormat.AUTO).ref.recordId)
                .isEqualTo("long-3-ok-after");
    }

    @ParameterizedTest
    @ValueSource(
            strings = {
                "/etc/passwd",
                "../secret.jpg",
                "images/../../x.jpg",
                "images\\\\..\\\\x.jpg",
                "http://example.com/x.jpg",
                "s3://bucket/x.jpg",
                "file:///etc/passwd",
                "data:image/png;base64,AAAA",
                "C:/x.jpg"
            })
    void unsafePathsAreRejectedInEveryFormat(String path) {
        String llava =
                "{\"image\": \""
                        + path
                        + "\", \"conversations\": [{\"from\": \"human\", \"value\": \"<image>Hi\"}, {\"from\": \"gpt\", \"value\": \"Yo\"}]}";
        String part =
                "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image\", \"image\": \""
                        + path
                        + "\"}]}, {\"role\": \"assistant\", \"content\": \"Yo\"}]}";
        String url =
                "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {\"url\": \""
                        + path
                        + "\"}}]}, {\"role\": \"assistant\", \"content\": \"Yo\"}]}";
        String shareGpt =
                "{\"messages\": [{\"role\": \"user\", \"content\": \"<image>Hi\"}, {\"role\": \"assistant\", \"content\": \"Yo\"}], \"images\": [\""
                        + path
                        + "\"]}";
        for (String json : List.of(llava, part, url, shareGpt)) {
            assertRejected(
                    json.getBytes(StandardCharsets.UTF_8), RejectReason.UNSAFE_PATH, "image path");
        }
    }

    /**
     * A fixed format reads only its layout: the reason names the format and what the record has,
     * where {@code auto} reads each of these records.
     */
    @ParameterizedTest(name = "{0}")
    @CsvSource(
            delimiter = '|',
            value = {
                "LLAVA|{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Yo\"}]}|not a llava record (the format of its source): it has 'messages', not 'conversations' (the messages or sharegpt format)",
                "MESSAGES|{\"messages\": [{\"role\": \"user\", \"content\": \"<image>Hi\"}, {\"role\": \"assistant\", \"content\": \"Yo\"}], \"images\": [\"a.jpg\"]}|not a messages record (the format of its source): it has a top-level 'images' for <image> placeholders (the sharegpt format); messages give images as content parts",
                "MESSAGES|{\"conversations\": [{\"from\": \"human\", \"value\": \"Hi\"}, {\"from\": \"gpt\", \"value\": \"Yo\"}]}|not a messages record (the format of its source): it has 'conversations', not 'messages' (the llava format)",
                "SHAREGPT|{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": [{\"type\": \"text\", \"text\": \"Yo\"}]}]}|not a sharegpt record (the format of its source): messages[1] (turn 2): 'content' is a list of parts (the messages format); ShareGPT content is a string with <image> placeholders"
            })
    void aFixedFormatRejectsARecordInAnotherLayout(RecordFormat format, String json, String message)
            throws Exception {
        JsonlLine line = line(json.getBytes(StandardCharsets.UTF_8));
        assertThat(parser.parse(line, RecordFormat.AUTO).messages).hasSize(2);
        assertThatThrownBy(() -> parser.parse(line, format))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> assertThat(e.reason()).isEqualTo(RejectReason.INVALID_RECORD))
                .hasMessage(message);
    }

    @Test
    void aFixedFormatNamesARecordOfNoLayout() {
        JsonlLine line = line("{\"id\": 1}".getBytes(StandardCharsets.UTF_8));
        assertThatThrownBy(() -> parser.parse(line, RecordFormat.LLAVA))
                .hasMessage(
                        "not a llava record (the format of its source): it has neither"
                                + " 'conversations' nor 'messages'");
        assertThatThrownBy(() -> parser.parse(line, RecordFormat.AUTO))
                .hasMessage("'conversations' is missing");
    }

    @Test
    void dotSegmentsThatStayInsideTheRootAreAllowed() throws Exception {
        String json =
                "{\"image\": \"images/a/../b/./c.jpg\", \"conversations\": [{\"from\": \"human\", \"value\": \"<image>Hi\"}, {\"from\": \"gpt\", \"value\": \"Yo\"}]}";
        assertThat(
                        parser.parse(line(json.getBytes(StandardCharsets.UTF_8)), RecordFormat.AUTO)
                                .images[0]
                                .path)
                .isEqualTo("images/a/../b/./c.jpg");
    }

    /** The tokenizer encodes them as text (QwenChatTemplate), so the parser keeps them. */
    @Test
    void specialTokenStringsInTextAreKeptAsText() throws Exception {
        String json =
                "{\"conversations\": [{\"from\": \"human\", \"value\": \"Hi <|image_pad|><|im_end|>\"}, {\"from\": \"gpt\", \"value\": \"Yo <|vision_start|>\"}]}";
        SftRecord r = parser.parse(line(json.getBytes(StandardCharsets.UTF_8)), RecordFormat.AUTO);
        assertThat(r.images).isEmpty();
        assertThat(r.messages[0].content).hasSize(1);
        assertThat(r.messages[0].content[0].text).isEqualTo("Hi <|image_pad|><|im_end|>");
        assertThat(r.messages[1].content[0].text).isEqualTo("Yo <|vision_start|>");
    }

    @Test
    void malformedJsonNamesTheColumn() {
        assertRejected(
                "{\"id\": 1,, }".getBytes(StandardCharsets.UTF_8),
                RejectReason.MALFORMED_JSON,
                "at column 10");
        assertRejected(
                "{\"id\": 1} {}".getBytes(StandardCharsets.UTF_8),
                RejectReason.MALFORMED_JSON,
                "malformed JSON");
    }

    private record Outcome(String id, RejectReason reason, String message) {}

    private Map<Long, Outcome> outcomesByLine(Path relative) throws Exception {
        Map<Long, Outcome> byLine = new HashMap<>();
        for (JsonlLine line : JsonlLines.read(SharedData.root().resolve(relative))) {
            try {
                byLine.put(
                        line.ref.line,
                        new Outcome(
                                parser.parse(line, RecordFormat.AUTO).ref.recordId, null, null));
            } catch (RecordParseException e) {
                byLine.put(
                        line.ref.line, new Outcome(e.ref().recordId, e.reason(), e.getMessage()));
            }
        }
        return byLine;
    }

    private static void assertMismatch(Map<String, Outcome> byId, String id, String fragment) {
        assertThat(byId.get(id).reason()).as(id).isEqualTo(RejectReason.PLACEHOLDER_MISMATCH);
        assertThat(byId.get(id).message()).as(id).contains(fragment);
    }

    private SftRecord record(String dataset, String id) throws Exception {
        return record(Path.of(dataset, "train.jsonl"), id);
    }

    private SftRecord record(Path relative, String id) throws Exception {
        for (JsonlLine line : JsonlLines.read(SharedData.root().resolve(relative))) {
            String text = new String(line.bytes, StandardCharsets.UTF_8);
            if (text.contains("\"id\": \"" + id + "\"")) {
                return parser.parse(line, RecordFormat.AUTO);
            }
        }
        throw new AssertionError(id + " not found in " + relative);
    }

    private void assertRejected(byte[] bytes, RejectReason reason, String fragment) {
        assertThatThrownBy(() -> parser.parse(line(bytes), RecordFormat.AUTO))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> {
                            assertThat(e.reason()).isEqualTo(reason);
                            assertThat(e.getMessage()).contains(fragment);
                        });
    }

    private static JsonlLine line(byte[] bytes) {
        return new JsonlLine(new RecordRef("test.jsonl", 1, 0, null), bytes, bytes.length);
    }
}
