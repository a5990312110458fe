package dev.stoker.connectors.shm;

import dev.stoker.connectors.protocol.ShmLayout;
import dev.stoker.operators.model.TrainingBatch;
import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.EnumSet;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowFileWriter;

/** Writes one batch as an Arrow IPC file under a temporary name, then publishes it by rename. */
final class BatchFileWriter {
    private final ShmLayout layout;
    private final ArrowBatchEncoder encoder;

    BatchFileWriter(ShmLayout layout, ArrowBatchEncoder encoder) {
        this.layout = layout;
        this.encoder = encoder;
    }

    /** Writes and publishes {@code batch}; returns the file size in bytes. */
    long write(TrainingBatch batch, BufferAllocator allocator) throws IOException {
        ShmLayout.createPrivateDirectories(layout.rankDir(batch.rank));
        Path tmp = layout.tempBatchFile(batch.step, batch.rank);
        long size;
        try (VectorSchemaRoot root = encoder.encode(batch, allocator);
                FileChannel channel =
                        FileChannel.open(
                                tmp,
                                EnumSet.of(
                                        StandardOpenOption.CREATE,
                                        StandardOpenOption.TRUNCATE_EXISTING,
                                        StandardOpenOption.WRITE),
                                ShmLayout.FILE_PERMISSIONS);
                ArrowFileWriter writer = new ArrowFileWriter(root, null, channel)) {
            writer.start();
            writer.writeBatch();
            writer.end();
            size = channel.size();
        }
        ShmLayout.publish(tmp, layout.batchFile(batch.step, batch.rank));
        return size;
    }
}
