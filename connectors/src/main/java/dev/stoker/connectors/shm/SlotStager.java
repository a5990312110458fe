package dev.stoker.connectors.shm;

import dev.stoker.connectors.protocol.ShmLayout;
import dev.stoker.operators.model.SlotResult;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.channels.Channels;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.EnumSet;
import org.apache.flink.api.common.serialization.SerializerConfigImpl;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.core.memory.DataInputViewStreamWrapper;
import org.apache.flink.core.memory.DataOutputViewStreamWrapper;

/**
 * Keeps samples that wait for the rest of their batch in node-local files instead of Flink state,
 * so checkpoints stay small whatever the image size.
 *
 * <p>A staged slot is the {@link SlotResult} in Flink's own serialization (the sample's arrays in
 * bulk, {@link dev.stoker.operators.model.TokenizedSampleSerializer}), written to a temporary name
 * and renamed, so a staged file is always complete. Staged files survive a TaskManager failure on
 * the same node; since a slot's content is a pure function of the plan, writing it again after a
 * restore replaces it with identical bytes.
 */
final class SlotStager {
    private final ShmLayout layout;
    private final TypeSerializer<SlotResult> serializer =
            TypeInformation.of(SlotResult.class).createSerializer(new SerializerConfigImpl());

    SlotStager(ShmLayout layout) {
        this.layout = layout;
    }

    /** Stages the slot; returns the bytes written. */
    long stage(long step, int rank, int slot, SlotResult result) throws IOException {
        Path target = layout.stagedSlot(step, rank, slot);
        ShmLayout.createPrivateDirectories(target.getParent());
        Path tmp = target.resolveSibling("." + target.getFileName() + ".tmp");
        try (FileChannel channel =
                        FileChannel.open(
                                tmp,
                                EnumSet.of(
                                        StandardOpenOption.CREATE,
                                        StandardOpenOption.TRUNCATE_EXISTING,
                                        StandardOpenOption.WRITE),
                                ShmLayout.FILE_PERMISSIONS);
                OutputStream out =
                        new BufferedOutputStream(Channels.newOutputStream(channel), 1 << 16)) {
            serializer.serialize(result, new DataOutputViewStreamWrapper(out));
            out.flush();
        }
        ShmLayout.publish(tmp, target);
        return Files.size(target);
    }

    boolean isStaged(long step, int rank, int slot) {
        return Files.exists(layout.stagedSlot(step, rank, slot));
    }

    SlotResult read(long step, int rank, int slot) throws IOException {
        try (InputStream in =
                new BufferedInputStream(
                        Files.newInputStream(layout.stagedSlot(step, rank, slot)), 1 << 16)) {
            return serializer.deserialize(new DataInputViewStreamWrapper(in));
        }
    }

    void remove(long step, int rank, int slot) throws IOException {
        Files.deleteIfExists(layout.stagedSlot(step, rank, slot));
    }
}
