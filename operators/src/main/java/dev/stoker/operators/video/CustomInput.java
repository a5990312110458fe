package dev.stoker.operators.video;

import static org.bytedeco.ffmpeg.global.avformat.AVSEEK_SIZE;
import static org.bytedeco.ffmpeg.global.avformat.avio_alloc_context;
import static org.bytedeco.ffmpeg.global.avformat.avio_context_free;
import static org.bytedeco.ffmpeg.global.avutil.AVERROR_EOF;
import static org.bytedeco.ffmpeg.global.avutil.av_free;
import static org.bytedeco.ffmpeg.global.avutil.av_malloc;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.bytedeco.ffmpeg.avformat.AVIOContext;
import org.bytedeco.ffmpeg.avformat.Read_packet_Pointer_BytePointer_int;
import org.bytedeco.ffmpeg.avformat.Seek_Pointer_long_int;
import org.bytedeco.javacpp.BytePointer;
import org.bytedeco.javacpp.LongPointer;
import org.bytedeco.javacpp.Pointer;

/**
 * A video served to FFmpeg through a custom {@code AVIOContext} (read and seek, no write), from a
 * byte array or from an open file channel: FFmpeg sees the same bytes, in the same reads, either
 * way, and probes the container from the content alone (no file name), as PyAV does for a {@code
 * BytesIO}. The two native callbacks are created once per class loader and find their input by the
 * context's opaque pointer, so any number of inputs can be open at once.
 */
final class CustomInput implements AutoCloseable {
    /** The I/O buffer FFmpeg reads through (FFmpeg's own default size). */
    private static final int BUFFER_SIZE = 1 << 15;

    /** {@code AVSEEK_FORCE}: a hint bit of {@code whence}, ignored. */
    private static final int AVSEEK_FORCE = 0x20000;

    /** {@code AVERROR(EINVAL)} on Linux. */
    private static final int AVERROR_EINVAL = -22;

    /** {@code AVERROR(EIO)} on Linux. */
    private static final int AVERROR_EIO = -5;

    private static final Map<Long, CustomInput> OPEN = new ConcurrentHashMap<>();
    private static final Read READ = new Read();
    private static final Seek SEEK = new Seek();

    /** The bytes, for an input from memory; null for a file. */
    private final byte[] data;

    /** The file, for an input from a file; null for memory. Not closed here. */
    private final FileChannel file;

    private final long size;
    private final LongPointer opaque;
    private AVIOContext context;
    private long position;

    /**
     * An input from memory.
     *
     * @param data the file's bytes (not copied; keep them unchanged while the input is open)
     * @throws OutOfMemoryError if FFmpeg cannot allocate the context
     */
    CustomInput(byte[] data) {
        this(data, null, data.length);
    }

    /**
     * An input from a file, read with positional reads (the channel's own position is not used).
     *
     * @param file the open file (not closed by {@link #close()}; keep it unchanged while the input
     *     is open)
     * @param size its size in bytes
     * @throws OutOfMemoryError if FFmpeg cannot allocate the context
     */
    CustomInput(FileChannel file, long size) {
        this(null, file, size);
    }

    private CustomInput(byte[] data, FileChannel file, long size) {
        this.data = data;
        this.file = file;
        this.size = size;
        this.opaque = new LongPointer(1);
        OPEN.put(opaque.address(), this);
        BytePointer buffer = new BytePointer(av_malloc(BUFFER_SIZE));
        if (buffer.isNull()) {
            close();
            throw new OutOfMemoryError("FFmpeg could not allocate an I/O buffer");
        }
        context = avio_alloc_context(buffer, BUFFER_SIZE, 0, opaque, READ, null, SEEK);
        if (context == null || context.isNull()) {
            av_free(buffer);
            context = null;
            close();
            throw new OutOfMemoryError("FFmpeg could not allocate an I/O context");
        }
    }

    /** The context to set as the format context's {@code pb} before {@code avformat_open_input}. */
    AVIOContext context() {
        return context;
    }

    /** Frees the context and its buffer; call after {@code avformat_close_input}. */
    @Override
    public void close() {
        if (context != null) {
            // FFmpeg may have replaced the buffer it was given
            av_free(context.buffer());
            avio_context_free(context);
            context = null;
        }
        OPEN.remove(opaque.address());
        opaque.close();
    }

    private int read(BytePointer buf, int size) {
        long left = this.size - position;
        if (left <= 0) {
            return AVERROR_EOF;
        }
        int n = (int) Math.min(size, left);
        if (data != null) {
            buf.position(0).put(data, (int) position, n);
        } else if (!readFile(buf, n)) {
            return AVERROR_EIO;
        }
        position += n;
        return n;
    }

    /** Reads {@code n} bytes at {@link #position} into {@code buf}; false on a read error. */
    private boolean readFile(BytePointer buf, int n) {
        ByteBuffer target = buf.position(0).limit(n).asBuffer();
        try {
            while (target.hasRemaining()) {
                if (file.read(target, position + target.position()) < 0) {
                    return false; // shorter than its size: changed while open
                }
            }
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    private long seek(long offset, int whence) {
        int mode = whence & ~AVSEEK_FORCE;
        if (mode == AVSEEK_SIZE) {
            return size;
        }
        long target =
                switch (mode) {
                    case 0 -> offset; // SEEK_SET
                    case 1 -> position + offset; // SEEK_CUR
                    case 2 -> size + offset; // SEEK_END
                    default -> -1;
                };
        if (target < 0 || target > size) {
            return AVERROR_EINVAL;
        }
        position = target;
        return target;
    }

    private static final class Read extends Read_packet_Pointer_BytePointer_int {
        @Override
        public int call(Pointer opaque, BytePointer buf, int size) {
            CustomInput input = OPEN.get(opaque.address());
            return input == null ? AVERROR_EOF : input.read(buf, size);
        }
    }

    private static final class Seek extends Seek_Pointer_long_int {
        @Override
        public long call(Pointer opaque, long offset, int whence) {
            CustomInput input = OPEN.get(opaque.address());
            return input == null ? AVERROR_EINVAL : input.seek(offset, whence);
        }
    }
}
