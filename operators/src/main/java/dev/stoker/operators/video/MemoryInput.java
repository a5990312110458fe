package dev.stoker.operators.video;

import static org.bytedeco.ffmpeg.global.avformat.AVSEEK_SIZE;
import static org.bytedeco.ffmpeg.global.avformat.avio_alloc_context;
import static org.bytedeco.ffmpeg.global.avformat.avio_context_free;
import static org.bytedeco.ffmpeg.global.avutil.AVERROR_EOF;
import static org.bytedeco.ffmpeg.global.avutil.av_free;
import static org.bytedeco.ffmpeg.global.avutil.av_malloc;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.bytedeco.ffmpeg.avformat.AVIOContext;
import org.bytedeco.ffmpeg.avformat.Read_packet_Pointer_BytePointer_int;
import org.bytedeco.ffmpeg.avformat.Seek_Pointer_long_int;
import org.bytedeco.javacpp.BytePointer;
import org.bytedeco.javacpp.LongPointer;
import org.bytedeco.javacpp.Pointer;

/**
 * A video held in a byte array, served to FFmpeg through a custom {@code AVIOContext} (read and
 * seek, no write). The two native callbacks are created once per class loader and find their input
 * by the context's opaque pointer, so any number of inputs can be open at once.
 */
final class MemoryInput implements AutoCloseable {
    /** The I/O buffer FFmpeg reads through (FFmpeg's own default size). */
    private static final int BUFFER_SIZE = 1 << 15;

    /** {@code AVSEEK_FORCE}: a hint bit of {@code whence}, ignored. */
    private static final int AVSEEK_FORCE = 0x20000;

    /** {@code AVERROR(EINVAL)} on Linux. */
    private static final int AVERROR_EINVAL = -22;

    private static final Map<Long, MemoryInput> OPEN = new ConcurrentHashMap<>();
    private static final Read READ = new Read();
    private static final Seek SEEK = new Seek();

    private final byte[] data;
    private final LongPointer opaque;
    private AVIOContext context;
    private long position;

    /**
     * @param data the file's bytes (not copied; keep them unchanged while the input is open)
     * @throws OutOfMemoryError if FFmpeg cannot allocate the context
     */
    MemoryInput(byte[] data) {
        this.data = data;
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
        long left = data.length - position;
        if (left <= 0) {
            return AVERROR_EOF;
        }
        int n = (int) Math.min(size, left);
        buf.position(0).put(data, (int) position, n);
        position += n;
        return n;
    }

    private long seek(long offset, int whence) {
        int mode = whence & ~AVSEEK_FORCE;
        if (mode == AVSEEK_SIZE) {
            return data.length;
        }
        long target =
                switch (mode) {
                    case 0 -> offset; // SEEK_SET
                    case 1 -> position + offset; // SEEK_CUR
                    case 2 -> data.length + offset; // SEEK_END
                    default -> -1;
                };
        if (target < 0 || target > data.length) {
            return AVERROR_EINVAL;
        }
        position = target;
        return target;
    }

    private static final class Read extends Read_packet_Pointer_BytePointer_int {
        @Override
        public int call(Pointer opaque, BytePointer buf, int size) {
            MemoryInput input = OPEN.get(opaque.address());
            return input == null ? AVERROR_EOF : input.read(buf, size);
        }
    }

    private static final class Seek extends Seek_Pointer_long_int {
        @Override
        public long call(Pointer opaque, long offset, int whence) {
            MemoryInput input = OPEN.get(opaque.address());
            return input == null ? AVERROR_EINVAL : input.seek(offset, whence);
        }
    }
}
