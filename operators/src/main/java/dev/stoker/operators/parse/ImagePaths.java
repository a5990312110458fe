package dev.stoker.operators.parse;

import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import java.util.regex.Pattern;

/**
 * Checks that an image or video path from a record is a plain relative path that stays under the
 * image root ({@code stoker.image.root}, by default the dataset root), so that no record can make
 * the job read outside it. The check is on the path alone, so it holds for any root; the fetch
 * checks the resolved path again. Paths are kept as written: no Unicode normalization (S3 keys and
 * POSIX file names are byte strings, and the NFC and NFD spellings of a name are different
 * objects).
 */
final class ImagePaths {
    /**
     * An RFC 3986 scheme followed by a colon: {@code http:}, {@code s3:}, {@code file:}, {@code
     * data:}, {@code C:}.
     */
    private static final Pattern SCHEME = Pattern.compile("^[A-Za-z][A-Za-z0-9+.-]*:");

    private ImagePaths() {}

    /**
     * Validates {@code path}; {@code where} names its place in the record for the message.
     *
     * @throws RejectedRecordException {@link RejectReason#INVALID_RECORD} for an empty path, {@link
     *     RejectReason#UNSAFE_PATH} for an absolute path, a URL scheme, a backslash, a control
     *     character or {@code ..} segments that leave the image root
     */
    static String requireSafe(String path, String where) throws RejectedRecordException {
        return requireSafe(path, where, "image");
    }

    /**
     * Validates a video's {@code path} as {@link #requireSafe(String, String)} does an image's (the
     * same root, the same rules); the messages say "video path".
     *
     * @throws RejectedRecordException as {@link #requireSafe(String, String)}
     */
    static String requireSafeVideo(String path, String where) throws RejectedRecordException {
        return requireSafe(path, where, "video");
    }

    private static String requireSafe(String path, String where, String kind)
            throws RejectedRecordException {
        if (path.isBlank()) {
            throw new RejectedRecordException(
                    RejectReason.INVALID_RECORD, where + ": empty " + kind + " path");
        }
        if (path.indexOf('\\') >= 0) {
            throw unsafe(path, where, kind, "contains a backslash");
        }
        if (path.chars().anyMatch(Character::isISOControl)) {
            throw unsafe(path, where, kind, "contains a control character");
        }
        if (SCHEME.matcher(path).find()) {
            throw unsafe(
                    path,
                    where,
                    kind,
                    "has a URL scheme or drive prefix; only paths relative to the image root are allowed");
        }
        if (path.startsWith("/")) {
            throw unsafe(
                    path,
                    where,
                    kind,
                    "is absolute; only paths relative to the image root are allowed");
        }
        int depth = 0;
        for (String segment : path.split("/", -1)) {
            if (segment.equals("..")) {
                depth--;
                if (depth < 0) {
                    throw unsafe(path, where, kind, "escapes the image root with '..'");
                }
            } else if (!segment.isEmpty() && !segment.equals(".")) {
                depth++;
            }
        }
        return path;
    }

    private static RejectedRecordException unsafe(
            String path, String where, String kind, String why) {
        return new RejectedRecordException(
                RejectReason.UNSAFE_PATH, where + ": " + kind + " path '" + path + "' " + why);
    }
}
