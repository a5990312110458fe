package dev.stoker.connectors.fetch;

import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.Serializable;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.StandardOpenOption;
import java.text.Normalizer;
import java.util.ArrayList;
import java.util.List;
import org.apache.flink.core.fs.FileStatus;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.fs.Path;

/**
 * Reads image and video objects by path relative to the image root through Flink's {@link
 * FileSystem} (local files now; any Flink filesystem scheme works the same way).
 *
 * <p>Paths are resolved against the root and normalised ({@code .} and {@code ..} segments; no
 * Unicode normalization: a name is looked up as written, and a not-found message names its NFC or
 * NFD spelling when that one exists); a path that would leave the root is rejected ({@link
 * RejectReason#UNSAFE_PATH}) even if the parser let it through. Objects larger than their kind's
 * limit ({@code maxObjectBytes} for images, {@code maxVideoBytes} for videos) are rejected from
 * their listed size before any byte is read. An image is read whole into memory; a video too,
 * unless it is larger than the spill threshold ({@link #readVideo}): then it is copied into a spill
 * file, on any filesystem alike (a local root's file is copied too, so that every file a record
 * carries is its own spill file, which the media stage may delete, and the file decoded is the one
 * whose size was checked).
 */
public final class ImageStore implements Serializable {
    private static final long serialVersionUID = 1L;

    /** The buffer of a copy into a spill file. */
    private static final int COPY_BUFFER_BYTES = 1 << 16;

    private final String root;
    private final long maxObjectBytes;
    private final long maxVideoBytes;

    /**
     * @param root image root URI: {@code stoker.image.root}, by default the dataset root (the
     *     directory of the JSONL files)
     * @param maxObjectBytes largest accepted image object, in bytes
     * @param maxVideoBytes largest accepted video object, in bytes, at most {@code 2^31 - 9} (one
     *     array)
     */
    public ImageStore(String root, long maxObjectBytes, long maxVideoBytes) {
        this.root = root.endsWith("/") ? root : root + "/";
        this.maxObjectBytes = maxObjectBytes;
        this.maxVideoBytes = maxVideoBytes;
    }

    /**
     * Reads the whole image at {@code relativePath}.
     *
     * @throws RejectedRecordException IMAGE_NOT_FOUND, IMAGE_TOO_LARGE, UNSAFE_PATH or FETCH_FAILED
     */
    public byte[] read(String relativePath) throws RejectedRecordException {
        return read(relativePath, Media.IMAGE);
    }

    /**
     * Reads the whole object at {@code relativePath}.
     *
     * @param media what it is: its size limit and the reasons of its rejections
     * @throws RejectedRecordException {@link Media#notFound()}, {@link Media#tooLarge()},
     *     UNSAFE_PATH or FETCH_FAILED
     */
    public byte[] read(String relativePath, Media media) throws RejectedRecordException {
        return fetch(relativePath, media, null).bytes();
    }

    /**
     * Reads the whole video at {@code relativePath}: into memory, or, when it is larger than {@code
     * spill}'s threshold ({@link SpillDirectory#spills}), copied into a new file of {@code spill},
     * which then belongs to the caller. A copy that fails leaves no file.
     *
     * @throws RejectedRecordException VIDEO_NOT_FOUND, VIDEO_FILE_TOO_LARGE, UNSAFE_PATH or
     *     FETCH_FAILED (also when the spill file cannot be written)
     */
    public FetchedObject readVideo(String relativePath, SpillDirectory spill)
            throws RejectedRecordException {
        return fetch(relativePath, Media.VIDEO, spill);
    }

    /**
     * Reads the object, to memory or (when {@code spill} is set and it is over its threshold) to a
     * spill file.
     */
    private FetchedObject fetch(String relativePath, Media media, SpillDirectory spill)
            throws RejectedRecordException {
        Path path = resolve(relativePath);
        long limit = media == Media.VIDEO ? maxVideoBytes : maxObjectBytes;
        try {
            FileSystem fs = path.getFileSystem();
            FileStatus status = fs.getFileStatus(path);
            if (status.isDir()) {
                throw new RejectedRecordException(
                        media.notFound(), "'" + relativePath + "' is a directory");
            }
            long len = status.getLen();
            if (len > limit) {
                throw new RejectedRecordException(
                        media.tooLarge(),
                        "'"
                                + relativePath
                                + "' is "
                                + len
                                + " bytes, above the "
                                + media.word()
                                + " limit of "
                                + limit);
            }
            if (spill != null && spill.spills(len)) {
                return copy(fs, path, len, spill);
            }
            try (InputStream in = fs.open(path)) {
                return FetchedObject.inMemory(in.readNBytes((int) len));
            }
        } catch (FileNotFoundException e) {
            throw new RejectedRecordException(
                    media.notFound(),
                    "'" + relativePath + "' not found under " + root + variantHint(relativePath));
        } catch (IOException e) {
            throw new RejectedRecordException(
                    RejectReason.FETCH_FAILED, "reading '" + relativePath + "' failed: " + e, e);
        }
    }

    /**
     * Copies the first {@code len} bytes of {@code path} (its size when it was checked; what a read
     * into memory takes too) into a new file of {@code spill}; deletes that file if the copy fails.
     */
    private static FetchedObject copy(FileSystem fs, Path path, long len, SpillDirectory spill)
            throws IOException {
        java.nio.file.Path file = spill.newFile();
        boolean done = false;
        try (InputStream in = fs.open(path);
                OutputStream out = Files.newOutputStream(file, StandardOpenOption.CREATE_NEW)) {
            byte[] buffer = new byte[COPY_BUFFER_BYTES];
            long copied = 0;
            for (int n; copied < len; copied += n) {
                n = in.read(buffer, 0, (int) Math.min(buffer.length, len - copied));
                if (n < 0) {
                    break;
                }
                out.write(buffer, 0, n);
            }
            done = true;
            return FetchedObject.spilled(file, copied);
        } finally {
            if (!done) {
                SpillDirectory.deleteQuietly(file);
            }
        }
    }

    /**
     * For a path not found: names its NFC or NFD spelling when that one exists, else empty. Costs a
     * lookup only for names whose spellings differ (never for ASCII).
     */
    private String variantHint(String relativePath) {
        for (String variant : normalizationVariants(relativePath)) {
            try {
                Path path = new Path(resolveUnderRoot(root, variant));
                if (path.getFileSystem().exists(path)) {
                    return normalizationHint(variant);
                }
            } catch (RejectedRecordException | IOException e) {
                // no hint
            }
        }
        return "";
    }

    /** The NFC and NFD spellings of {@code path} that differ from it (none for ASCII). */
    static List<String> normalizationVariants(String path) {
        List<String> variants = new ArrayList<>(2);
        for (Normalizer.Form form :
                new Normalizer.Form[] {Normalizer.Form.NFC, Normalizer.Form.NFD}) {
            String variant = Normalizer.normalize(path, form);
            if (!variant.equals(path) && !variants.contains(variant)) {
                variants.add(variant);
            }
        }
        return variants;
    }

    /** The not-found message's hint that {@code variant}, another spelling, exists. */
    static String normalizationHint(String variant) {
        return "; an object named '"
                + variant
                + "' (the same name in another Unicode normalization form) exists: paths are"
                + " matched as written, without Unicode normalization";
    }

    private Path resolve(String relativePath) throws RejectedRecordException {
        URI resolved = resolveUnderRoot(root, relativePath);
        rejectSymlinkEscape(resolved, relativePath);
        return new Path(resolved);
    }

    /**
     * On a local filesystem, rejects a path that resolves through a symbolic link to a file outside
     * the image root (compared as real paths, so a root that is itself a link is fine).
     */
    private void rejectSymlinkEscape(URI resolved, String relativePath)
            throws RejectedRecordException {
        String scheme = resolved.getScheme();
        if (scheme != null && !scheme.equals("file")) {
            return;
        }
        java.nio.file.Path file = java.nio.file.Path.of(resolved.getPath());
        if (!java.nio.file.Files.exists(file)) {
            return; // reported as IMAGE_NOT_FOUND by read()
        }
        try {
            java.nio.file.Path realRoot =
                    java.nio.file.Path.of(URI.create(root).getPath()).toRealPath();
            if (!file.toRealPath().startsWith(realRoot)) {
                throw new RejectedRecordException(
                        RejectReason.UNSAFE_PATH,
                        "image path '"
                                + relativePath
                                + "' is a symbolic link to a file outside the image root "
                                + root);
            }
        } catch (IOException e) {
            throw new RejectedRecordException(
                    RejectReason.FETCH_FAILED, "resolving '" + relativePath + "' failed: " + e, e);
        }
    }

    /**
     * Resolves {@code relativePath} against {@code root} (a directory URI ending in {@code /}) and
     * normalises it; the result is guaranteed to have the root's scheme and authority (bucket) and
     * to lie under the root's path.
     *
     * @throws RejectedRecordException UNSAFE_PATH for anything that would leave the root
     */
    static URI resolveUnderRoot(String root, String relativePath) throws RejectedRecordException {
        URI rootUri = URI.create(root);
        URI resolved;
        try {
            resolved = rootUri.resolve(new URI(null, null, relativePath, null)).normalize();
        } catch (java.net.URISyntaxException | IllegalArgumentException e) {
            throw new RejectedRecordException(
                    RejectReason.UNSAFE_PATH,
                    "image path '" + relativePath + "' is not a valid relative path");
        }
        if (resolved.isOpaque()
                || resolved.getPath() == null
                || !resolved.getPath().startsWith(rootUri.normalize().getPath())
                || !java.util.Objects.equals(resolved.getScheme(), rootUri.getScheme())
                || !java.util.Objects.equals(resolved.getAuthority(), rootUri.getAuthority())) {
            throw new RejectedRecordException(
                    RejectReason.UNSAFE_PATH,
                    "image path '" + relativePath + "' leaves the image root " + root);
        }
        return resolved;
    }
}
