package dev.stoker.operators.parse;

import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CoderResult;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

/**
 * Strict UTF-8 decoding of one JSONL line: malformed or unmappable bytes (including encoded
 * surrogates and overlong forms) are reported, never replaced with U+FFFD.
 */
final class StrictUtf8 {
    private StrictUtf8() {}

    /**
     * Decodes {@code bytes} as they are: a U+FEFF is kept as a character (the source skips a UTF-8
     * byte order mark at the start of a file or of a line, see {@link ByteOrderMark}).
     *
     * @throws RejectedRecordException {@link RejectReason#INVALID_UTF8} naming the byte offset and
     *     the offending bytes
     */
    static String decode(byte[] bytes) throws RejectedRecordException {
        CharsetDecoder decoder =
                StandardCharsets.UTF_8
                        .newDecoder()
                        .onMalformedInput(CodingErrorAction.REPORT)
                        .onUnmappableCharacter(CodingErrorAction.REPORT);
        ByteBuffer in = ByteBuffer.wrap(bytes);
        CharBuffer out = CharBuffer.allocate(bytes.length);
        CoderResult result = decoder.decode(in, out, true);
        if (!result.isError()) {
            result = decoder.flush(out);
        }
        if (result.isError()) {
            int offset = in.position();
            throw new RejectedRecordException(
                    RejectReason.INVALID_UTF8,
                    "invalid UTF-8 at byte offset "
                            + offset
                            + ": "
                            + hex(bytes, offset, result.length()));
        }
        out.flip();
        return out.toString();
    }

    private static String hex(byte[] bytes, int offset, int length) {
        StringBuilder sb = new StringBuilder();
        for (int i = offset; i < Math.min(bytes.length, offset + Math.max(length, 1)); i++) {
            if (sb.length() > 0) {
                sb.append(' ');
            }
            sb.append(String.format("0x%02X", bytes[i] & 0xFF));
        }
        return sb.toString();
    }
}
