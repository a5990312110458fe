package dev.stoker.operators.video;

import static org.bytedeco.ffmpeg.global.avcodec.AV_PKT_DATA_DISPLAYMATRIX;
import static org.bytedeco.ffmpeg.global.avcodec.AV_PKT_FLAG_KEY;
import static org.bytedeco.ffmpeg.global.avcodec.av_packet_alloc;
import static org.bytedeco.ffmpeg.global.avcodec.av_packet_free;
import static org.bytedeco.ffmpeg.global.avcodec.av_packet_side_data_get;
import static org.bytedeco.ffmpeg.global.avcodec.av_packet_unref;
import static org.bytedeco.ffmpeg.global.avcodec.avcodec_alloc_context3;
import static org.bytedeco.ffmpeg.global.avcodec.avcodec_find_decoder;
import static org.bytedeco.ffmpeg.global.avcodec.avcodec_flush_buffers;
import static org.bytedeco.ffmpeg.global.avcodec.avcodec_free_context;
import static org.bytedeco.ffmpeg.global.avcodec.avcodec_get_name;
import static org.bytedeco.ffmpeg.global.avcodec.avcodec_open2;
import static org.bytedeco.ffmpeg.global.avcodec.avcodec_parameters_to_context;
import static org.bytedeco.ffmpeg.global.avcodec.avcodec_receive_frame;
import static org.bytedeco.ffmpeg.global.avcodec.avcodec_send_packet;
import static org.bytedeco.ffmpeg.global.avformat.AVPROBE_PADDING_SIZE;
import static org.bytedeco.ffmpeg.global.avformat.AVSEEK_FLAG_BACKWARD;
import static org.bytedeco.ffmpeg.global.avformat.av_probe_input_format2;
import static org.bytedeco.ffmpeg.global.avformat.av_read_frame;
import static org.bytedeco.ffmpeg.global.avformat.av_seek_frame;
import static org.bytedeco.ffmpeg.global.avformat.avformat_alloc_context;
import static org.bytedeco.ffmpeg.global.avformat.avformat_close_input;
import static org.bytedeco.ffmpeg.global.avformat.avformat_find_stream_info;
import static org.bytedeco.ffmpeg.global.avformat.avformat_open_input;
import static org.bytedeco.ffmpeg.global.avutil.AVERROR_EOF;
import static org.bytedeco.ffmpeg.global.avutil.AVMEDIA_TYPE_VIDEO;
import static org.bytedeco.ffmpeg.global.avutil.AV_LOG_QUIET;
import static org.bytedeco.ffmpeg.global.avutil.AV_PIX_FMT_RGB24;
import static org.bytedeco.ffmpeg.global.avutil.av_dict_free;
import static org.bytedeco.ffmpeg.global.avutil.av_dict_set;
import static org.bytedeco.ffmpeg.global.avutil.av_display_rotation_get;
import static org.bytedeco.ffmpeg.global.avutil.av_frame_alloc;
import static org.bytedeco.ffmpeg.global.avutil.av_frame_free;
import static org.bytedeco.ffmpeg.global.avutil.av_frame_unref;
import static org.bytedeco.ffmpeg.global.avutil.av_freep;
import static org.bytedeco.ffmpeg.global.avutil.av_get_pix_fmt_name;
import static org.bytedeco.ffmpeg.global.avutil.av_image_alloc;
import static org.bytedeco.ffmpeg.global.avutil.av_log_set_level;
import static org.bytedeco.ffmpeg.global.avutil.av_pix_fmt_desc_get;
import static org.bytedeco.ffmpeg.global.avutil.av_strerror;
import static org.bytedeco.ffmpeg.global.swscale.SWS_BILINEAR;
import static org.bytedeco.ffmpeg.global.swscale.sws_freeContext;
import static org.bytedeco.ffmpeg.global.swscale.sws_getCachedContext;
import static org.bytedeco.ffmpeg.global.swscale.sws_scale;

import dev.stoker.operators.image.RgbImage;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.BitSet;
import java.util.List;
import org.bytedeco.ffmpeg.avcodec.AVCodec;
import org.bytedeco.ffmpeg.avcodec.AVCodecContext;
import org.bytedeco.ffmpeg.avcodec.AVCodecParameters;
import org.bytedeco.ffmpeg.avcodec.AVPacket;
import org.bytedeco.ffmpeg.avcodec.AVPacketSideData;
import org.bytedeco.ffmpeg.avformat.AVFormatContext;
import org.bytedeco.ffmpeg.avformat.AVInputFormat;
import org.bytedeco.ffmpeg.avformat.AVProbeData;
import org.bytedeco.ffmpeg.avformat.AVStream;
import org.bytedeco.ffmpeg.avutil.AVDictionary;
import org.bytedeco.ffmpeg.avutil.AVFrame;
import org.bytedeco.ffmpeg.avutil.AVPixFmtDescriptor;
import org.bytedeco.ffmpeg.avutil.AVRational;
import org.bytedeco.ffmpeg.swscale.SwsContext;
import org.bytedeco.javacpp.BytePointer;
import org.bytedeco.javacpp.DoublePointer;
import org.bytedeco.javacpp.IntPointer;
import org.bytedeco.javacpp.PointerPointer;

/**
 * Decodes the frames at given indices of a video file (or a video in memory, or a file read as if
 * it were in memory: {@link #openAsBytes}) with FFmpeg 8.1 (JavaCPP's presets), to the same frames
 * and the same RGB bytes as transformers 5.23.0's PyAV loader ({@code transformers/video_utils.py},
 * {@code read_video_pyav}, with PyAV 16.0.1, FFmpeg 8.0).
 *
 * <p>What it does, each step as the reference does it:
 *
 * <ul>
 *   <li>Open: {@code avformat_open_input} on the file's path (so FFmpeg probes with the file name,
 *       as PyAV given a path does) with {@code AVFMT_FLAG_GENPTS} (PyAV sets it), then {@code
 *       avformat_find_stream_info} with the default probe size and analyse duration (the average
 *       frame rate comes from it). The video is the first stream whose type is video (PyAV's {@code
 *       container.streams.video[0]}), decoded by {@code avcodec_find_decoder}'s decoder for its
 *       codec id. {@link #metadata()} is read from the container alone: no frame is decoded to
 *       count frames (see {@link VideoMetadata#totalFrames()}). Where the container stores no frame
 *       count (Matroska, WebM) the stream's packets are counted in one demux pass, where the
 *       reference takes the count as 0 and fails: Stoker's one deviation here ({@code
 *       docs/parity.md}).
 *   <li>Frame index: the position of a frame in the decoder's output order from the start of the
 *       file (PyAV's {@code enumerate(container.decode(video=0))}) after {@code av_seek_frame(ctx,
 *       -1, 0, AVSEEK_FLAG_BACKWARD)} (the reference's {@code container.seek(0)}). The reference
 *       decodes sequentially from there; it stops once the frame after the last requested index is
 *       out (its {@code if i > end_index: break}), or at the end of the stream, after draining the
 *       decoder with an empty packet (PyAV's flush packets). {@link #sequential()} decodes exactly
 *       so.
 *   <li>Skipping to keyframes (the default): where the sampled frames lie groups of pictures apart,
 *       the frames between them need not be decoded. A demux pass without decoding reads each
 *       packet's timestamp and keyframe flag ({@link PacketScan}); a frame's index is then the rank
 *       of its timestamp, which for a clean index (the first packet a keyframe, every packet with
 *       its own timestamp, as many packets as the container's frame count) is its position in the
 *       reference's output order. Each sampled frame is decoded from its own group's keyframe (the
 *       group before for a leading frame of an open GOP, which references it), the decoder flushed
 *       before each such start; packets before it are read but not decoded, and each decoded frame
 *       is counted by its timestamp. This is used only when it leaves out at least a quarter of the
 *       packets; otherwise, or when the index is not clean, the decode is sequential. Frames are
 *       identical to a sequential decode's ({@code VideoDecoderTest}, also on closed, open-GOP,
 *       HEVC CRA and VP9 streams). If a frame still comes out where the index does not put it, the
 *       decode starts again sequentially when nothing was handed over yet, and is {@code
 *       CORRUPT_VIDEO} otherwise. A damaged packet in a skipped stretch is not decoded, so it is
 *       not noticed where the reference fails.
 *   <li>Colour conversion, only for the requested frames: PyAV's {@code
 *       VideoFrame.to_ndarray(format="rgb24")} ({@code av/video/reformatter.pyx}, {@code
 *       VideoReformatter._reformat}) calls {@code sws_getCachedContext(w, h, src_fmt, w, h, RGB24,
 *       SWS_BILINEAR)} and {@code sws_scale} with swscale's default colourspace details: it passes
 *       the frame's colourspace as both source and destination and range "unspecified" for both, so
 *       it never calls {@code sws_setColorspaceDetails}. The same calls are made here: BT.601
 *       coefficients whatever the stream's colour tags say, limited range unless the pixel format
 *       is a full-range {@code yuvj*} one. A frame already in RGB24 is copied as it is (PyAV's
 *       shortcut).
 *   <li>Rotation: the container's display matrix is reported ({@link VideoMetadata#rotation()}) but
 *       not applied, as neither PyAV's {@code to_ndarray} nor transformers applies it.
 *   <li>Errors end the decode as they end the reference's: a failed seek to the start, a read error
 *       other than end-of-file, an error from {@code avcodec_send_packet} or {@code
 *       avcodec_receive_frame}, and sampled frames of different sizes (the reference's {@code
 *       np.stack} fails). Requested indices past the last decoded frame (a container that
 *       over-reports its frame count) are not an error: like the reference, fewer frames come back.
 * </ul>
 *
 * <p>Errors are {@link RejectedRecordException}s: {@link RejectReason#UNSUPPORTED_VIDEO} (no
 * container FFmpeg recognises, no video stream, no decoder), {@link RejectReason#CORRUPT_VIDEO}
 * (empty, truncated, damaged), {@link RejectReason#VIDEO_TOO_MANY_PIXELS} and {@link
 * RejectReason#VIDEO_TOO_MANY_FRAMES} ({@link VideoLimits}, checked before anything of that size is
 * allocated). The decoder uses one thread (slice threading, as PyAV asks for; FFmpeg's threading
 * does not change the output). FFmpeg's own log is silenced (level quiet) when this class loads:
 * errors are reported through the exceptions.
 *
 * <p>Native resources (format and codec contexts, packet, frame, swscale context, RGB buffer) are
 * freed by {@link #close()}; use try-with-resources. Not thread-safe: one instance per thread.
 */
public final class VideoDecoder implements AutoCloseable {
    /** {@code AVERROR(EAGAIN)} on Linux. */
    private static final int AVERROR_EAGAIN = -11;

    /** {@code AVFMT_FLAG_GENPTS} (libavformat/avformat.h; the presets do not map it). */
    private static final int AVFMT_FLAG_GENPTS = 0x0001;

    /** {@code FF_THREAD_SLICE}: what PyAV sets as the codec context's thread type. */
    private static final int FF_THREAD_SLICE = 2;

    /** How much of a file that FFmpeg cannot open is probed to tell damaged from unknown. */
    private static final int PROBE_BYTES = 4096;

    /** The probe score over which an unopenable file counts as damaged rather than unknown. */
    private static final int PROBE_MIN_SCORE = 25;

    /** The row alignment of PyAV's RGB frame buffer ({@code av_image_alloc(..., 16)}). */
    private static final int RGB_ALIGN = 16;

    static {
        av_log_set_level(AV_LOG_QUIET);
    }

    /** Receives the decoded frames of {@link #decode(int[], FrameConsumer)}, in index order. */
    @FunctionalInterface
    public interface FrameConsumer {
        /**
         * @param index the frame's index (position in decode output order)
         * @param frame the frame as packed RGB24, a fresh array the consumer may keep
         * @throws RejectedRecordException to end the decode with that rejection
         */
        void accept(int index, RgbImage frame) throws RejectedRecordException;
    }

    /**
     * The sampled frames of one {@link #decode(int[])} call.
     *
     * @param indices the index of each frame, ascending; fewer than requested when the stream ends
     *     before some requested index
     * @param frames the frames, packed RGB24, all of one size
     */
    public record DecodedFrames(int[] indices, List<RgbImage> frames) {}

    private final String source;
    private final VideoLimits limits;
    private final int streamIndex;
    private final VideoMetadata metadata;
    private AVFormatContext format;

    /**
     * The custom input of {@link #open(byte[], String, VideoLimits)} and {@link #openAsBytes(Path,
     * String, VideoLimits)}; null for {@link #open(Path, VideoLimits)}.
     */
    private CustomInput input;

    /** The file {@link #openAsBytes(Path, String, VideoLimits)} reads; null otherwise. */
    private FileChannel channel;

    private AVCodecContext codec;

    /** The container's stored frame count ({@code nb_frames}; 0 when it stores none). */
    private int storedFrames;

    /** The packet index, read on first use ({@link #packets()}). */
    private PacketScan packetScan;

    /**
     * Whether {@link #decode(int[], FrameConsumer)} may skip to keyframes ({@link #sequential()}).
     */
    private boolean skipToKeyframes = true;

    /** Packets the last decode left out by skipping to keyframes. */
    private int skippedPackets;

    private AVPacket packet;
    private AVFrame frame;
    private SwsContext sws;
    private PointerPointer<BytePointer> rgbData;
    private IntPointer rgbLinesize;
    private int rgbWidth;
    private int rgbHeight;

    /**
     * Where a video comes from: a file FFmpeg opens by name ({@code named}), bytes in memory, or a
     * file read as those bytes would be ({@code unnamed}); exactly one is set.
     */
    private record Source(Path named, byte[] bytes, Path unnamed) {}

    private VideoDecoder(String source, Source from, VideoLimits limits)
            throws RejectedRecordException {
        this.source = source;
        this.limits = limits;
        boolean done = false;
        try {
            openInput(from);
            this.streamIndex = firstVideoStream();
            AVStream stream = format.streams(streamIndex);
            VideoMetadata stored = openDecoder(stream);
            packet = av_packet_alloc();
            frame = av_frame_alloc();
            if (packet == null || frame == null) {
                throw new OutOfMemoryError("FFmpeg could not allocate a packet or frame");
            }
            this.storedFrames = stored.totalFrames();
            this.metadata = stored.totalFrames() == 0 ? withCountedFrames(stored) : stored;
            done = true;
        } finally {
            if (!done) {
                close();
            }
        }
    }

    /**
     * Opens {@code file} and reads its metadata.
     *
     * @param file a local video file (e.g. the fetch stage's spill file)
     * @param limits the pixel and frame limits
     * @return an open decoder; close it
     * @throws RejectedRecordException UNSUPPORTED_VIDEO, CORRUPT_VIDEO, VIDEO_TOO_MANY_PIXELS or
     *     VIDEO_TOO_MANY_FRAMES, naming the reason
     */
    public static VideoDecoder open(Path file, VideoLimits limits) throws RejectedRecordException {
        if (!Files.isRegularFile(file)) {
            throw new RejectedRecordException(
                    RejectReason.CORRUPT_VIDEO, "video file not found: " + file);
        }
        try {
            if (Files.size(file) == 0) {
                throw new RejectedRecordException(
                        RejectReason.CORRUPT_VIDEO, "empty video file (0 bytes): " + file);
            }
        } catch (java.io.IOException e) {
            throw new RejectedRecordException(
                    RejectReason.CORRUPT_VIDEO, "cannot read video file " + file, e);
        }
        String name = file.getFileName() != null ? file.getFileName().toString() : file.toString();
        return new VideoDecoder(name, new Source(file, null, null), limits);
    }

    /**
     * Opens a video held in memory (read through a custom {@code AVIOContext}, as PyAV reads a
     * {@code BytesIO}: FFmpeg then probes the container from the content alone, without a file
     * name) and reads its metadata.
     *
     * @param bytes the file's bytes, not copied: keep them unchanged until {@link #close()}
     * @param name what error messages call the video (e.g. its path in the dataset)
     * @param limits the pixel and frame limits
     * @return an open decoder; close it
     * @throws RejectedRecordException UNSUPPORTED_VIDEO, CORRUPT_VIDEO, VIDEO_TOO_MANY_PIXELS or
     *     VIDEO_TOO_MANY_FRAMES, naming the reason
     */
    public static VideoDecoder open(byte[] bytes, String name, VideoLimits limits)
            throws RejectedRecordException {
        if (bytes.length == 0) {
            throw new RejectedRecordException(
                    RejectReason.CORRUPT_VIDEO, "empty video file (0 bytes): " + name);
        }
        return new VideoDecoder(name, new Source(null, bytes, null), limits);
    }

    /**
     * Opens a video file as {@link #open(byte[], String, VideoLimits)} opens the same bytes in
     * memory, without holding them in memory: FFmpeg reads the file through the same custom {@code
     * AVIOContext}, in the same reads, and probes the container from the content alone (the file's
     * name plays no part), so the metadata, the frames and every rejection are the same as from
     * memory. For the fetch stage's spill files, whose names say nothing about their content.
     *
     * @param file a local video file, not modified; keep it unchanged until {@link #close()}
     * @param name what error messages call the video (e.g. its path in the dataset)
     * @param limits the pixel and frame limits
     * @return an open decoder; close it
     * @throws RejectedRecordException UNSUPPORTED_VIDEO, CORRUPT_VIDEO (also when the file cannot
     *     be read), VIDEO_TOO_MANY_PIXELS or VIDEO_TOO_MANY_FRAMES, naming the reason
     */
    public static VideoDecoder openAsBytes(Path file, String name, VideoLimits limits)
            throws RejectedRecordException {
        return new VideoDecoder(name, new Source(null, null, file), limits);
    }

    /**
     * Makes every later decode sequential from the start, as the reference decodes, never skipping
     * to keyframes (for comparing the two).
     *
     * @return this decoder
     */
    public VideoDecoder sequential() {
        skipToKeyframes = false;
        return this;
    }

    /**
     * How many packets the last decode did not send to the decoder because it skipped to a keyframe
     * (0 for a sequential decode).
     */
    public int skippedPackets() {
        return skippedPackets;
    }

    /** The container's description of the video stream, as the reference reads it. */
    public VideoMetadata metadata() {
        return metadata;
    }

    /**
     * Decodes the frames at {@code indices} into a list (see the class comment for how frames are
     * counted). Holds all sampled frames in memory at once; {@link #decode(int[], FrameConsumer)}
     * streams them.
     *
     * @param indices frame indices in ascending order, as a frame-index rule gives them ({@link
     *     FrameSampling}); duplicates and negative values are ignored, as the reference's {@code i
     *     in indices} does
     * @return the frames found, in index order
     * @throws RejectedRecordException CORRUPT_VIDEO, VIDEO_TOO_MANY_PIXELS or VIDEO_TOO_MANY_FRAMES
     * @throws IllegalArgumentException if {@code indices} is empty
     */
    public DecodedFrames decode(int[] indices) throws RejectedRecordException {
        List<RgbImage> frames = new ArrayList<>();
        List<Integer> found = new ArrayList<>();
        decode(
                indices,
                (index, image) -> {
                    found.add(index);
                    frames.add(image);
                });
        return new DecodedFrames(found.stream().mapToInt(Integer::intValue).toArray(), frames);
    }

    /**
     * Decodes the frames at {@code indices} and hands each to {@code consumer} as soon as it is
     * converted.
     *
     * @param indices frame indices in ascending order; the last one ends the decode (the
     *     reference's {@code end_index = indices[-1]}); duplicates and negative values are ignored
     * @param consumer receives each frame found, in index order
     * @return how many frames were handed over (fewer than requested when the stream ends early)
     * @throws RejectedRecordException CORRUPT_VIDEO, VIDEO_TOO_MANY_PIXELS, VIDEO_TOO_MANY_FRAMES,
     *     or what {@code consumer} throws
     * @throws IllegalArgumentException if {@code indices} is empty
     */
    public int decode(int[] indices, FrameConsumer consumer) throws RejectedRecordException {
        if (indices.length == 0) {
            throw new IllegalArgumentException("no frame indices to decode");
        }
        int end = indices[indices.length - 1];
        if (end >= limits.maxFrames()) {
            throw new RejectedRecordException(
                    RejectReason.VIDEO_TOO_MANY_FRAMES,
                    "frame index "
                            + end
                            + " is past the frame limit "
                            + limits.maxFrames()
                            + " in "
                            + source);
        }
        BitSet wanted = new BitSet(end + 1);
        for (int index : indices) {
            if (index >= 0 && index <= end) {
                wanted.set(index);
            }
        }
        skippedPackets = 0;
        PacketScan.Plan plan =
                skipToKeyframes ? packets().plan(wanted.stream().toArray(), storedFrames) : null;
        if (plan != null) {
            Pass pass = new Pass(wanted, end, consumer);
            try {
                return decodeSkipping(plan, pass);
            } catch (IndexMismatch e) {
                if (pass.delivered > 0) {
                    throw corrupt(
                            "after skipping to a keyframe, "
                                    + e.getMessage()
                                    + ", so the frames cannot be counted as the reference counts"
                                    + " them",
                            null);
                }
                skippedPackets = 0; // nothing handed over: decode from the start instead
            }
        }
        seekToStart();
        Pass pass = new Pass(wanted, end, consumer);
        while (!pass.finished && nextVideoPacket()) {
            try {
                send(packet);
                receive(pass);
            } finally {
                av_packet_unref(packet);
            }
        }
        if (!pass.finished) {
            send(null);
            receive(pass);
        }
        return pass.delivered;
    }

    /**
     * Decodes the frames of {@code plan}, sending the decoder only the packets from each frame's
     * start keyframe on (flushing it before each start after a skip), and counting a decoded frame
     * by its timestamp's rank in the packet index.
     *
     * @throws IndexMismatch if a decoded frame's timestamp is not in the index, or a planned frame
     *     does not come out where the index says
     */
    private int decodeSkipping(PacketScan.Plan plan, Pass pass)
            throws RejectedRecordException, IndexMismatch {
        seekToStart();
        boolean decoding = false;
        int position = -1;
        while (pass.planned < plan.frames().length && nextVideoPacket()) {
            try {
                if (packet.size() <= 0) {
                    continue;
                }
                position++;
                if (position < plan.starts()[pass.planned]) {
                    if (decoding) {
                        avcodec_flush_buffers(codec); // what it still holds is not needed
                        decoding = false;
                    }
                    skippedPackets++;
                    continue;
                }
                if (!decoding) {
                    avcodec_flush_buffers(codec);
                    decoding = true;
                }
                send(packet);
                receiveIndexed(plan, pass);
            } finally {
                av_packet_unref(packet);
            }
        }
        if (decoding && pass.planned < plan.frames().length) {
            send(null);
            receiveIndexed(plan, pass);
        }
        if (pass.planned < plan.frames().length) {
            throw new IndexMismatch("frame " + plan.frames()[pass.planned] + " did not come out");
        }
        return pass.delivered;
    }

    private void receiveIndexed(PacketScan.Plan plan, Pass pass)
            throws RejectedRecordException, IndexMismatch {
        while (pass.planned < plan.frames().length) {
            int ret = avcodec_receive_frame(codec, frame);
            if (ret == AVERROR_EAGAIN || ret == AVERROR_EOF) {
                return;
            }
            if (ret < 0) {
                throw corrupt("decoding a frame failed (" + error(ret) + ")", null);
            }
            try {
                int index = plan.indexOf(frame.pts());
                int want = plan.frames()[pass.planned];
                if (index < 0) {
                    throw new IndexMismatch(
                            "a decoded frame has a timestamp ("
                                    + frame.pts()
                                    + ") that no packet has");
                }
                if (index > want) {
                    throw new IndexMismatch("frame " + index + " came out before frame " + want);
                }
                if (index == want) {
                    deliver(pass, index);
                    pass.planned++;
                }
            } finally {
                av_frame_unref(frame);
            }
        }
    }

    /** A frame decoded after a skip is not where the packet index puts it. */
    private static final class IndexMismatch extends Exception {
        private static final long serialVersionUID = 1L;

        IndexMismatch(String message) {
            super(message, null, false, false);
        }
    }

    /** Converts the current frame and hands it to the pass's consumer as frame {@code index}. */
    private void deliver(Pass pass, int index) throws RejectedRecordException {
        RgbImage rgb = toRgb();
        if (pass.width >= 0 && (rgb.width() != pass.width || rgb.height() != pass.height)) {
            throw corrupt(
                    "frame size changes from "
                            + pass.width
                            + "x"
                            + pass.height
                            + " to "
                            + rgb.width()
                            + "x"
                            + rgb.height()
                            + " at frame "
                            + index
                            + " (the reference cannot stack such frames either)",
                    null);
        }
        pass.width = rgb.width();
        pass.height = rgb.height();
        pass.delivered++;
        pass.consumer.accept(index, rgb);
    }

    /** The state of one decode pass. */
    private static final class Pass {
        final BitSet wanted;
        final int end;
        final FrameConsumer consumer;

        /** Sequential decode: the index of the next frame out of the decoder. */
        int next;

        /** Skipping decode: the position in the plan's frames of the next frame to hand over. */
        int planned;

        int delivered;
        int width = -1;
        int height = -1;
        boolean finished;

        Pass(BitSet wanted, int end, FrameConsumer consumer) {
            this.wanted = wanted;
            this.end = end;
            this.consumer = consumer;
        }
    }

    private void send(AVPacket pkt) throws RejectedRecordException {
        int ret = avcodec_send_packet(codec, pkt);
        if (ret < 0 && ret != AVERROR_EOF) {
            throw corrupt("the decoder rejected a packet (" + error(ret) + ")", null);
        }
    }

    private void receive(Pass pass) throws RejectedRecordException {
        while (!pass.finished) {
            int ret = avcodec_receive_frame(codec, frame);
            if (ret == AVERROR_EAGAIN || ret == AVERROR_EOF) {
                return;
            }
            if (ret < 0) {
                throw corrupt("decoding a frame failed (" + error(ret) + ")", null);
            }
            try {
                int index = pass.next++;
                if (index > pass.end) {
                    pass.finished = true;
                } else if (pass.wanted.get(index)) {
                    deliver(pass, index);
                }
            } finally {
                av_frame_unref(frame);
            }
        }
    }

    /** The current frame as packed RGB24, as PyAV's {@code to_ndarray(format="rgb24")}. */
    private RgbImage toRgb() throws RejectedRecordException {
        int width = frame.width();
        int height = frame.height();
        checkPixels(width, height);
        byte[] out = new byte[width * height * 3];
        int rowBytes = width * 3;
        if (frame.format() == AV_PIX_FMT_RGB24) {
            BytePointer src = frame.data(0);
            int stride = frame.linesize(0);
            for (int y = 0; y < height; y++) {
                src.position((long) y * stride).get(out, y * rowBytes, rowBytes);
            }
            src.position(0);
            return new RgbImage(width, height, out);
        }
        sws =
                sws_getCachedContext(
                        sws,
                        width,
                        height,
                        frame.format(),
                        width,
                        height,
                        AV_PIX_FMT_RGB24,
                        SWS_BILINEAR,
                        null,
                        null,
                        (DoublePointer) null);
        if (sws == null || sws.isNull()) {
            sws = null;
            throw new RejectedRecordException(
                    RejectReason.UNSUPPORTED_VIDEO,
                    "swscale cannot convert pixel format "
                            + pixelFormatName(frame.format())
                            + " to RGB in "
                            + source);
        }
        ensureRgbBuffer(width, height);
        int ret = sws_scale(sws, frame.data(), frame.linesize(), 0, height, rgbData, rgbLinesize);
        if (ret != height) {
            throw corrupt("swscale converted " + ret + " of " + height + " rows", null);
        }
        BytePointer dst = rgbData.get(BytePointer.class, 0);
        int stride = rgbLinesize.get(0);
        for (int y = 0; y < height; y++) {
            dst.position((long) y * stride).get(out, y * rowBytes, rowBytes);
        }
        return new RgbImage(width, height, out);
    }

    private void ensureRgbBuffer(int width, int height) throws RejectedRecordException {
        if (rgbData != null && rgbWidth == width && rgbHeight == height) {
            return;
        }
        freeRgbBuffer();
        rgbData = new PointerPointer<>(4);
        rgbLinesize = new IntPointer(4);
        int ret = av_image_alloc(rgbData, rgbLinesize, width, height, AV_PIX_FMT_RGB24, RGB_ALIGN);
        if (ret < 0) {
            freeRgbBuffer();
            throw new OutOfMemoryError(
                    "FFmpeg could not allocate a " + width + "x" + height + " RGB frame");
        }
        rgbWidth = width;
        rgbHeight = height;
    }

    private void freeRgbBuffer() {
        if (rgbData != null) {
            av_freep(rgbData);
            rgbData.close();
            rgbData = null;
        }
        if (rgbLinesize != null) {
            rgbLinesize.close();
            rgbLinesize = null;
        }
    }

    private void checkPixels(long width, long height) throws RejectedRecordException {
        long pixels = width * height;
        if (pixels > limits.maxPixelsPerFrame() || pixels * 3 > Integer.MAX_VALUE - 16) {
            throw new RejectedRecordException(
                    RejectReason.VIDEO_TOO_MANY_PIXELS,
                    width
                            + "x"
                            + height
                            + " video frames are over the limit of "
                            + limits.maxPixelsPerFrame()
                            + " pixels: "
                            + source);
        }
    }

    private void openInput(Source from) throws RejectedRecordException {
        if (from.bytes() != null) {
            input = new CustomInput(from.bytes());
        } else if (from.unnamed() != null) {
            openChannel(from.unnamed());
            long size = channelSize();
            if (size == 0) {
                throw new RejectedRecordException(
                        RejectReason.CORRUPT_VIDEO, "empty video file (0 bytes): " + source);
            }
            input = new CustomInput(channel, size);
        }
        format = avformat_alloc_context();
        if (format == null) {
            throw new OutOfMemoryError("FFmpeg could not allocate a format context");
        }
        format.flags(format.flags() | AVFMT_FLAG_GENPTS);
        if (input != null) {
            format.pb(input.context());
        }
        Path named = from.named();
        int ret = avformat_open_input(format, named != null ? named.toString() : null, null, null);
        if (ret < 0) {
            // avformat_open_input frees the context on failure
            format = null;
            String container =
                    probe(
                            from.bytes() != null
                                    ? from.bytes()
                                    : head(named != null ? named : from.unnamed()));
            throw container == null
                    ? new RejectedRecordException(
                            RejectReason.UNSUPPORTED_VIDEO,
                            "not a container FFmpeg recognises (" + error(ret) + "): " + source)
                    : corrupt(
                            "a " + container + " file FFmpeg cannot open (" + error(ret) + ")",
                            null);
        }
        for (int i = 0; i < format.nb_streams(); i++) {
            AVCodecParameters par = format.streams(i).codecpar();
            if (par.codec_type() == AVMEDIA_TYPE_VIDEO) {
                checkPixels(Math.max(par.width(), 0), Math.max(par.height(), 0));
            }
        }
        // each stream's probe decoder gets the pixel limit too; nothing else differs from PyAV's
        // avformat_find_stream_info(ctx, NULL)
        int streams = format.nb_streams();
        try (PointerPointer<AVDictionary> options = new PointerPointer<>(Math.max(streams, 1));
                BytePointer key = new BytePointer("max_pixels");
                BytePointer value = new BytePointer(Long.toString(maxPixelsOption()))) {
            options.zero();
            for (int i = 0; i < streams; i++) {
                av_dict_set(options.getPointer(i), key, value, 0);
            }
            ret = avformat_find_stream_info(format, options);
            for (int i = 0; i < streams; i++) {
                av_dict_free(options.getPointer(i));
            }
        }
        if (ret < 0) {
            throw corrupt("reading the stream information failed (" + error(ret) + ")", null);
        }
    }

    /**
     * The container FFmpeg's probe recognises from the file's first 4 KiB with a score over 25
     * (FFmpeg's own {@code AVPROBE_SCORE_MAX / 4} retry threshold): a truncated or damaged file of
     * that container; or null: not a container it knows.
     */
    private static String probe(byte[] file) {
        byte[] head = Arrays.copyOf(file, Math.min(file.length, PROBE_BYTES));
        try (BytePointer buf = new BytePointer((long) head.length + AVPROBE_PADDING_SIZE);
                AVProbeData probe = new AVProbeData()) {
            buf.zero();
            buf.put(head, 0, head.length);
            // the content alone (no file name, whose extension alone scores 50)
            probe.buf(buf).buf_size(head.length);
            int[] score = {PROBE_MIN_SCORE};
            AVInputFormat found = av_probe_input_format2(probe, 1, score);
            return found == null || found.isNull() ? null : found.name().getString();
        }
    }

    /** Opens {@code file} for {@link #openAsBytes}, as {@link #channel}. */
    private void openChannel(Path file) throws RejectedRecordException {
        try {
            channel = FileChannel.open(file, StandardOpenOption.READ);
        } catch (java.io.IOException e) {
            throw new RejectedRecordException(
                    RejectReason.CORRUPT_VIDEO, "cannot read video file " + file + ": " + e, e);
        }
    }

    /** The size of {@link #channel}, in bytes. */
    private long channelSize() throws RejectedRecordException {
        try {
            return channel.size();
        } catch (java.io.IOException e) {
            throw new RejectedRecordException(
                    RejectReason.CORRUPT_VIDEO, "cannot read video file: " + source, e);
        }
    }

    /** The first {@link #PROBE_BYTES} of {@code file}; empty when it cannot be read. */
    private static byte[] head(Path file) {
        try (java.io.InputStream in = Files.newInputStream(file)) {
            return in.readNBytes(PROBE_BYTES);
        } catch (java.io.IOException e) {
            return new byte[0];
        }
    }

    private long maxPixelsOption() {
        return Math.min(limits.maxPixelsPerFrame(), Integer.MAX_VALUE);
    }

    private int firstVideoStream() throws RejectedRecordException {
        for (int i = 0; i < format.nb_streams(); i++) {
            if (format.streams(i).codecpar().codec_type() == AVMEDIA_TYPE_VIDEO) {
                return i;
            }
        }
        throw new RejectedRecordException(
                RejectReason.UNSUPPORTED_VIDEO,
                "no video stream (" + format.nb_streams() + " other streams): " + source);
    }

    private VideoMetadata openDecoder(AVStream stream) throws RejectedRecordException {
        AVCodecParameters par = stream.codecpar();
        AVCodec decoder = avcodec_find_decoder(par.codec_id());
        if (decoder == null || decoder.isNull()) {
            throw new RejectedRecordException(
                    RejectReason.UNSUPPORTED_VIDEO,
                    "no decoder for video codec "
                            + avcodec_get_name(par.codec_id()).getString()
                            + ": "
                            + source);
        }
        long frames = stream.nb_frames();
        if (frames > limits.maxFrames()) {
            throw new RejectedRecordException(
                    RejectReason.VIDEO_TOO_MANY_FRAMES,
                    "the container reports "
                            + frames
                            + " frames, over the limit of "
                            + limits.maxFrames()
                            + ": "
                            + source);
        }
        checkPixels(Math.max(par.width(), 0), Math.max(par.height(), 0));
        codec = avcodec_alloc_context3(decoder);
        if (codec == null) {
            throw new OutOfMemoryError("FFmpeg could not allocate a codec context");
        }
        int ret = avcodec_parameters_to_context(codec, par);
        if (ret < 0) {
            throw corrupt("the codec parameters are invalid (" + error(ret) + ")", null);
        }
        codec.pkt_timebase(stream.time_base());
        codec.thread_count(1);
        codec.thread_type(FF_THREAD_SLICE);
        codec.max_pixels(maxPixelsOption());
        ret = avcodec_open2(codec, decoder, (AVDictionary) null);
        if (ret < 0) {
            throw new RejectedRecordException(
                    RejectReason.UNSUPPORTED_VIDEO,
                    "the "
                            + decoder.name().getString()
                            + " decoder cannot open this stream ("
                            + error(ret)
                            + "): "
                            + source);
        }
        AVRational rate = stream.avg_frame_rate();
        int num = rate.num();
        int den = rate.den();
        boolean hasRate = num != 0 && den != 0;
        int total = (int) Math.max(frames, 0);
        // Python's float(Fraction) and float(int / Fraction): IEEE division of exact operands is
        // the correctly rounded quotient
        double fps = hasRate ? (double) num / (double) den : Double.NaN;
        double duration = hasRate ? ((double) total * den) / (double) num : 0.0;
        AVPixFmtDescriptor desc = av_pix_fmt_desc_get(par.format());
        int depth = desc == null || desc.isNull() ? 0 : desc.comp(0).depth();
        return new VideoMetadata(
                total,
                hasRate ? num : 0,
                hasRate ? den : 0,
                fps,
                duration,
                par.width(),
                par.height(),
                rotation(par),
                pixelFormatName(par.format()),
                depth,
                decoder.name().getString());
    }

    /**
     * {@code stored} with the frame count of a container that stores none (Matroska, WebM): the
     * video stream's packets, counted in one demux pass from the start without decoding (one packet
     * is one frame: VP9 superframes and AV1 temporal units carry one shown frame each), and the
     * duration from that count. The reference ({@code read_video_pyav}) takes the missing count as
     * 0 and fails; transformers' default torchcodec backend counts by scanning the file as here.
     */
    private VideoMetadata withCountedFrames(VideoMetadata stored) throws RejectedRecordException {
        int frames = packets().count();
        double duration =
                stored.hasFrameRate()
                        ? ((double) frames * stored.rateDenominator()) / stored.rateNumerator()
                        : 0.0;
        return new VideoMetadata(
                frames,
                stored.rateNumerator(),
                stored.rateDenominator(),
                stored.fps(),
                duration,
                stored.width(),
                stored.height(),
                stored.rotation(),
                stored.pixelFormat(),
                stored.bitDepth(),
                stored.codec());
    }

    /**
     * The video stream's packets in decode order, read in one demux pass from the start without
     * decoding: their presentation timestamps ({@code AV_NOPTS_VALUE} where the container has none)
     * and keyframe flags.
     *
     * @throws RejectedRecordException CORRUPT_VIDEO on a read error, VIDEO_TOO_MANY_FRAMES past the
     *     frame limit
     */
    private PacketScan packets() throws RejectedRecordException {
        if (packetScan == null) {
            packetScan = scan();
        }
        return packetScan;
    }

    private PacketScan scan() throws RejectedRecordException {
        seekToStart();
        long[] pts = new long[256];
        boolean[] key = new boolean[256];
        int n = 0;
        while (nextVideoPacket()) {
            try {
                if (packet.size() <= 0) {
                    continue;
                }
                if (n == limits.maxFrames()) {
                    throw new RejectedRecordException(
                            RejectReason.VIDEO_TOO_MANY_FRAMES,
                            "the stream has more than "
                                    + limits.maxFrames()
                                    + " frames (counted from its packets): "
                                    + source);
                }
                if (n == pts.length) {
                    pts = Arrays.copyOf(pts, n * 2);
                    key = Arrays.copyOf(key, n * 2);
                }
                pts[n] = packet.pts();
                key[n] = (packet.flags() & AV_PKT_FLAG_KEY) != 0;
                n++;
            } finally {
                av_packet_unref(packet);
            }
        }
        return new PacketScan(Arrays.copyOf(pts, n), Arrays.copyOf(key, n));
    }

    /**
     * Reads the container up to the next packet of the video stream, into {@link #packet} (the
     * caller unrefs it); other streams' packets are dropped.
     *
     * @return false at the end of the file
     * @throws RejectedRecordException CORRUPT_VIDEO on a read error other than end-of-file
     */
    private boolean nextVideoPacket() throws RejectedRecordException {
        while (true) {
            int ret = av_read_frame(format, packet);
            if (ret == AVERROR_EOF) {
                return false;
            }
            if (ret < 0) {
                throw corrupt("reading the container failed (" + error(ret) + ")", null);
            }
            if (packet.stream_index() == streamIndex) {
                return true;
            }
            av_packet_unref(packet);
        }
    }

    private void seekToStart() throws RejectedRecordException {
        int ret = av_seek_frame(format, -1, 0, AVSEEK_FLAG_BACKWARD);
        if (ret < 0) {
            throw corrupt("seeking to the start failed (" + error(ret) + ")", null);
        }
        avcodec_flush_buffers(codec);
    }

    private static double rotation(AVCodecParameters par) {
        AVPacketSideData side =
                av_packet_side_data_get(
                        par.coded_side_data(), par.nb_coded_side_data(), AV_PKT_DATA_DISPLAYMATRIX);
        if (side == null || side.isNull() || side.size() < 9 * 4) {
            return 0.0;
        }
        double angle = av_display_rotation_get(new IntPointer(side.data()));
        return Double.isNaN(angle) ? 0.0 : angle + 0.0;
    }

    private static String pixelFormatName(int pixelFormat) {
        BytePointer name = av_get_pix_fmt_name(pixelFormat);
        return name == null || name.isNull() ? "none" : name.getString();
    }

    private RejectedRecordException corrupt(String what, Throwable cause) {
        return new RejectedRecordException(RejectReason.CORRUPT_VIDEO, what + ": " + source, cause);
    }

    private static String error(int code) {
        byte[] buf = new byte[256];
        if (av_strerror(code, buf, buf.length) < 0) {
            return "FFmpeg error " + code;
        }
        int len = 0;
        while (len < buf.length && buf[len] != 0) {
            len++;
        }
        return new String(buf, 0, len, java.nio.charset.StandardCharsets.UTF_8);
    }

    /** Frees every native resource; safe to call more than once. */
    @Override
    public void close() {
        freeRgbBuffer();
        if (sws != null) {
            sws_freeContext(sws);
            sws = null;
        }
        if (frame != null) {
            av_frame_free(frame);
            frame = null;
        }
        if (packet != null) {
            av_packet_free(packet);
            packet = null;
        }
        if (codec != null) {
            avcodec_free_context(codec);
            codec = null;
        }
        if (format != null) {
            avformat_close_input(format);
            format = null;
        }
        if (input != null) {
            input.close();
            input = null;
        }
        if (channel != null) {
            try {
                channel.close();
            } catch (java.io.IOException e) {
                // read-only: nothing was lost
            }
            channel = null;
        }
    }
}
