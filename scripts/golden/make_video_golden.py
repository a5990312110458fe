"""Golden data for Stoker's video preprocessing parity with Hugging Face (issue 36, docs/parity.md).

Generates small synthetic clips with PyAV's encoders into ``OUT/clips/`` and feeds each through the
Hugging Face processor of each model preset exactly as the processor loads a video from a path,
writing what Stoker's video operators must reproduce as Arrow IPC files (no compression) into
OUT (``--out``; the operators' parity tests run it into ``operators/target/video-goldens`` with
the model venv, ``Goldens.java``, so the goldens and clips are generated, not stored).

What it calls (transformers 5.23.0, torch 2.15.0, torchvision 0.29.2, PyAV 16.0.1 with its bundled
FFmpeg 8 libraries, numpy 2.3.5, pyarrow 22.0.0; pinned in requirements.txt beside this file):

* processors: ``Qwen2VLProcessor`` (qwen2-vl), ``Qwen2_5_VLProcessor`` (qwen2.5-vl),
  ``Qwen3VLProcessor`` (qwen3-vl) with ``Qwen2VLVideoProcessor`` / ``Qwen3VLVideoProcessor`` and
  the real Qwen tokenizer in ../shared/data/tokenizers/qwen3, called as
  ``processor(text=[PROMPT], videos=[path], return_tensors="np", **VIDEO_KWARGS)``, which runs
  ``BaseVideoProcessor.preprocess`` -> ``_decode_and_sample_videos`` -> ``fetch_videos`` ->
  ``transformers.video_utils.load_video(path, backend=..., sample_indices_fn=partial(
  video_processor.sample_frames, **kwargs))`` -> ``_preprocess`` (smart_resize, torchvision
  bicubic resize with antialias, rescale and normalise, pad to the temporal patch, patchify).
  ``fetch_videos`` of transformers 5.23.0 hard-codes ``backend="torchcodec"`` (falling back to
  torchvision's removed decoder); torchcodec is not installed here (its wheel needs a system
  FFmpeg), so the script replaces that one method on the video processor instance with the same
  call with ``backend="pyav"`` (``read_video_pyav``: ``av.open``, ``stream.frames`` as
  total_num_frames, ``stream.average_rate`` as fps, decode from the start, keep the frames at the
  sampled indices, ``frame.to_ndarray(format="rgb24")``), and keeps the uint8 frames it returns:
  they are exactly what the processor received. One change, Stoker's deliberate difference: where
  the container stores no frame count (``stream.frames`` 0: mkv, webm), the loader's metadata
  gets the counted packets before the frame-index rule runs (``counting``; the row's
  ``frames_counted``), where ``read_video_pyav`` alone fails (docs/parity.md).
* frame-index rules: ``Qwen2VLVideoProcessor.sample_frames`` and ``Qwen3VLVideoProcessor.
  sample_frames`` with ``num_frames``; and LLaMA-Factory's
  ``np.linspace(0, total_frames - 1, sample_frames).astype(np.int32)``
  (hiyouga/LLaMA-Factory src/llamafactory/data/mm_plugin.py, the PyAV video path of
  ``_regularize_videos``, ``_get_video_sample_indices`` in later versions), computed here with
  numpy as that file does.

Preset values are the checkpoints' (Qwen/Qwen2-VL-7B-Instruct, Qwen/Qwen2.5-VL-7B-Instruct:
patch 14, temporal 2, merge 2, CLIP mean/std, ``min_pixels`` 3136; Qwen/Qwen3-VL-8B-Instruct
``video_preprocessor_config.json``: patch 16, temporal 2, merge 2, mean/std 0.5,
``size.shortest_edge`` 4096, ``fps`` 2, ``min_frames`` 4, ``max_frames`` 768; the model values are
make_golden.py's PRESETS, read from it) except the pixel budget, cut to VIDEO_PIXELS so that
outputs stay small (per frame for Qwen2/2.5, over T*H*W for Qwen3); frames are sampled by the processor (``do_sample_frames=True``) at 2 fps
for every preset, plus one clip at OTHER_FPS. ``cap_pixels_per_frame`` is left unset (the 5.23.0
default, which is the uncapped behaviour, with a warning).

Clips (CLIPS): H.264 (libx264), HEVC (libx265), VP9 (libvpx-vp9), AV1 (libaom-av1) and MPEG-4
part 2 (mpeg4) in mp4, mov, mkv and webm; odd sizes, portrait, 24/25/30000/1001/60 fps, a
variable frame rate clip, a 90 degree display matrix (written into the mp4 ``tkhd`` box: PyAV 16
has no API for stream side data and FFmpeg 8's mov muxer ignores a ``rotate`` tag), 3 frames
(below ``min_frames``), 300 frames, 10-bit, 4:4:4, full range, BT.709; and bad files for the
decoder's error tests. The pictures are integer arithmetic only (gradients, a zone plate, a
1-pixel checkerboard and a moving square), so they are identical on every machine, and every
encoder runs single-threaded with the muxers in bitexact mode: the clips and goldens are
byte-identical from run to run.

Output (about 6 MB; about 20 s on the 2-core dev box):

* ``clips/``: the clip files.
* ``clips.arrow``: one row per clip file, good or bad: how it was made and what PyAV decodes.
* ``videos.arrow``: one row per (preset, clip, fps): the processor's inputs and outputs, or
  ``status`` "refused" with the reference's ``error`` (type: message). Each row's
  ``pixel_values_videos`` is checked to be ``patchify((u8 / 255 - mean) / std)`` of the uint8
  frames the processor's own ``resize`` returned (``affine_check_max_abs_error``, float32
  rounding only), so those frames are recoverable from it and not stored.
* ``frame_indices.arrow``: the three index rules for a few frame counts per clip.
* ``frames/<set>/`` and ``frame_videos.arrow``: videos given as a list of frame image files
  (FRAME_SETS: PNG and JPEG, odd sizes and counts, grey, one frame, frames of two sizes), one row
  per (preset, set, fps in FRAME_LIST_FPS), through the processor as ``apply_chat_template`` hands
  it such a video (``videos=[[[path, ...]]]``) with ``do_sample_frames=False`` (with True
  ``BaseVideoProcessor._decode_and_sample_videos`` refuses every frame list) and, for a given fps,
  ``video_metadata={"fps": fps, "total_num_frames": n, "frames_indices": range(n)}``. The frames
  are loaded by ``fetch_images`` (``load_image_as_tensor``: torchvision's ``decode_image``, RGB,
  EXIF applied) and kept as the processor received them (``frames``; ``frames_equal_pillow``
  says whether Pillow decodes the files to the same pixels). Without metadata the reference
  assumes 24 fps (``VideoMetadata.sampled_fps``, ``Qwen3VLProcessor`` timestamps).
* ``summary.json`` (written last): versions, presets, encoders used and missing, counts.

Run (from the repository root; PyAV added to the model venv or on PYTHONPATH):

    .stoker/model-venv/bin/python scripts/golden/make_video_golden.py [--out OUT_DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import partial
from pathlib import Path
from typing import Any

import av
import make_golden  # beside this script (its folder is sys.path[0]): the presets, declared once
import numpy as np
import pyarrow as pa
import torch
import torchvision
import transformers
from av.video.reformatter import ColorRange, Colorspace
from transformers import (
    AutoTokenizer,
    Qwen2VLImageProcessor,
    Qwen2VLVideoProcessor,
    Qwen3VLVideoProcessor,
)
from transformers.video_utils import VideoMetadata, load_video

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data"
OUT = REPO / "operators" / "target" / "video-goldens"

FPS = 2.0
OTHER_FPS = 4.0
OTHER_FPS_CLIP = "h264_main.mp4"
INDEX_RULE_COUNTS = [4, 5, 8, 16]
# One video per prompt, as the chat templates place it.
PROMPT = "<|vision_start|><|video_pad|><|vision_end|>"
ENCODERS = [
    "libx264",
    "libopenh264",
    "libx265",
    "libvpx-vp9",
    "libaom-av1",
    "libsvtav1",
    "librav1e",
    "mpeg4",
    "libxvid",
]


#: The video goldens' pixel budgets (min_pixels, max_pixels), cut far below the checkpoints' so the
#: outputs stay small; everything else of a preset is make_golden.py's (one declaration).
VIDEO_PIXELS = {
    "qwen2-vl": (3136, 28 * 28 * 8),
    "qwen2.5-vl": (3136, 28 * 28 * 8),
    "qwen3-vl": (4096, 32 * 32 * 24),
}

PRESETS = [
    replace(p, min_pixels=VIDEO_PIXELS[p.key][0], max_pixels=VIDEO_PIXELS[p.key][1])
    for p in make_golden.PRESETS
]


def video_config(preset: make_golden.Preset) -> dict[str, Any]:
    """The video processor's settings: the preset's, with frame sampling on at :data:`FPS`."""
    return {
        **preset.image_config(),
        "min_frames": 4,
        "max_frames": 768,
        "do_sample_frames": True,
        "fps": FPS,
    }


@dataclass(frozen=True)
class Clip:
    """One clip file: ``name`` (with its extension), how it is encoded, and why it is here."""

    name: str
    why: str
    codec: str = "libx264"
    width: int = 64
    height: int = 48
    rate: Fraction = Fraction(24)
    frames: int = 24
    pix_fmt: str = "yuv420p"
    options: dict[str, str] = field(default_factory=dict)
    vfr: bool = False
    rotation: int = 0
    full_range: bool = False
    bt709: bool = False
    bad: str = ""  # "", "audio", "truncate:<clip>", "empty", "random"

    @property
    def container(self) -> str:
        return self.name.rsplit(".", 1)[1]


X264 = {"preset": "veryfast", "crf": "18", "threads": "1"}
VP9 = {"threads": "1", "deadline": "realtime", "cpu-used": "8", "crf": "20", "b": "0"}
AOM = {"cpu-used": "8", "threads": "1", "usage": "realtime", "crf": "30", "row-mt": "0"}
X265 = {"preset": "ultrafast", "x265-params": "pools=none:frame-threads=1:log-level=error"}
CLIPS = [
    Clip(
        "h264_main.mp4",
        "H.264 4:2:0 in mp4, 24 fps, 3 s; larger than the budget (downscaled)",
        width=128,
        height=72,
        frames=72,
        options=X264,
    ),
    Clip(
        "h264_444_odd.mp4",
        "H.264 High 4:4:4 at an odd size (97x61), 25 fps",
        width=97,
        height=61,
        rate=Fraction(25),
        frames=50,
        pix_fmt="yuv444p",
        options=X264,
    ),
    Clip(
        "hevc_main.mp4",
        "HEVC 4:2:0 in mp4 at 30000/1001 fps",
        codec="libx265",
        rate=Fraction(30000, 1001),
        frames=45,
        options=X265,
    ),
    Clip(
        "hevc_10bit.mov",
        "HEVC Main 10 (yuv420p10le) in mov, 25 fps",
        codec="libx265",
        width=80,
        height=48,
        rate=Fraction(25),
        frames=40,
        pix_fmt="yuv420p10le",
        options=X265,
    ),
    Clip(
        "vp9_odd.mp4",
        "VP9 4:2:0 at an odd size (97x61) in mp4, 30000/1001 fps",
        codec="libvpx-vp9",
        width=97,
        height=61,
        rate=Fraction(30000, 1001),
        frames=45,
        options=VP9,
    ),
    Clip(
        "vp9.webm",
        "VP9 in webm: Matroska stores no frame count (PyAV stream.frames is 0)",
        codec="libvpx-vp9",
        rate=Fraction(30),
        frames=30,
        options=VP9,
    ),
    Clip(
        "av1_portrait.mp4",
        "AV1 (libaom) portrait 48x96 in mp4, 60 fps",
        codec="libaom-av1",
        width=48,
        height=96,
        rate=Fraction(60),
        frames=120,
        options=AOM,
    ),
    Clip(
        "av1.mkv",
        "AV1 in mkv: Matroska stores no frame count",
        codec="libaom-av1",
        frames=24,
        options=AOM,
    ),
    Clip(
        "mpeg4.mov",
        "MPEG-4 part 2 in mov, 25 fps",
        codec="mpeg4",
        rate=Fraction(25),
        frames=50,
        options={"qscale": "3", "threads": "1"},
    ),
    Clip(
        "h264_vfr.mp4",
        "variable frame rate: irregular pts (ms durations 33, 50, 17, 100, 40 repeating)",
        frames=40,
        vfr=True,
        options=X264,
    ),
    Clip(
        "h264_rot90.mp4",
        "90 degree display matrix on a 64x48 landscape H.264 stream",
        frames=48,
        rotation=90,
        options=X264,
    ),
    Clip("h264_short3.mp4", "3 frames: fewer than min_frames (4)", frames=3, options=X264),
    Clip(
        "h264_long300.mp4",
        "300 frames of 48x32 at 60 fps (5 s); smaller than min_pixels (upscaled)",
        width=48,
        height=32,
        rate=Fraction(60),
        frames=300,
        options=X264,
    ),
    Clip(
        "h264_fullrange.mp4",
        "full-range (pc) 4:2:0 H.264, range flagged in the stream",
        rate=Fraction(25),
        frames=25,
        full_range=True,
        options=X264,
    ),
    Clip(
        "vp9_fullrange.mp4",
        "full-range VP9: decoded as yuv420p with color_range pc (H.264/HEVC give yuvj420p)",
        codec="libvpx-vp9",
        rate=Fraction(25),
        frames=12,
        full_range=True,
        options=VP9,
    ),
    Clip(
        "h264_bt709.mp4",
        "BT.709 matrix (content converted with it, and flagged)",
        rate=Fraction(30),
        frames=30,
        bt709=True,
        options=X264,
    ),
    # Short groups of pictures: the 2 fps sampling of 30 fps skips whole GOPs (Stoker's decoder
    # then skips to keyframes, docs/parity.md), with B-frames, open GOPs and CRA pictures.
    Clip(
        "h264_gop6.mp4",
        "H.264 with a keyframe every 6 frames and B-frames (closed GOPs), 30 fps, 4 s",
        rate=Fraction(30),
        frames=120,
        options={**X264, "x264-params": "keyint=6:min-keyint=6:scenecut=0:bframes=2"},
    ),
    Clip(
        "h264_open_gop.mp4",
        "H.264 open GOPs (non-IDR keyframes, leading B-frames) every 8 frames, 30 fps",
        rate=Fraction(30),
        frames=96,
        options={
            **X264,
            "x264-params": "keyint=8:min-keyint=8:scenecut=0:bframes=3:b-pyramid=none:open-gop=1",
        },
    ),
    Clip(
        "hevc_gop8.mp4",
        "HEVC with a CRA keyframe every 8 frames (open GOPs, RASL pictures), 30 fps",
        codec="libx265",
        rate=Fraction(30),
        frames=96,
        options={
            **X265,
            "x265-params": X265["x265-params"] + ":keyint=8:min-keyint=8:scenecut=0:open-gop=1",
        },
    ),
    Clip(
        "vp9_gop5.webm",
        "VP9 with a key frame every 5 frames, in webm (counted), 30 fps",
        codec="libvpx-vp9",
        rate=Fraction(30),
        frames=90,
        options={**VP9, "g": "5"},
    ),
    Clip("audio_only.mp4", "bad: an AAC audio stream and no video stream", bad="audio"),
    Clip("truncated.mp4", "bad: the first half of h264_main.mp4's bytes", bad="truncate"),
    Clip("empty.mp4", "bad: a zero-length file", bad="empty"),
    Clip("random.mp4", "bad: 4096 pseudo-random bytes with a video extension", bad="random"),
]


def picture(i: int, w: int, h: int) -> np.ndarray:
    """Frame ``i`` as (h, w, 3) uint8 RGB, integer arithmetic only (identical on every machine).

    R: a horizontal gradient drifting right; G: a vertical gradient drifting down; B: a zone plate
    (rings that tighten outwards, fine detail for resize and chroma errors) moving with ``i``; a
    1-pixel checkerboard in the top-left quarter; a white square moving diagonally.
    """
    y, x = np.mgrid[0:h, 0:w].astype(np.int64)
    r = (x * 255 // max(w - 1, 1) + 5 * i) % 256
    g = (y * 255 // max(h - 1, 1) + 3 * i) % 256
    zone = ((x - w // 2) ** 2 + (y - h // 2) ** 2) * 64 // max(w, h) + 7 * i
    b = np.abs(zone % 256 - 128) * 2
    rgb = np.stack([r, g, np.minimum(b, 255)], axis=-1)
    checker = ((x + y + i) % 2 == 0) & (x < w // 4) & (y < h // 4)
    rgb[checker] = 255 - rgb[checker]
    side = max(min(w, h) // 5, 2)
    sx, sy = (2 * i) % max(w - side, 1), i % max(h - side, 1)
    rgb[sy : sy + side, sx : sx + side] = 255
    return rgb.astype(np.uint8)


VFR_STEPS_MS = [33, 50, 17, 100, 40]


def encode(clip: Clip, path: Path) -> None:
    """Encodes ``clip`` with PyAV into ``path`` (single-threaded, bitexact muxer)."""
    with av.open(str(path), "w", container_options={"fflags": "+bitexact"}) as out:
        stream = out.add_stream(clip.codec, rate=clip.rate, options=dict(clip.options))
        stream.width, stream.height, stream.pix_fmt = clip.width, clip.height, clip.pix_fmt
        ctx = stream.codec_context
        if clip.vfr:
            ctx.time_base = Fraction(1, 1000)
        else:
            ctx.time_base = 1 / clip.rate
        colorspace = Colorspace.ITU709 if clip.bt709 else Colorspace.ITU601
        if clip.full_range:
            ctx.color_range = ColorRange.JPEG
        if clip.bt709:
            ctx.colorspace = 1  # AVCOL_SPC_BT709
            ctx.color_primaries = 1
            ctx.color_trc = 1
        pts = 0
        for i in range(clip.frames):
            rgb = av.VideoFrame.from_ndarray(picture(i, clip.width, clip.height), format="rgb24")
            frame = rgb.reformat(
                format=clip.pix_fmt,
                src_colorspace=Colorspace.ITU601,
                dst_colorspace=colorspace,
                src_color_range=ColorRange.JPEG,
                dst_color_range=ColorRange.JPEG if clip.full_range else ColorRange.MPEG,
            )
            frame.pts = pts
            if clip.full_range:
                frame.color_range = ColorRange.JPEG
            pts += VFR_STEPS_MS[i % len(VFR_STEPS_MS)] if clip.vfr else 1
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    if clip.rotation:
        set_mp4_rotation(path, clip.rotation)


def set_mp4_rotation(path: Path, degrees: int) -> None:
    """Writes a rotation into the video track's ``tkhd`` transformation matrix (ISO/IEC 14496-12
    8.3.2: nine big-endian 32-bit values a b u c d v x y w, 16.16 fixed point but u v w 2.30), the
    box FFmpeg reads as the stream's display matrix."""
    data = bytearray(path.read_bytes())
    at = data.find(b"tkhd")
    assert at > 0 and data.find(b"tkhd", at + 4) < 0, "one track"
    version = data[at + 4]
    matrix_at = at + 4 + (52 if version == 1 else 40)
    one = 0x10000
    a, b = {90: (0, one), 180: (-one, 0), 270: (0, -one)}[degrees]
    matrix = (a, b, 0, -b, a, 0, 0, 0, 0x40000000)
    data[matrix_at : matrix_at + 36] = struct.pack(">9i", *matrix)
    path.write_bytes(bytes(data))


def audio_only(path: Path) -> None:
    """One second of a 16 kHz mono AAC sawtooth in mp4, no video stream."""
    with av.open(str(path), "w", container_options={"fflags": "+bitexact"}) as out:
        stream = out.add_stream("aac", rate=16000, options={"b": "32000"})
        stream.layout = "mono"
        samples = ((np.arange(16000, dtype=np.int64) * 440 * 65536 // 16000) % 65536) - 32768
        frame = av.AudioFrame.from_ndarray(
            (samples // 4).astype(np.int16)[None, :], format="s16", layout="mono"
        )
        frame.sample_rate = 16000
        frame.pts = 0
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)


def make_clips(clip_dir: Path) -> list[dict[str, Any]]:
    clip_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for clip in CLIPS:
        path = clip_dir / clip.name
        if clip.bad == "audio":
            audio_only(path)
        elif clip.bad == "truncate":
            whole = (clip_dir / "h264_main.mp4").read_bytes()
            path.write_bytes(whole[: len(whole) // 2])
        elif clip.bad == "empty":
            path.write_bytes(b"")
        elif clip.bad == "random":
            blocks = [hashlib.sha256(f"stoker {i}".encode()).digest() for i in range(128)]
            path.write_bytes(b"".join(blocks))
        else:
            encode(clip, path)
        rows.append(clip_row(clip, path))
    return rows


def clip_row(clip: Clip, path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    row: dict[str, Any] = {
        "clip": clip.name,
        "file": f"clips/{clip.name}",
        "good": not clip.bad,
        "why": clip.why,
        "container": clip.container,
        "encoder": "" if clip.bad else clip.codec,
        "pix_fmt": "" if clip.bad else clip.pix_fmt,
        "coded_width": 0 if clip.bad else clip.width,
        "coded_height": 0 if clip.bad else clip.height,
        "frame_rate": "" if clip.bad else str(clip.rate),
        "encoded_frames": 0 if clip.bad else clip.frames,
        "vfr": clip.vfr,
        "rotation_written": clip.rotation,
        "full_range": clip.full_range,
        "bt709": clip.bt709,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        # What PyAV decodes (the reference's decoder), every frame.
        "codec": "",
        "decoded_frames": -1,
        "pts": [],
        "time_base": "",
        "decoded_pix_fmt": "",
        "rotation": 0,
        "color_range": "",
        "colorspace": "",
        "decode_error": "",
    }
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            row["codec"] = stream.codec_context.name
            row["time_base"] = str(stream.time_base)
            pts = []
            for frame in container.decode(video=0):
                if not pts:
                    row["decoded_pix_fmt"] = frame.format.name
                    row["rotation"] = int(frame.rotation)
                    row["color_range"] = str(frame.color_range)
                    row["colorspace"] = str(frame.colorspace)
                pts.append(int(frame.pts))
            row["pts"] = pts
            row["decoded_frames"] = len(pts)
    except Exception as e:  # noqa: BLE001 - the bad files' errors are the point
        row["decode_error"] = f"{type(e).__name__}: {e}".replace(str(path.parent), "clips")
    return row


def counted_frames(path: str) -> tuple[int, Fraction]:
    """The video stream's packets, counted in one demux pass without decoding, and its average
    rate: Stoker's frame count where the container stores none (``stream.frames`` is 0: Matroska
    and WebM), as transformers' default torchcodec backend (``seek_mode="exact"``) counts by
    scanning the file. One packet is one frame for every codec here (VP9 superframes, AV1
    temporal units)."""
    with av.open(path) as container:
        stream = container.streams.video[0]
        count = sum(1 for packet in container.demux(stream) if packet.size > 0)
        return count, stream.average_rate


def counting(sample_indices_fn: Any, path: str, counted: list[bool]) -> Any:
    """``sample_indices_fn`` that first gives a metadata without a frame count the counted one
    (Stoker's deviation from ``read_video_pyav``, which refuses such a video: docs/parity.md);
    the loader returns that metadata, so the processor sees the count and its duration."""

    def sample(metadata: VideoMetadata, **kwargs: Any) -> Any:
        if metadata.total_num_frames == 0:
            total, rate = counted_frames(path)
            metadata.total_num_frames = total
            # read_video_pyav's own arithmetic: total_num_frames / stream.average_rate
            metadata.duration = float(total / rate) if rate else 0
            counted.append(True)
        return sample_indices_fn(metadata=metadata, **kwargs)

    return sample


def pyav_fetch(
    captured: list[Any], counted: list[bool], video: Any, sample_indices_fn: Any = None
) -> Any:
    """``BaseVideoProcessor.fetch_videos`` with ``backend="pyav"`` (see the module docstring),
    counting the frames of a container that stores no count (``counting``)."""
    if isinstance(video, list):
        return list(
            zip(*[pyav_fetch(captured, counted, v, sample_indices_fn) for v in video], strict=True)
        )
    frames, metadata = load_video(
        video, backend="pyav", sample_indices_fn=counting(sample_indices_fn, video, counted)
    )
    captured.append(frames)
    return frames, metadata


def build(preset: make_golden.Preset, tokenizer: Any) -> Any:
    video_processor = preset.video_processor_class(**video_config(preset))
    processor = preset.processor_class(
        image_processor=Qwen2VLImageProcessor(**preset.image_config()),
        tokenizer=tokenizer,
        video_processor=video_processor,
    )
    return processor


def reference_row(
    preset: make_golden.Preset, processor: Any, clip: Clip, clip_dir: Path, fps: float
) -> dict[str, Any]:
    vp = processor.video_processor
    captured: list[Any] = []
    counted: list[bool] = []
    vp.fetch_videos = partial(pyav_fetch, captured, counted)
    resized: list[Any] = []
    vp.resize = partial(keep_result, type(vp).resize.__get__(vp), resized)
    row: dict[str, Any] = {
        "preset": preset.key,
        "clip": clip.name,
        "good_clip": not clip.bad,
        "container": clip.container,
        "fps": fps,
        "do_sample_frames": True,
        "min_frames": vp.min_frames,
        "max_frames": vp.max_frames,
        "min_pixels": preset.min_pixels,
        "max_pixels": preset.max_pixels,
        "patch_size": preset.patch_size,
        "temporal_patch_size": vp.temporal_patch_size,
        "merge_size": vp.merge_size,
        "status": "ok",
        "error": "",
        "frames_counted": False,
    }
    try:
        out = processor(
            text=[PROMPT],
            videos=[str(clip_dir / clip.name)],
            fps=fps,
            return_metadata=True,
            return_tensors="np",
        )
    except Exception as e:  # noqa: BLE001 - a refusal is a golden outcome
        row["status"] = "refused"
        row["error"] = f"{type(e).__name__}: {e}".replace(str(clip_dir), "clips")
        return row
    (frames,) = captured
    meta: VideoMetadata = out["video_metadata"][0]
    pv = np.ascontiguousarray(out["pixel_values_videos"], dtype="<f4")
    grid = [int(v) for v in out["video_grid_thw"][0]]
    assert pv.shape == (grid[0] * grid[1] * grid[2], 3 * 2 * preset.patch_size**2), pv.shape
    frames = np.ascontiguousarray(np.asarray(frames), dtype=np.uint8)
    (resized_u8,) = resized
    assert resized_u8.dtype == torch.uint8, resized_u8.dtype
    affine = float(np.abs(pv - patchify(resized_u8[0].numpy(), preset)).max())
    assert affine < 1e-5, affine
    indices = [int(i) for i in np.asarray(meta.frames_indices)]
    assert frames.shape[0] == len(indices) and frames.shape[-1] == 3
    timestamps: list[float] = []
    if preset.key == "qwen3-vl":
        # The processor's own timestamps (it extends the list it is given, so give it a copy).
        timestamps = [float(t) for t in processor._calculate_timestamps(list(indices), meta.fps, 2)]
    row.update(
        {
            "total_num_frames": int(meta.total_num_frames),
            "frames_counted": bool(counted),
            "video_fps": float(meta.fps),
            "duration": float(meta.duration),
            "width": int(meta.width),
            "height": int(meta.height),
            "video_backend": str(meta.video_backend),
            "frames_indices": indices,
            "sampled_fps": float(meta.sampled_fps),
            "frames": frames.tobytes(),
            "frames_shape": list(frames.shape),
            "pixel_values_videos": pv.tobytes(),
            "pixel_values_videos_shape": list(pv.shape),
            "video_grid_thw": grid,
            "resized_height": grid[1] * preset.patch_size,
            "resized_width": grid[2] * preset.patch_size,
            "second_per_grid_ts": (
                float(out["second_per_grid_ts"][0]) if "second_per_grid_ts" in out else None
            ),
            "video_timestamps": timestamps,
            "input_ids": [int(v) for v in out["input_ids"][0]],
            "affine_check_max_abs_error": affine,
        }
    )
    return row


def keep_result(method: Any, results: list[Any], *args: Any, **kwargs: Any) -> Any:
    """Calls the processor's own ``method`` and keeps what it returned."""
    result = method(*args, **kwargs)
    results.append(result)
    return result


def patchify(u8: np.ndarray, preset: make_golden.Preset) -> np.ndarray:
    """``(u8 / 255 - mean) / std`` of resized (T, C, H, W) uint8 frames, padded to the temporal
    patch by repeating the last frame and patchified in the processor's order (view (gt, 2, C,
    gh/2, 2, p, gw/2, 2, p), permute (0, 3, 6, 4, 7, 2, 1, 5, 8)), in float64."""
    x = u8.astype(np.float64) / 255.0
    x = (x - np.array(preset.mean)[:, None, None]) / np.array(preset.std)[:, None, None]
    if len(x) % 2:
        x = np.concatenate([x, x[-1:]])
    t, c, h, w = x.shape
    p, m = preset.patch_size, 2
    x = x.reshape(t // 2, 2, c, h // p // m, m, p, w // p // m, m, p)
    x = x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return x.reshape(t // 2 * (h // p) * (w // p), c * 2 * p * p)


def index_rows(clip_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The three index rules in circulation, for a few frame counts, over each good clip's
    frame count as the reference reads it (``stream.frames``; clips reading 0 are skipped)."""
    qwen2 = Qwen2VLVideoProcessor(**video_config(PRESETS[0]))
    qwen3 = Qwen3VLVideoProcessor(**video_config(PRESETS[2]))
    rows = []
    for clip_row_ in clip_rows:
        if not clip_row_["good"]:
            continue
        with av.open(str(clip_row_["path"])) as container:
            total = int(container.streams.video[0].frames)
        if total == 0:
            continue
        meta = VideoMetadata(total_num_frames=total, fps=None)
        for n in INDEX_RULE_COUNTS:
            if n > total:
                continue
            rules = {
                "qwen2_vl_arange": (
                    "transformers 5.23.0 Qwen2VLVideoProcessor.sample_frames(num_frames=n): "
                    "arange(0, total, total / n').int(), n' = round(n / 2) * 2",
                    qwen2.sample_frames(meta, num_frames=n),
                ),
                "qwen3_vl_linspace_round": (
                    "transformers 5.23.0 Qwen3VLVideoProcessor.sample_frames(num_frames=n): "
                    "linspace(0, total - 1, n).round()",
                    qwen3.sample_frames(meta, num_frames=n),
                ),
                "llamafactory_linspace_floor": (
                    "LLaMA-Factory src/llamafactory/data/mm_plugin.py, the PyAV video path of "
                    "_regularize_videos (_get_video_sample_indices in later versions): "
                    "np.linspace(0, total_frames - 1, sample_frames).astype(np.int32)",
                    np.linspace(0, total - 1, n).astype(np.int32),
                ),
            }
            for rule, (source, indices) in rules.items():
                rows.append(
                    {
                        "clip": clip_row_["clip"],
                        "total_num_frames": total,
                        "num_frames": n,
                        "rule": rule,
                        "source": source,
                        "indices": [int(i) for i in np.asarray(indices)],
                    }
                )
    return rows


@dataclass(frozen=True)
class FrameSet:
    """A video given as a list of frame image files (``OUT/frames/<name>/0000.<ext>`` ...)."""

    name: str
    why: str
    ext: str = "png"
    width: int = 64
    height: int = 48
    count: int = 4
    mode: str = "RGB"  # PIL mode of the files: "RGB" or "L"
    quality: int = 90  # JPEG quality (4:2:0)
    sizes: tuple[tuple[int, int], ...] = ()  # per-frame (w, h) where the frames differ


FRAME_SETS = [
    FrameSet(
        "png_odd5", "5 PNG frames at an odd size, 97x61 (odd frame count: padded)", "png", 97, 61, 5
    ),
    FrameSet("jpg_7", "7 JPEG frames (4:2:0, quality 90), 64x48", "jpg", 64, 48, 7),
    FrameSet(
        "jpg_big3", "3 JPEG frames of 150x100: above the budget, downscaled", "jpg", 150, 100, 3
    ),
    FrameSet(
        "png_gray4",
        "4 grayscale PNG frames of 30x20: below min_pixels, upscaled",
        "png",
        30,
        20,
        4,
        "L",
    ),
    FrameSet(
        "png_single", "1 PNG frame (Qwen2/2.5-VL pad it to 2; Qwen3-VL refuses)", "png", 64, 48, 1
    ),
    FrameSet(
        "png_sizes3",
        "3 PNG frames of two sizes (the reference's torch.stack fails)",
        "png",
        count=3,
        sizes=((64, 48), (64, 48), (48, 64)),
    ),
]

#: The frame-list rows' frame rates: None = no video_metadata (the reference assumes 24 fps), and
#: one given the way a record gives it (``video_metadata`` ``fps``; qwen-vl-utils' ``fps`` key).
FRAME_LIST_FPS: list[float | None] = [None, 1.0]


def make_frame_sets(frames_dir: Path) -> dict[str, list[str]]:
    """Writes every FRAME_SETS' files; returns each set's files relative to ``frames_dir.parent``."""
    from PIL import Image

    files: dict[str, list[str]] = {}
    for fs in FRAME_SETS:
        d = frames_dir / fs.name
        d.mkdir(parents=True, exist_ok=True)
        names = []
        for i in range(fs.count):
            w, h = fs.sizes[i] if fs.sizes else (fs.width, fs.height)
            rgb = picture(i * 3, w, h)
            img = Image.fromarray(rgb).convert(fs.mode)
            path = d / f"{i:04d}.{fs.ext}"
            if fs.ext == "jpg":
                img.save(path, quality=fs.quality, subsampling=2)
            else:
                img.save(path, optimize=False, compress_level=6)
            names.append(f"{frames_dir.name}/{fs.name}/{path.name}")
        files[fs.name] = names
    return files


def frame_list_row(
    preset: make_golden.Preset,
    processor: Any,
    fs: FrameSet,
    files: list[str],
    out_dir: Path,
    fps: float | None,
) -> dict[str, Any]:
    """The processor on one frame-list video, as ``apply_chat_template`` hands it one
    (``videos=[[[path, ...]]]``: a batch of one sample holding one video given as frame paths),
    with ``do_sample_frames=False`` (with True the reference refuses every frame list:
    ``_decode_and_sample_videos`` raises "Sampling frames from a list of images is not
    supported!") and, when ``fps`` is given, ``video_metadata`` with that rate."""
    vp = processor.video_processor
    fetched: list[Any] = []
    vp.fetch_images = partial(keep_result, type(vp).fetch_images.__get__(vp), fetched)
    resized: list[Any] = []
    vp.resize = partial(keep_result, type(vp).resize.__get__(vp), resized)
    n = len(files)
    row: dict[str, Any] = {
        "preset": preset.key,
        "frame_set": fs.name,
        "why": fs.why,
        "frame_files": files,
        "fps": fps,
        "min_pixels": preset.min_pixels,
        "max_pixels": preset.max_pixels,
        "patch_size": preset.patch_size,
        "temporal_patch_size": vp.temporal_patch_size,
        "merge_size": vp.merge_size,
        "status": "ok",
        "error": "",
    }
    kwargs: dict[str, Any] = {"do_sample_frames": False}
    if fps is not None:
        kwargs["video_metadata"] = [
            {"fps": fps, "total_num_frames": n, "frames_indices": list(range(n))}
        ]
    paths = [str(out_dir / f) for f in files]
    try:
        out = processor(
            text=[PROMPT],
            videos=[[paths]],
            return_metadata=True,
            return_tensors="np",
            **kwargs,
        )
    except Exception as e:  # noqa: BLE001 - a refusal is a golden outcome
        row["status"] = "refused"
        row["error"] = f"{type(e).__name__}: {e}".replace(str(out_dir), "")
        return row
    # fetch_images recurses through the instance attribute: the outermost call returns last
    (loaded,) = fetched[-1]  # one video: its frames as (C, H, W) uint8 tensors
    frames = np.ascontiguousarray(
        np.stack([t.permute(1, 2, 0).numpy() for t in loaded]), dtype=np.uint8
    )
    from PIL import Image

    # the processor's loader (torchvision's decode_image, RGB) against Pillow's decode of the files
    pillow = np.stack([np.asarray(Image.open(p).convert("RGB")) for p in paths])
    meta: VideoMetadata = out["video_metadata"][0]
    pv = np.ascontiguousarray(out["pixel_values_videos"], dtype="<f4")
    grid = [int(v) for v in out["video_grid_thw"][0]]
    assert pv.shape == (grid[0] * grid[1] * grid[2], 3 * 2 * preset.patch_size**2), pv.shape
    (resized_u8,) = resized
    affine = float(np.abs(pv - patchify(resized_u8[0].numpy(), preset)).max())
    assert affine < 1e-5, affine
    # Qwen3VLProcessor pads the metadata's own frames_indices list to the temporal patch while it
    # writes the timestamps: the first n are the frames'.
    indices = [int(i) for i in np.asarray(meta.frames_indices)][:n]
    video_fps = 24.0 if meta.fps is None else float(meta.fps)
    timestamps: list[float] = []
    if preset.key == "qwen3-vl":
        timestamps = [
            float(t) for t in processor._calculate_timestamps(list(indices), video_fps, 2)
        ]
    row.update(
        {
            "total_num_frames": int(meta.total_num_frames),
            "metadata_fps": None if meta.fps is None else float(meta.fps),
            "video_fps": video_fps,
            "frames_indices": indices,
            "frames": frames.tobytes(),
            "frames_shape": list(frames.shape),
            "frames_equal_pillow": bool(np.array_equal(frames, pillow)),
            "pixel_values_videos": pv.tobytes(),
            "pixel_values_videos_shape": list(pv.shape),
            "video_grid_thw": grid,
            "second_per_grid_ts": (
                float(out["second_per_grid_ts"][0]) if "second_per_grid_ts" in out else None
            ),
            "video_timestamps": timestamps,
            "video_timestamp_texts": [f"<{t:.1f} seconds>" for t in timestamps],
            "input_ids": [int(v) for v in out["input_ids"][0]],
            "affine_check_max_abs_error": affine,
        }
    )
    return row


SCHEMAS = {
    "clips.arrow": [
        ("clip", pa.string()),
        ("file", pa.string()),
        ("good", pa.bool_()),
        ("why", pa.string()),
        ("container", pa.string()),
        ("encoder", pa.string()),
        ("pix_fmt", pa.string()),
        ("coded_width", pa.int32()),
        ("coded_height", pa.int32()),
        ("frame_rate", pa.string()),
        ("encoded_frames", pa.int32()),
        ("vfr", pa.bool_()),
        ("rotation_written", pa.int32()),
        ("full_range", pa.bool_()),
        ("bt709", pa.bool_()),
        ("bytes", pa.int64()),
        ("sha256", pa.string()),
        ("codec", pa.string()),
        ("decoded_frames", pa.int32()),
        ("pts", pa.list_(pa.int64())),
        ("time_base", pa.string()),
        ("decoded_pix_fmt", pa.string()),
        ("rotation", pa.int32()),
        ("color_range", pa.string()),
        ("colorspace", pa.string()),
        ("decode_error", pa.string()),
    ],
    "videos.arrow": [
        ("preset", pa.string()),
        ("clip", pa.string()),
        ("good_clip", pa.bool_()),
        ("container", pa.string()),
        ("fps", pa.float64()),
        ("do_sample_frames", pa.bool_()),
        ("min_frames", pa.int32()),
        ("max_frames", pa.int32()),
        ("min_pixels", pa.int64()),
        ("max_pixels", pa.int64()),
        ("patch_size", pa.int32()),
        ("temporal_patch_size", pa.int32()),
        ("merge_size", pa.int32()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("frames_counted", pa.bool_()),
        ("total_num_frames", pa.int32()),
        ("video_fps", pa.float64()),
        ("duration", pa.float64()),
        ("width", pa.int32()),
        ("height", pa.int32()),
        ("video_backend", pa.string()),
        ("frames_indices", pa.list_(pa.int32())),
        ("sampled_fps", pa.float64()),
        ("frames", pa.binary()),
        ("frames_shape", pa.list_(pa.int32())),
        ("pixel_values_videos", pa.binary()),
        ("pixel_values_videos_shape", pa.list_(pa.int32())),
        ("video_grid_thw", pa.list_(pa.int32())),
        ("resized_height", pa.int32()),
        ("resized_width", pa.int32()),
        ("second_per_grid_ts", pa.float64()),
        ("video_timestamps", pa.list_(pa.float64())),
        ("input_ids", pa.list_(pa.int32())),
        ("affine_check_max_abs_error", pa.float64()),
    ],
    "frame_videos.arrow": [
        ("preset", pa.string()),
        ("frame_set", pa.string()),
        ("why", pa.string()),
        ("frame_files", pa.list_(pa.string())),
        ("fps", pa.float64()),
        ("min_pixels", pa.int64()),
        ("max_pixels", pa.int64()),
        ("patch_size", pa.int32()),
        ("temporal_patch_size", pa.int32()),
        ("merge_size", pa.int32()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("total_num_frames", pa.int32()),
        ("metadata_fps", pa.float64()),
        ("video_fps", pa.float64()),
        ("frames_indices", pa.list_(pa.int32())),
        ("frames", pa.binary()),
        ("frames_shape", pa.list_(pa.int32())),
        ("frames_equal_pillow", pa.bool_()),
        ("pixel_values_videos", pa.binary()),
        ("pixel_values_videos_shape", pa.list_(pa.int32())),
        ("video_grid_thw", pa.list_(pa.int32())),
        ("second_per_grid_ts", pa.float64()),
        ("video_timestamps", pa.list_(pa.float64())),
        ("video_timestamp_texts", pa.list_(pa.string())),
        ("input_ids", pa.list_(pa.int32())),
        ("affine_check_max_abs_error", pa.float64()),
    ],
    "frame_indices.arrow": [
        ("clip", pa.string()),
        ("total_num_frames", pa.int32()),
        ("num_frames", pa.int32()),
        ("rule", pa.string()),
        ("source", pa.string()),
        ("indices", pa.list_(pa.int32())),
    ],
}


def write(path: Path, rows: list[dict[str, Any]]) -> None:
    schema = pa.schema([pa.field(n, t) for n, t in SCHEMAS[path.name]])
    table = pa.Table.from_pylist(
        [{n: row.get(n) for n in schema.names} for row in rows], schema=schema
    )
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        writer.write_table(table)


def main() -> None:
    parser = argparse.ArgumentParser(description="Hugging Face video parity goldens (Arrow IPC).")
    parser.add_argument("--out", type=Path, default=OUT, help=f"output directory (default {OUT})")
    out_dir: Path = parser.parse_args().out
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").unlink(missing_ok=True)
    torch.set_num_threads(1)
    clip_dir = out_dir / "clips"
    clip_rows = make_clips(clip_dir)
    for row in clip_rows:
        row["path"] = clip_dir / row["clip"]
    tokenizer = AutoTokenizer.from_pretrained(str(DATA / "tokenizers" / "qwen3"))
    video_rows = []
    for preset in PRESETS:
        processor = build(preset, tokenizer)
        for clip in CLIPS:
            video_rows.append(reference_row(preset, processor, clip, clip_dir, FPS))
            # Qwen2-VL shares Qwen2.5-VL's video processor: the other fps once for each processor.
            if clip.name == OTHER_FPS_CLIP and preset.key != "qwen2-vl":
                video_rows.append(reference_row(preset, processor, clip, clip_dir, OTHER_FPS))
    frame_files = make_frame_sets(out_dir / "frames")
    frame_rows = []
    for preset in PRESETS:
        processor = build(preset, tokenizer)
        for fs in FRAME_SETS:
            for fps in FRAME_LIST_FPS:
                frame_rows.append(
                    frame_list_row(preset, processor, fs, frame_files[fs.name], out_dir, fps)
                )
    indices = index_rows(clip_rows)
    write(out_dir / "clips.arrow", clip_rows)
    write(out_dir / "frame_videos.arrow", frame_rows)
    write(out_dir / "videos.arrow", video_rows)
    write(out_dir / "frame_indices.arrow", indices)

    available = []
    for name in ENCODERS:
        try:
            av.codec.Codec(name, "w")
            available.append(name)
        except av.codec.codec.UnknownCodecError:
            pass
    total = sum(p.stat().st_size for p in out_dir.rglob("*") if p.is_file())
    summary = {
        "versions": {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "av": av.__version__,
            "ffmpeg": {k: ".".join(map(str, v)) for k, v in av.library_versions.items()},
            "numpy": np.__version__,
            "pyarrow": pa.__version__,
        },
        "load_video_backend": "pyav",
        "presets": {
            p.key: {
                "processor": p.processor_class.__name__,
                "video_processor": p.video_processor_class.__name__,
                "video_config": video_config(p),
                "cap_pixels_per_frame": None,
            }
            for p in PRESETS
        },
        "other_fps": {
            "clip": OTHER_FPS_CLIP,
            "fps": OTHER_FPS,
            "presets": ["qwen2.5-vl", "qwen3-vl"],
        },
        "encoders_available": available,
        "encoders_missing": [e for e in ENCODERS if e not in available],
        "encoders_used": sorted({c.codec for c in CLIPS if not c.bad}),
        "clips": {r["clip"]: r["good"] for r in clip_rows},
        "rows": {
            "clips": len(clip_rows),
            "videos": len(video_rows),
            "videos_ok": sum(r["status"] == "ok" for r in video_rows),
            "videos_refused": sum(r["status"] == "refused" for r in video_rows),
            "videos_frames_counted": sum(r["frames_counted"] for r in video_rows),
            "frame_indices": len(indices),
            "frame_videos": len(frame_rows),
            "frame_videos_ok": sum(r["status"] == "ok" for r in frame_rows),
        },
        "frame_sets": {fs.name: fs.why for fs in FRAME_SETS},
        "frame_list_refusals": sorted(
            {
                f"{r['preset']} {r['frame_set']}: {r['error']}"
                for r in frame_rows
                if r["status"] == "refused"
            }
        ),
        "affine_check_max_abs_error": max(
            r["affine_check_max_abs_error"] for r in video_rows if r["status"] == "ok"
        ),
        "refusals": sorted(
            {f"{r['clip']}: {r['error']}" for r in video_rows if r["status"] == "refused"}
        ),
        "bytes": total,
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summary["rows"]), f"{total} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
