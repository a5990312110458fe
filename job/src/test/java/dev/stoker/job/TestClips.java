package dev.stoker.job;

import static org.bytedeco.ffmpeg.global.avcodec.AV_CODEC_FLAG_GLOBAL_HEADER;
import static org.bytedeco.ffmpeg.global.avcodec.AV_CODEC_ID_MPEG4;
import static org.bytedeco.ffmpeg.global.avcodec.av_packet_alloc;
import static org.bytedeco.ffmpeg.global.avcodec.av_packet_free;
import static org.bytedeco.ffmpeg.global.avcodec.av_packet_rescale_ts;
import static org.bytedeco.ffmpeg.global.avcodec.avcodec_alloc_context3;
import static org.bytedeco.ffmpeg.global.avcodec.avcodec_find_encoder;
import static org.bytedeco.ffmpeg.global.avcodec.avcodec_free_context;
import static org.bytedeco.ffmpeg.global.avcodec.avcodec_open2;
import static org.bytedeco.ffmpeg.global.avcodec.avcodec_parameters_from_context;
import static org.bytedeco.ffmpeg.global.avcodec.avcodec_receive_packet;
import static org.bytedeco.ffmpeg.global.avcodec.avcodec_send_frame;
import static org.bytedeco.ffmpeg.global.avformat.AVFMT_GLOBALHEADER;
import static org.bytedeco.ffmpeg.global.avformat.AVIO_FLAG_WRITE;
import static org.bytedeco.ffmpeg.global.avformat.av_interleaved_write_frame;
import static org.bytedeco.ffmpeg.global.avformat.av_write_trailer;
import static org.bytedeco.ffmpeg.global.avformat.avformat_alloc_output_context2;
import static org.bytedeco.ffmpeg.global.avformat.avformat_free_context;
import static org.bytedeco.ffmpeg.global.avformat.avformat_new_stream;
import static org.bytedeco.ffmpeg.global.avformat.avformat_write_header;
import static org.bytedeco.ffmpeg.global.avformat.avio_closep;
import static org.bytedeco.ffmpeg.global.avformat.avio_open;
import static org.bytedeco.ffmpeg.global.avutil.AVERROR_EOF;
import static org.bytedeco.ffmpeg.global.avutil.AV_PIX_FMT_YUV420P;
import static org.bytedeco.ffmpeg.global.avutil.av_frame_alloc;
import static org.bytedeco.ffmpeg.global.avutil.av_frame_free;
import static org.bytedeco.ffmpeg.global.avutil.av_frame_get_buffer;
import static org.bytedeco.ffmpeg.global.avutil.av_make_q;

import java.io.IOException;
import java.nio.file.Path;
import java.util.Random;
import org.bytedeco.ffmpeg.avcodec.AVCodec;
import org.bytedeco.ffmpeg.avcodec.AVCodecContext;
import org.bytedeco.ffmpeg.avcodec.AVPacket;
import org.bytedeco.ffmpeg.avformat.AVFormatContext;
import org.bytedeco.ffmpeg.avformat.AVIOContext;
import org.bytedeco.ffmpeg.avformat.AVStream;
import org.bytedeco.ffmpeg.avutil.AVFrame;
import org.bytedeco.javacpp.BytePointer;

/**
 * Test helper: small video files for the job tests, encoded by FFmpeg 8.1's own MPEG-4 Part 2
 * encoder ({@code mpeg4}, part of every FFmpeg build, JavaCPP's included) into an mp4 container,
 * whose header carries the frame count the decoder needs. The parity of Stoker's video path with
 * the Hugging Face processors is checked elsewhere on the clips of {@code
 * scripts/golden/make_video_golden.py}; these clips only need to be real, deterministic videos.
 */
final class TestClips {
    private TestClips() {}

    /**
     * Writes {@code frames} frames of {@code width} x {@code height} (even) at {@code fps} to
     * {@code file}: colour bars that move one column per frame over noise drawn from {@code seed},
     * so the frames differ from each other and from other seeds.
     *
     * @throws IOException if FFmpeg fails at any step (its error code in the message)
     */
    static void write(Path file, int width, int height, int frames, int fps, long seed)
            throws IOException {
        AVFormatContext format = new AVFormatContext(null);
        check(avformat_alloc_output_context2(format, null, "mp4", file.toString()), "output");
        AVCodecContext codec = null;
        AVFrame frame = null;
        AVPacket packet = null;
        try {
            AVCodec encoder = avcodec_find_encoder(AV_CODEC_ID_MPEG4);
            if (encoder == null) {
                throw new IOException("this FFmpeg build has no mpeg4 encoder");
            }
            AVStream stream = avformat_new_stream(format, null);
            codec = avcodec_alloc_context3(encoder);
            codec.width(width).height(height).pix_fmt(AV_PIX_FMT_YUV420P).gop_size(4);
            codec.time_base(av_make_q(1, fps)).framerate(av_make_q(fps, 1));
            codec.bit_rate(2_000_000);
            if ((format.oformat().flags() & AVFMT_GLOBALHEADER) != 0) {
                codec.flags(codec.flags() | AV_CODEC_FLAG_GLOBAL_HEADER);
            }
            check(
                    avcodec_open2(codec, encoder, (org.bytedeco.ffmpeg.avutil.AVDictionary) null),
                    "open encoder");
            check(avcodec_parameters_from_context(stream.codecpar(), codec), "parameters");
            stream.time_base(codec.time_base());
            AVIOContext io = new AVIOContext(null);
            check(avio_open(io, file.toString(), AVIO_FLAG_WRITE), "open " + file);
            format.pb(io);
            check(
                    avformat_write_header(format, (org.bytedeco.ffmpeg.avutil.AVDictionary) null),
                    "header");
            frame = av_frame_alloc();
            frame.format(AV_PIX_FMT_YUV420P).width(width).height(height);
            check(av_frame_get_buffer(frame, 0), "frame buffer");
            packet = av_packet_alloc();
            Random random = new Random(seed);
            for (int i = 0; i < frames; i++) {
                fill(frame, width, height, i, random);
                frame.pts(i);
                check(avcodec_send_frame(codec, frame), "encode frame " + i);
                drain(format, codec, stream, packet);
            }
            check(avcodec_send_frame(codec, null), "flush");
            drain(format, codec, stream, packet);
            check(av_write_trailer(format), "trailer");
        } finally {
            if (packet != null) {
                av_packet_free(packet);
            }
            if (frame != null) {
                av_frame_free(frame);
            }
            if (codec != null) {
                avcodec_free_context(codec);
            }
            if (format.pb() != null) {
                avio_closep(format.pb());
            }
            avformat_free_context(format);
        }
    }

    /** Y: bars shifted by {@code i} plus noise; U and V: a gradient per bar. */
    private static void fill(AVFrame frame, int width, int height, int i, Random random) {
        BytePointer y = frame.data(0);
        BytePointer u = frame.data(1);
        BytePointer v = frame.data(2);
        int yStride = frame.linesize(0);
        int cStride = frame.linesize(1);
        for (int row = 0; row < height; row++) {
            for (int col = 0; col < width; col++) {
                int bar = ((col + i) / 8) % 8;
                y.put((long) row * yStride + col, (byte) (32 + bar * 24 + random.nextInt(16)));
            }
        }
        for (int row = 0; row < height / 2; row++) {
            for (int col = 0; col < width / 2; col++) {
                int bar = ((2 * col + i) / 8) % 8;
                u.put((long) row * cStride + col, (byte) (64 + bar * 16));
                v.put((long) row * frame.linesize(2) + col, (byte) (192 - bar * 16 + row));
            }
        }
    }

    private static void drain(
            AVFormatContext format, AVCodecContext codec, AVStream stream, AVPacket packet)
            throws IOException {
        while (true) {
            int r = avcodec_receive_packet(codec, packet);
            if (r == AVERROR_EOF || r == -11 /* AVERROR(EAGAIN) */) {
                return;
            }
            check(r, "receive packet");
            packet.duration(1); // one frame, in the encoder's time base
            av_packet_rescale_ts(packet, codec.time_base(), stream.time_base());
            packet.stream_index(stream.index());
            check(av_interleaved_write_frame(format, packet), "write packet");
        }
    }

    private static void check(int result, String what) throws IOException {
        if (result < 0) {
            throw new IOException("FFmpeg: " + what + " failed with error " + result);
        }
    }
}
