package dev.stoker.operators.parse;

import com.fasterxml.jackson.core.JsonLocation;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.operators.json.Json;
import dev.stoker.operators.model.JsonlLine;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SftRecord;
import java.io.Serializable;

/**
 * Turns one JSONL line into a validated {@link SftRecord}; pure and thread-safe.
 *
 * <p>Steps: reject the first line of a file that starts with a UTF-16 or UTF-32 byte order mark,
 * which the source lists as one record for the whole file ({@link
 * RejectReason#UNSUPPORTED_ENCODING}, see {@link ByteOrderMark}); reject a line the source cut
 * ({@link RejectReason#LINE_TOO_LONG}); decode strict UTF-8 ({@link RejectReason#INVALID_UTF8} with
 * the byte offset; the source has already skipped a UTF-8 BOM at the start of a file or of a line);
 * parse JSON with Jackson ({@link RejectReason#MALFORMED_JSON} with Jackson's message and column:
 * syntax errors, unescaped control characters, duplicate keys, trailing content); reject lone
 * surrogate escapes such as {@code \ud800} ({@link RejectReason#INVALID_RECORD}, "invalid Unicode
 * scalar"); read the LLaVA, messages or LLaMA-Factory/ShareGPT layout, the one the source's {@link
 * RecordFormat} names or the one the record's keys name ({@link RecordFormats}); check placeholders
 * against images and videos ({@link RejectReason#PLACEHOLDER_MISMATCH}), image and video paths
 * ({@link RejectReason#UNSAFE_PATH}) and conversation structure ({@link ConversationRules}).
 *
 * <p>Jackson's default maximum string length (20,000,000 chars) is lifted: the only record size
 * limit is the source's configured maximum line length, reported as {@code LINE_TOO_LONG}.
 *
 * <p>Every rejection is a {@link RecordParseException} carrying the line's {@link RecordRef} (with
 * the record id when it could be read: from the parsed record, or for a line that is cut, not UTF-8
 * or not JSON, from a top-level {@code "id"} that precedes the defect, see {@link LeadingId}).
 */
public class SftRecordParser implements Serializable {
    private static final long serialVersionUID = 1L;

    private static final ObjectMapper MAPPER =
            new ObjectMapper(
                            Json.factoryBuilder()
                                    .streamReadConstraints(
                                            StreamReadConstraints.builder()
                                                    .maxStringLength(Integer.MAX_VALUE)
                                                    .build())
                                    .enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION)
                                    .build())
                    .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);

    /**
     * Parses and validates one line.
     *
     * @param format the layout the line is read as (its source's format)
     * @throws RecordParseException (a {@link RejectedRecordException}) naming the reason, the field
     *     and the turn concerned, or for a record not in {@code format} the format and what the
     *     record has instead ({@link RejectReason#INVALID_RECORD})
     */
    public SftRecord parse(JsonlLine line, RecordFormat format) throws RejectedRecordException {
        RecordRef ref = line.ref;
        requireUtf8File(line);
        try {
            if (line.isTruncated()) {
                throw new RejectedRecordException(
                        RejectReason.LINE_TOO_LONG,
                        "record larger than "
                                + size(line.bytes.length)
                                + ": line of "
                                + line.originalLength
                                + " bytes is longer than the maximum line length of "
                                + line.bytes.length
                                + " bytes");
            }
            JsonNode root = readJson(StrictUtf8.decode(line.bytes));
            ref = withId(ref, root);
            UnicodeScalars.check(root);
            ConversationBuilder builder = RecordFormats.read(root, format);
            SftRecord record = builder.build(ref);
            ConversationRules.check(record);
            builder.checkPlaceholders();
            return record;
        } catch (RecordParseException e) {
            throw e;
        } catch (RejectedRecordException e) {
            if (ref.recordId == null) {
                // a line that is cut, not UTF-8 or not JSON further on may still name itself early
                // on
                ref = ref.withRecordId(LeadingId.read(line.bytes));
            }
            throw new RecordParseException(ref, e);
        }
    }

    /**
     * Rejects the first line of a file that starts with a UTF-16 or UTF-32 byte order mark: the
     * source lists such a file as this one record, so its dead letter stands for the whole file. No
     * record id is read from it (Jackson would decode its first line as UTF-16/32).
     */
    private static void requireUtf8File(JsonlLine line) throws RecordParseException {
        ByteOrderMark bom = line.ref.line == 1 ? ByteOrderMark.detect(line.bytes) : null;
        if (bom != null && !bom.isUtf8()) {
            throw new RecordParseException(
                    line.ref,
                    new RejectedRecordException(
                            RejectReason.UNSUPPORTED_ENCODING,
                            "file "
                                    + line.ref.file
                                    + " is "
                                    + bom.encoding()
                                    + " (it starts with the byte order mark "
                                    + bom.hex()
                                    + "); JSONL must be UTF-8, so the whole file is skipped as"
                                    + " this one record: re-encode it as UTF-8"));
        }
    }

    private static String size(long bytes) {
        return bytes % (1 << 20) == 0 ? (bytes >> 20) + " MiB" : bytes + " bytes";
    }

    private static JsonNode readJson(String text) throws RejectedRecordException {
        JsonNode root;
        try {
            root = MAPPER.readTree(text);
        } catch (JsonProcessingException e) {
            JsonLocation at = e.getLocation();
            String column = at == null ? "" : " at column " + at.getColumnNr();
            throw new RejectedRecordException(
                    RejectReason.MALFORMED_JSON,
                    "malformed JSON" + column + ": " + e.getOriginalMessage(),
                    e);
        }
        if (root == null || !root.isObject()) {
            throw RecordFormats.invalid("record is not a JSON object");
        }
        return root;
    }

    private static RecordRef withId(RecordRef ref, JsonNode root) throws RejectedRecordException {
        JsonNode id = root.get("id");
        if (id == null || id.isNull()) {
            return ref;
        }
        if (!id.isTextual() && !id.isNumber()) {
            throw RecordFormats.invalid("'id' must be a string or a number");
        }
        return ref.withRecordId(id.asText());
    }
}
