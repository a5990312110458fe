package dev.stoker.connectors.source;

import java.io.IOException;
import org.apache.flink.core.memory.DataInputDeserializer;

/**
 * The checks every checkpoint-format reader of the source makes, worded once: the format version is
 * one this Stoker reads, and the bytes hold exactly one value of it (nothing after its fields).
 */
final class CheckpointFormat {
    private CheckpointFormat() {}

    /**
     * @param what the state's name in the message, e.g. {@code "StepSplit"}
     * @throws IOException naming both versions if {@code version} is not {@code supported}
     */
    static void requireVersion(String what, int version, int supported) throws IOException {
        if (version != supported) {
            throw new IOException(
                    "unsupported "
                            + what
                            + " checkpoint format version "
                            + version
                            + " (this Stoker reads version "
                            + supported
                            + "): restore with the Stoker that wrote it, or start the job afresh");
        }
    }

    /**
     * @throws IOException if {@code in} has bytes left after the value's fields
     */
    static void requireFullyRead(String what, int version, DataInputDeserializer in, int length)
            throws IOException {
        if (in.available() > 0) {
            throw new IOException(
                    what
                            + " checkpoint of format version "
                            + version
                            + " has "
                            + in.available()
                            + " bytes after its fields ("
                            + length
                            + " bytes in all): not written by this format");
        }
    }
}
