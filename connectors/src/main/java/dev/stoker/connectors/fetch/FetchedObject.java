package dev.stoker.connectors.fetch;

import java.nio.file.Path;

/**
 * One fetched image or video: its bytes in memory, or the local spill file that holds them (a video
 * larger than the spill threshold, see {@link SpillDirectory}).
 *
 * @param bytes the object's bytes; null when it is in {@code file}
 * @param file the spill file holding the object; null when it is in {@code bytes}. It belongs to
 *     whoever holds this: delete it when done
 * @param size the object's size in bytes
 */
public record FetchedObject(byte[] bytes, Path file, long size) {
    /** An object held in memory. */
    public static FetchedObject inMemory(byte[] bytes) {
        return new FetchedObject(bytes, null, bytes.length);
    }

    /** An object held in the spill file {@code file}, of {@code size} bytes. */
    public static FetchedObject spilled(Path file, long size) {
        return new FetchedObject(null, file, size);
    }
}
