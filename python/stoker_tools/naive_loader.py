"""The naive serial loader ``./stoker demo`` runs beside Stoker: each DP rank's trainer loads its
own samples, one at a time, in its own process, and trains only when its batch is complete.

    python -m stoker_tools.naive_loader --dataset s3://bucket/prefix|DIR --tokenizer DIR \\
        [--s3-endpoint http://127.0.0.1:9000] [--world-size 2] [--micro-batch-size 4] \\
        [--step-time-ms 1000] [--preset qwen2-vl] [--min-pixels N] [--max-pixels N] \\
        [--system-prompt TEXT] [--glob '*.jsonl'] [--seed 0] [--summary-json FILE]

This is the loop the talk's 85%-waiting trainer runs, and what Stoker replaces: one process per
DP rank (``--world-size`` of them, started together), each doing for every sample of its batch,
in turn and in the trainer's own process:

1. fetch the record's images: one S3 GET each from ``--s3-endpoint`` (the demo's local S3 server,
   the same objects the job reads), with pyarrow's ``S3FileSystem`` (the AWS SDK for C++, already
   in the venv for Arrow: no boto3, and no hand-written HTTP client; the credentials come from the
   standard AWS chain, as for the job); a local ``--dataset`` folder is read with pyarrow's
   ``LocalFileSystem`` instead;
2. decode with Pillow (first frame, EXIF orientation, RGB with transparency composited over white,
   as transformers' ``convert_to_rgb``), :func:`smart_resize` to the job's min/max pixels and
   Pillow's bicubic resize to uint8 RGB;
3. :func:`patchify` the resized image (numpy) and normalise it with
   :func:`stoker.pixels.normalize_uint8` (the job's own rescale and mean/std, bit for bit);
4. render the Qwen-VL chat template, expand each image's ``<|image_pad|>``, tokenize with the
   ``tokenizers`` library (``--tokenizer``: the same ``tokenizer.json`` the job is given) and mask
   the labels as QwenLM's qwen-vl-finetune does;

then :func:`collate` the B samples (``--micro-batch-size``) into one batch and "train" by sleeping
``--step-time-ms`` (no CPU use), as the simulated trainer of :mod:`stoker_tools.simulate` does
with Stoker's batches. Nothing overlaps: while the rank loads, it does not train, and while it
trains, nothing loads. That is the whole difference to Stoker, which loads on every core, ahead of
the trainer (the prefetch depth), and hands over a finished batch by its name. The steps are those
of transformers' slow (Pillow) image processor, written with Pillow and numpy as in
``bench/pillow_peer.py``, because transformers is not in this venv (the benchmark's naive
contender, ``bench/loaders/naive.py``, calls the real processor in a venv of its own).

The work per sample is the job's: the same model preset (``--preset``: ``qwen2-vl``,
``qwen2.5-vl`` or ``qwen3-vl``, :data:`PRESETS`), pixel bounds (and a messages record's per-image
``min_pixels``/``max_pixels``), default system prompt, record layouts (LLaVA, messages,
LLaMA-Factory/ShareGPT; images only, no video) and batch shape; the sample order is a seeded
shuffle of the whole dataset (rank r takes the r-th B samples of each global batch of
``world_size x B``), as ``torch``'s ``DistributedSampler`` would. It is a timing contender, not a
second implementation to train with: it does not take the job's other ``stoker.image.*`` options,
and reads message text as transformers' processor does (special-token strings in it are special
tokens; the job encodes them as text). On the demo's generated sample dataset its samples were
checked equal to the job's batches (2026-12-04, all 48 records): ``input_ids``, ``labels``,
``image_grid_thw`` and the float32 ``pixel_values``, bit for bit.

The wait-time figures are measured as :mod:`stoker_tools.simulate` measures Stoker's: a rank's
``wait_time_ratio`` is the time it spent waiting for its next batch over the time since its first
request, ``steady_wait_time_ratio`` the same after its first batch arrived. A progress line is
printed about once a second; at the end one line per rank and a ``total:`` line in
:mod:`stoker_tools.simulate`'s format, and with ``--summary-json`` the totals as JSON
(:func:`stoker_tools.simulate.summarize`). A sample that cannot be loaded (a missing image, a
record it does not understand) is left out and counted (``dropped``); the exit code is 0 when no
sample was dropped and no rank failed, 1 otherwise, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import fnmatch
import io
import json
import math
import multiprocessing
import os
import posixpath
import queue
import signal
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import pyarrow.fs as pafs
from PIL import Image, ImageOps
from tokenizers import Tokenizer

from stoker.pixels import normalize_uint8
from stoker.printable import escape_unencodable_stdout, printable
from stoker.protocol import VisionSettings

from .simulate import RankResult, startup_and_steady, summarize, total_line

__all__ = [
    "PRESETS",
    "Preprocessing",
    "NaiveLoader",
    "Sample",
    "collate",
    "label_mask",
    "main",
    "patchify",
    "preprocessing",
    "smart_resize",
]

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class Preprocessing:
    """What the job's model preset (and its overrides) set for an image sample.

    Attributes:
        vision: patch geometry and normalisation (:class:`stoker.protocol.VisionSettings`, as the
            job writes it into its manifest).
        min_pixels, max_pixels: smart_resize bounds, in pixels (height x width after resizing).
        system_prompt: the system turn the chat template inserts before a conversation without
            one; ``None``: none.
    """

    vision: VisionSettings
    min_pixels: int
    max_pixels: int
    system_prompt: str | None

    @property
    def factor(self) -> int:
        """Resized sides are multiples of this (``patch_size x merge_size``), in pixels."""
        return self.vision.patch_size * self.vision.merge_size


#: The job's presets (``stoker.model.preset``; values and sources in docs/parity.md).
PRESETS: dict[str, Preprocessing] = {
    "qwen2-vl": Preprocessing(
        VisionSettings(14, 2, 2, 1 / 255, CLIP_MEAN, CLIP_STD),
        3136,
        12845056,
        "You are a helpful assistant.",
    ),
    "qwen2.5-vl": Preprocessing(
        VisionSettings(14, 2, 2, 1 / 255, CLIP_MEAN, CLIP_STD),
        3136,
        12845056,
        "You are a helpful assistant.",
    ),
    "qwen3-vl": Preprocessing(
        VisionSettings(16, 2, 2, 1 / 255, (0.5,) * 3, (0.5,) * 3), 65536, 16777216, None
    ),
}


def preprocessing(options: Mapping[str, str]) -> Preprocessing:
    """The :class:`Preprocessing` of a job's options (``--key value`` without the dashes):
    ``stoker.model.preset`` (default ``qwen2-vl``), ``stoker.image.min-pixels``,
    ``stoker.image.max-pixels`` and ``stoker.template.default-system-prompt`` (empty: none).

    Raises:
        ValueError: an unknown preset or a pixel bound that is not a positive integer.
    """
    name = options.get("stoker.model.preset", "qwen2-vl")
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    prep = PRESETS[name]
    bounds = []
    for key, default in (
        ("stoker.image.min-pixels", prep.min_pixels),
        ("stoker.image.max-pixels", prep.max_pixels),
    ):
        value = int(options.get(key, default))
        if value < 1:
            raise ValueError(f"{key} must be a positive integer, got {value}")
        bounds.append(value)
    prompt = options.get("stoker.template.default-system-prompt", prep.system_prompt)
    return Preprocessing(prep.vision, bounds[0], bounds[1], prompt or None)


def smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """Qwen-VL's ``smart_resize``: the resized ``(height, width)`` in pixels, each a multiple of
    ``factor``, about the same aspect ratio, with ``min_pixels <= h * w <= max_pixels``.

    The rule of qwen-vl-utils and transformers' image processors, as the job applies it
    (``SmartResize``): round each side to the nearest multiple of ``factor`` (ties to even, at
    least ``factor``); above ``max_pixels`` scale both by ``sqrt(h * w / max_pixels)`` and floor,
    below ``min_pixels`` scale up by ``sqrt(min_pixels / (h * w))`` and ceil.

    Raises:
        ValueError: an aspect ratio above 200 (the job's ``EXTREME_ASPECT_RATIO``).
    """
    if max(height, width) > 200 * min(height, width):
        raise ValueError(f"aspect ratio of {width}x{height} is above 200")
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def decode(data: bytes) -> Image.Image:
    """An image file's bytes as the processor receives them: Pillow's first frame, turned by its
    EXIF orientation, in RGB; any transparency composited over white (transformers'
    ``convert_to_rgb``)."""
    image: Image.Image = Image.open(io.BytesIO(data))
    image = ImageOps.exif_transpose(image) or image
    if image.mode == "RGB":
        return image
    rgba = image.convert("RGBA")
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(white, rgba).convert("RGB")


def patchify(rgb: np.ndarray, vision: VisionSettings) -> np.ndarray:
    """Qwen-VL's patch order of one resized image, without changing a value.

    The frame is repeated to ``temporal_patch_size`` frames and reordered as transformers'
    ``Qwen2VLImageProcessor`` does (the inverse of :func:`stoker.images.unpatchify_frames`).

    Args:
        rgb: ``(H, W, C)`` uint8, H and W multiples of ``patch_size x merge_size``.
        vision: the patch geometry.

    Returns:
        ``(grid_h * grid_w, C * temporal_patch_size * patch_size**2)`` uint8 with
        ``grid_h = H / patch_size``, ``grid_w = W / patch_size``.
    """
    ps, tps, m = vision.patch_size, vision.temporal_patch_size, vision.merge_size
    h, w, c = rgb.shape
    gh, gw = h // ps, w // ps
    frames = np.broadcast_to(rgb.transpose(2, 0, 1)[None], (tps, c, h, w))
    x = frames.reshape(1, tps, c, gh // m, m, ps, gw // m, m, ps)
    return x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8).reshape(gh * gw, c * tps * ps * ps)


@dataclass(frozen=True)
class ImagePart:
    """An image of a conversation: its path under the dataset root and its own pixel bounds
    (0: the job's)."""

    path: str
    min_pixels: int = 0
    max_pixels: int = 0


@dataclass
class Message:
    """One turn: its role (``system``, ``user``, ``assistant``) and its text and image parts."""

    role: str
    parts: list[str | ImagePart] = field(default_factory=list)


ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant"}
ROLES["assistant"] = "assistant"


def _with_placeholders(text: str, images: list[str]) -> list[str | ImagePart]:
    """A text whose ``<image>`` placeholders each take the next of ``images``."""
    parts: list[str | ImagePart] = []
    for i, piece in enumerate(text.split("<image>")):
        if i > 0:
            if not images:
                raise ValueError("more <image> placeholders than images")
            parts.append(ImagePart(images.pop(0)))
        if piece:
            parts.append(piece)
    return parts


def conversation(record: Mapping[str, Any]) -> list[Message]:
    """A record's turns, in the three layouts the job reads (images only).

    Raises:
        ValueError, KeyError, TypeError: a record this loader does not understand (a video,
            placeholders that do not match the images, a missing key).
    """
    if "video" in record or "videos" in record:
        raise ValueError("videos are not loaded by the naive loader")
    messages: list[Message] = []
    if "messages" in record:
        queue = list(record.get("images") or [])
        for turn in record["messages"]:
            message = Message(ROLES[turn["role"]])
            if isinstance(turn["content"], str):
                message.parts = _with_placeholders(turn["content"], queue)
            else:
                for part in turn["content"]:
                    kind = part.get("type") or next(
                        k for k in ("text", "image", "image_url") if k in part
                    )
                    if kind == "text":
                        if part["text"]:
                            message.parts.append(part["text"])
                    elif kind in ("image", "image_url"):
                        src = part[kind]
                        src = src["url"] if isinstance(src, dict) else src
                        message.parts.append(
                            ImagePart(
                                src, int(part.get("min_pixels", 0)), int(part.get("max_pixels", 0))
                            )
                        )
                    else:
                        raise ValueError(f"content part of type {kind!r} is not loaded")
            messages.append(message)
    else:
        image = record.get("image", record.get("images"))
        queue = [image] if isinstance(image, str) else list(image or [])
        for turn in record["conversations"]:
            messages.append(Message(ROLES[turn["from"]], _with_placeholders(turn["value"], queue)))
    if queue:
        raise ValueError(f"{len(queue)} image(s) without an <image> placeholder")
    return messages


def render(messages: Sequence[Message], pads: Sequence[int], system_prompt: str | None) -> str:
    """The Qwen-VL chat template's text, each image's ``<|image_pad|>`` repeated ``pads[i]``
    times (its merged tokens) between ``<|vision_start|>`` and ``<|vision_end|>``."""
    out = []
    if system_prompt is not None and (not messages or messages[0].role != "system"):
        out.append(f"<|im_start|>system\n{system_prompt}<|im_end|>\n")
    images = iter(pads)
    for message in messages:
        out.append(f"<|im_start|>{message.role}\n")
        for part in message.parts:
            if isinstance(part, str):
                out.append(part)
            else:
                out.append("<|vision_start|>" + "<|image_pad|>" * next(images) + "<|vision_end|>")
        out.append("<|im_end|>\n")
    return "".join(out)


def label_mask(ids: np.ndarray, assistant_start: Sequence[int], im_end: int) -> np.ndarray:
    """QwenLM qwen-vl-finetune's label mask: in each assistant turn, everything after
    ``<|im_start|>assistant\\n`` (``assistant_start``, its 3 ids) up to and including
    ``<|im_end|>`` and the token after it (the newline).

    Args:
        ids: ``(L,)`` int64 token ids.

    Returns:
        ``(L,)`` bool, True where the token is trained.
    """
    mask = np.zeros(len(ids), dtype=bool)
    n = len(assistant_start)
    starts = np.flatnonzero(ids[: max(0, len(ids) - n + 1)] == assistant_start[0])
    ends = np.flatnonzero(ids == im_end)
    for s in starts:
        if list(ids[s : s + n]) == list(assistant_start):
            after = ends[ends >= s + n]
            end = int(after[0]) + 2 if len(after) else len(ids)
            mask[s + n : min(end, len(ids))] = True
    return mask


@dataclass
class Sample:
    """One preprocessed sample, as the model takes it.

    Attributes:
        input_ids, labels: ``(L,)`` int64; labels are -100 where not trained.
        pixel_values: ``(P, D)`` float32 patches of its images, in order (``P = 0``: no image).
        image_grid_thw: ``(I, 3)`` int64 ``(t, h, w)`` per image, in patches.
    """

    input_ids: np.ndarray
    labels: np.ndarray
    pixel_values: np.ndarray
    image_grid_thw: np.ndarray


def collate(samples: Sequence[Sample], pad_id: int) -> dict[str, np.ndarray]:
    """B samples as one batch, the layout of Stoker's (unpacked) batches.

    Returns:
        ``input_ids`` (``pad_id`` after a row's end), ``labels`` (-100 there) and
        ``attention_mask`` (1 on a row's tokens): ``(B, L)`` int64 with L the longest row;
        ``pixel_values`` ``(P, D)`` float32 and ``image_grid_thw`` ``(I, 3)`` int64 of all rows'
        images, concatenated in row order.
    """
    length = max(len(s.input_ids) for s in samples)
    ids = np.full((len(samples), length), pad_id, dtype=np.int64)
    labels = np.full((len(samples), length), -100, dtype=np.int64)
    mask = np.zeros((len(samples), length), dtype=np.int64)
    for r, s in enumerate(samples):
        n = len(s.input_ids)
        ids[r, :n], labels[r, :n], mask[r, :n] = s.input_ids, s.labels, 1
    return {
        "input_ids": ids,
        "labels": labels,
        "attention_mask": mask,
        "pixel_values": np.concatenate([s.pixel_values for s in samples]),
        "image_grid_thw": np.concatenate([s.image_grid_thw for s in samples]),
    }


def open_dataset(dataset: str, s3_endpoint: str | None) -> tuple[pafs.FileSystem, str]:
    """The filesystem and root path of ``dataset`` (``s3://bucket/prefix`` or a local folder).

    S3 goes to ``s3_endpoint`` (e.g. ``http://127.0.0.1:9000``; ``None``: AWS) with path-style
    requests; credentials come from the standard AWS chain (``AWS_ACCESS_KEY_ID``, ...). The AWS
    SDK's checksums are asked for only where an operation requires them
    (``AWS_REQUEST_CHECKSUM_CALCULATION`` / ``AWS_RESPONSE_CHECKSUM_VALIDATION``
    ``when_required``, unless set): the local S3 server (S3Proxy) answers 501 to the checksum
    mode a GET asks for by default.
    """
    if not dataset.startswith("s3://"):
        return pafs.LocalFileSystem(), str(Path(dataset).resolve())
    os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
    os.environ.setdefault("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_required")
    kwargs: dict[str, Any] = {"region": os.environ.get("AWS_REGION", "us-east-1")}
    if s3_endpoint:
        scheme, _, host = s3_endpoint.partition("://")
        kwargs.update(endpoint_override=host or scheme, scheme=scheme if host else "https")
    return pafs.S3FileSystem(**kwargs), dataset.removeprefix("s3://").rstrip("/")


@dataclass(frozen=True)
class Record:
    """A JSONL line of the dataset: its file (path under the filesystem), 1-based line, object."""

    file: str
    line: int
    obj: dict[str, Any]


class NaiveLoader:
    """Loads samples one at a time from a dataset root, as a trainer's own process would.

    Args:
        fs, root: the dataset's filesystem and root path (:func:`open_dataset`).
        tokenizer: the job's ``tokenizer.json`` directory (or file).
        prep: the job's preprocessing (:func:`preprocessing`).
        glob: which files under the root are JSONL (matched against the name).
    """

    def __init__(
        self,
        fs: pafs.FileSystem,
        root: str,
        tokenizer: Path,
        prep: Preprocessing,
        glob: str = "*.jsonl",
    ) -> None:
        self.fs, self.root, self.prep, self.glob = fs, root, prep, glob
        path = tokenizer / "tokenizer.json" if tokenizer.is_dir() else tokenizer
        self.tokenizer = Tokenizer.from_file(str(path))
        self.assistant_start = self.tokenizer.encode(
            "<|im_start|>assistant\n", add_special_tokens=False
        ).ids
        self.im_end = self._token_id("<|im_end|>")
        self.pad_id = self._token_id("<|endoftext|>")

    def _token_id(self, token: str) -> int:
        token_id = self.tokenizer.token_to_id(token)
        if token_id is None:
            raise ValueError(f"the tokenizer has no {token}")
        return int(token_id)

    def records(self) -> list[Record]:
        """Every record of the JSONL files under the root: files sorted by path, lines in order
        (blank lines skipped)."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.root, recursive=True))
        files = sorted(
            i.path
            for i in infos
            if i.type == pafs.FileType.File and fnmatch.fnmatchcase(i.base_name, self.glob)
        )
        out = []
        for path in files:
            with self.fs.open_input_stream(path) as f:
                text = f.read().decode("utf-8-sig")
            for n, line in enumerate(text.split("\n"), start=1):
                if line.strip():
                    out.append(Record(path, n, json.loads(line)))
        return out

    def fetch(self, rel: str) -> bytes:
        """One GET of the image at ``rel`` under the root.

        Raises:
            ValueError: a path that leaves the root.
        """
        norm = posixpath.normpath(rel)
        if posixpath.isabs(norm) or norm == ".." or norm.startswith("../"):
            raise ValueError(f"image path {rel!r} leaves the dataset root")
        with self.fs.open_input_stream(f"{self.root}/{norm}") as f:
            data: bytes = f.read()
        return data

    def image(self, part: ImagePart) -> tuple[np.ndarray, np.ndarray]:
        """One image fetched, decoded, resized, patchified and normalised: ``pixel_values``
        ``(h * w, D)`` float32 and its ``(1, h, w)`` grid (int64, in patches)."""
        prep, v = self.prep, self.prep.vision
        image = decode(self.fetch(part.path))
        h, w = smart_resize(
            image.height,
            image.width,
            prep.factor,
            part.min_pixels or prep.min_pixels,
            part.max_pixels or prep.max_pixels,
        )
        resized = np.asarray(image.resize((w, h), Image.Resampling.BICUBIC))
        pixels = normalize_uint8(patchify(resized, v), v)
        return pixels, np.array([1, h // v.patch_size, w // v.patch_size], dtype=np.int64)

    def sample(self, record: Record) -> Sample:
        """One record, preprocessed (its images fetched one after the other).

        Raises:
            Exception: any failure (fetch, decode, a record it does not understand).
        """
        messages = conversation(record.obj)
        parts = [p for m in messages for p in m.parts if isinstance(p, ImagePart)]
        images = [self.image(p) for p in parts]
        merge = self.prep.vision.merge_size**2
        text = render(
            messages, [int(g.prod()) // merge for _, g in images], self.prep.system_prompt
        )
        ids = np.asarray(self.tokenizer.encode(text, add_special_tokens=False).ids, np.int64)
        labels = np.where(label_mask(ids, self.assistant_start, self.im_end), ids, -100)
        d = self.prep.vision.patch_dim
        return Sample(
            ids,
            labels,
            np.concatenate([p for p, _ in images]) if images else np.zeros((0, d), np.float32),
            np.stack([g for _, g in images]) if images else np.zeros((0, 3), np.int64),
        )


def rank_records(
    records: Sequence[Record], rank: int, world_size: int, micro_batch_size: int, seed: int
) -> list[list[Record]]:
    """The records of each of ``rank``'s batches: a seeded shuffle of all records, cut into
    global batches of ``world_size x micro_batch_size``; rank r takes the r-th
    ``micro_batch_size`` of each (the last ones may be short or missing)."""
    order = np.random.default_rng(seed).permutation(len(records))
    per_step = world_size * micro_batch_size
    out = []
    for start in range(0, len(records), per_step):
        mine = order[start + rank * micro_batch_size : start + (rank + 1) * micro_batch_size]
        if len(mine):
            out.append([records[i] for i in mine])
    return out


@dataclass(frozen=True)
class Config:
    """One naive run (the command line), sent to each rank's process."""

    dataset: str
    s3_endpoint: str | None
    tokenizer: Path
    prep: Preprocessing
    glob: str
    world_size: int
    micro_batch_size: int
    step_time_s: float
    seed: int


#: Slots of a rank's shared progress array (float64): counts, and times in seconds.
_STEPS, _SAMPLES, _IMAGES, _TOKENS, _DROPPED = range(5)
_WAIT, _ELAPSED, _FIRST_WAIT, _FIRST_ELAPSED = range(5, 9)
_SLOTS = 9


def _batches(
    loader: NaiveLoader, cfg: Config, rank: int, dropped: list[str]
) -> Iterator[dict[str, np.ndarray]]:
    """The rank's batches, each loaded only when the trainer asks for it (the listing of the
    records is part of the wait for the first). A sample that fails is left out; its error is
    appended to ``dropped``."""
    for chunk in rank_records(
        loader.records(), rank, cfg.world_size, cfg.micro_batch_size, cfg.seed
    ):
        samples = []
        for record in chunk:
            try:
                samples.append(loader.sample(record))
            except Exception as e:  # a naive loop would die; this one reports it
                dropped.append(f"{record.file}:{record.line}: {type(e).__name__}: {e}")
        if samples:
            yield collate(samples, loader.pad_id)


def _rank_main(cfg: Config, rank: int, progress: Any, errors: Any) -> None:
    """One rank's trainer process: consumes its batches, sleeping ``step_time_s`` after each;
    keeps its counts and times (seconds) in ``progress`` (a shared float array, :data:`_SLOTS`),
    puts the dropped samples' errors on ``errors``, then ``None``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the ranks
    dropped: list[str] = []
    try:
        fs, root = open_dataset(cfg.dataset, cfg.s3_endpoint)
        batches = _batches(
            NaiveLoader(fs, root, cfg.tokenizer, cfg.prep, cfg.glob), cfg, rank, dropped
        )
        t0 = time.monotonic()
        wait = 0.0
        while True:
            asked = time.monotonic()
            batch = next(batches, None)
            now = time.monotonic()
            wait += now - asked
            if batch is None:
                break
            with progress.get_lock():
                p = progress
                if p[_STEPS] == 0:
                    p[_FIRST_WAIT], p[_FIRST_ELAPSED] = wait, now - t0
                p[_STEPS] += 1
                p[_SAMPLES] += batch["input_ids"].shape[0]
                p[_IMAGES] += batch["image_grid_thw"].shape[0]
                p[_TOKENS] += int(batch["attention_mask"].sum())
                p[_WAIT], p[_ELAPSED], p[_DROPPED] = wait, now - t0, len(dropped)
            del batch
            if cfg.step_time_s > 0:
                time.sleep(cfg.step_time_s)
        with progress.get_lock():
            progress[_WAIT], progress[_ELAPSED] = wait, time.monotonic() - t0
            progress[_DROPPED] = len(dropped)
        for error in dropped:
            errors.put((rank, error))
    except Exception as e:
        errors.put((rank, f"rank failed: {type(e).__name__}: {e}"))
    finally:
        errors.put(None)


def _result(rank: int, p: Sequence[float]) -> RankResult:
    """A rank's shared progress as a :class:`~stoker_tools.simulate.RankResult`."""
    res = RankResult(rank)
    res.steps, res.samples = int(p[_STEPS]), int(p[_SAMPLES])
    res.images, res.tokens = int(p[_IMAGES]), int(p[_TOKENS])
    res.wait_s, res.elapsed_s = p[_WAIT], p[_ELAPSED]
    if res.steps:
        res.first_batch_wait_s, res.first_batch_elapsed_s = p[_FIRST_WAIT], p[_FIRST_ELAPSED]
    return res


def run(cfg: Config, progress_interval_s: float = 1.0) -> tuple[dict[str, Any], bool]:
    """Runs the ``world_size`` rank processes together and prints their progress and summary
    (stdout). Returns the totals (:func:`stoker_tools.simulate.summarize`, plus ``dropped``: the
    samples left out) and whether every rank ran to its end without dropping a sample."""
    ctx = multiprocessing.get_context("spawn")
    errors = ctx.Queue()
    progress = [ctx.Array("d", _SLOTS) for _ in range(cfg.world_size)]
    procs = [
        ctx.Process(
            target=_rank_main,
            args=(cfg, r, progress[r], errors),
            name=f"naive-rank-{r}",
            daemon=True,
        )
        for r in range(cfg.world_size)
    ]
    t0 = time.monotonic()
    for proc in procs:
        proc.start()
    messages: list[tuple[int, str]] = []
    finished = 0
    try:
        next_progress = t0 + progress_interval_s
        while finished < len(procs):
            try:
                item = errors.get(timeout=0.05)
            except queue.Empty:
                item = False
                if not any(p.is_alive() for p in procs):
                    break  # a rank died without a word (killed)
            if item is None:
                finished += 1
            elif item:
                messages.append(item)
            now = time.monotonic()
            if now >= next_progress and finished < len(procs):
                next_progress = now + progress_interval_s
                parts = []
                for r, p in enumerate(progress):
                    with p.get_lock():
                        steps, wait, elapsed = int(p[_STEPS]), p[_WAIT], p[_ELAPSED]
                    parts.append(f"r{r}={steps} wait={wait / elapsed if elapsed > 0 else 0:.0%}")
                samples = sum(int(p[_SAMPLES]) for p in progress)
                print(
                    f"[{now - t0:6.1f}s] naive " + " ".join(parts) + f" samples/s="
                    f"{samples / (now - t0):.1f}",
                    flush=True,
                )
        for proc in procs:
            proc.join(timeout=30)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join()
    elapsed = time.monotonic() - t0
    results = [_result(r, progress[r][:]) for r in range(cfg.world_size)]
    dropped = int(sum(p[_DROPPED] for p in progress))
    failed = [m for _, m in messages if m.startswith("rank failed")] + [
        f"rank {r} exited {p.exitcode}" for r, p in enumerate(procs) if p.exitcode
    ]
    print("summary (naive serial loader):")
    for res in results:
        print(
            f"  rank {res.rank}: steps={res.steps} samples={res.samples} images={res.images} "
            f"tokens={res.tokens} wait_time_ratio={res.wait_time_ratio:.3f} "
            f"{startup_and_steady(res)}"
        )
    for rank, message in messages[:10]:
        print(f"  rank {rank}: {printable(message)}")
    if len(messages) > 10:
        print(f"  ... {len(messages) - 10} more")
    totals = summarize(results, elapsed)
    totals["dropped"] = dropped
    print(f"  {total_line(totals)} dropped={dropped}", flush=True)
    return totals, not failed and dropped == 0


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # run()'s clean-up stops the ranks


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m stoker_tools.naive_loader", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--dataset", required=True, help="s3://bucket/prefix or a local folder")
    p.add_argument("--s3-endpoint", help="S3 endpoint URL, e.g. http://127.0.0.1:9000")
    p.add_argument("--tokenizer", required=True, type=Path, help="tokenizer.json or its folder")
    p.add_argument("--world-size", type=int, default=2, help="DP ranks, one process each")
    p.add_argument("--micro-batch-size", type=int, default=4, help="samples per rank per step")
    p.add_argument("--step-time-ms", type=float, default=1000.0, help="simulated step (ms)")
    p.add_argument("--preset", default="qwen2-vl", choices=sorted(PRESETS))
    p.add_argument("--min-pixels", type=int, help="smart_resize min_pixels (default: preset)")
    p.add_argument("--max-pixels", type=int, help="smart_resize max_pixels (default: preset)")
    p.add_argument("--system-prompt", help="default system prompt (default: preset; '' none)")
    p.add_argument("--glob", default="*.jsonl", help="JSONL file names (default *.jsonl)")
    p.add_argument("--seed", type=int, default=0, help="shuffle seed (default 0)")
    p.add_argument("--summary-json", type=Path, help="write the totals to this file as JSON")
    args = p.parse_args(argv)
    if args.world_size < 1 or args.micro_batch_size < 1 or args.step_time_ms < 0:
        p.error("--world-size and --micro-batch-size must be >= 1, --step-time-ms >= 0")
    options = {"stoker.model.preset": args.preset}
    for key, value in (
        ("stoker.image.min-pixels", args.min_pixels),
        ("stoker.image.max-pixels", args.max_pixels),
        ("stoker.template.default-system-prompt", args.system_prompt),
    ):
        if value is not None:
            options[key] = str(value)
    try:
        prep = preprocessing(options)
    except ValueError as e:
        p.error(str(e))
    escape_unencodable_stdout()
    cfg = Config(
        args.dataset,
        args.s3_endpoint,
        args.tokenizer.resolve(),
        prep,
        args.glob,
        args.world_size,
        args.micro_batch_size,
        args.step_time_ms / 1000,
        args.seed,
    )
    print(
        f"naive serial loader: dataset={printable(args.dataset)} world_size={args.world_size} "
        f"micro_batch_size={args.micro_batch_size} step_time_ms={args.step_time_ms:g} "
        f"preset={args.preset} max_pixels={prep.max_pixels}",
        flush=True,
    )
    signal.signal(signal.SIGTERM, _terminate)
    totals, ok = run(cfg)
    if args.summary_json is not None:
        args.summary_json.write_text(json.dumps(totals))
    print("result: " + ("OK" if ok else "FAILED"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
