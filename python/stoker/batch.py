"""One batch file: its mapping, its checks against the schema, and the arrays over it.

The job publishes batch (step, rank) as one Arrow IPC *file* holding one record batch, columns
and schema metadata as ``schema/batch-schema.json`` defines them (mirrored by
:mod:`stoker.schema`). :func:`read_batch_file` memory-maps it, checks it (schema, metadata, row
count, back-filled slots, that every column lies inside the mapping; for a packed batch also
the per-row sample lists, ``cu_seqlens`` and ``position_ids`` against each other) and returns a
:class:`Batch` whose numpy arrays are views of the mapped memory: no copy, and the mapping stays
valid, even after the file is unlinked, for as long as an array or tensor built on it is alive.
A file that breaks the contract raises :class:`~stoker.protocol.BatchFormatError` naming it.
This module reads a file; which file and when is :class:`~stoker.reader.BatchReader`'s part.
The column views are :mod:`stoker.arrow_columns`', the packed-batch checks :mod:`stoker.packed`'s
and the pixel normalisation :mod:`stoker.pixels`'.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import EllipsisType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc

from .arrow_columns import data_buffer, fixed_rows, list_of_fixed, list_values, strings, view
from .packed import check_packed
from .pixels import (
    bfloat16_to_float32,
    normalize_uint8,
    normalize_uint8_torch,
    normalize_uint8_video,
    normalize_uint8_video_torch,
)
from .protocol import BatchFormatError, Manifest, VisionSettings
from .schema import (
    BACKFILLED_SLOTS_KEY,
    COLUMNS,
    IMAGE_TOKEN_ID_KEY,
    PACKING_MAX_TOKENS_KEY,
    PAD_TOKEN_ID_KEY,
    PIXEL_DTYPE_KEY,
    PIXEL_DTYPES,
    RANK_KEY,
    SLOTS_KEY,
    STEP_KEY,
    VIDEO_TOKEN_ID_KEY,
    match_column,
)

__all__ = ["Batch", "read_batch_file", "validate_schema"]


@dataclass
class Batch:
    """One (step, rank) batch; every array is a read-only view over the memory-mapped file.

    Shapes and dtypes (B = rows, L = padded sequence length, P = patches, D = patch dim,
    I = images, S = samples; unpacked, every row is one sample and S = B):

    * ``input_ids``, ``labels``, ``attention_mask``: ``(B, L)`` int64 (token ids; labels use
      -100 for ignored positions; mask is 1/0).
    * ``pixel_values``: ``(P, D)`` float32, normalized pixel patches of all images in row order;
      when ``pixel_dtype`` is ``"bfloat16"`` (sink option ``stoker.image.pixel-dtype: BFLOAT16``)
      uint16 holding the bfloat16 bits instead (numpy has no bfloat16): :meth:`to_torch` returns
      them as ``torch.bfloat16``, :func:`bfloat16_to_float32` widens them for numpy. When
      ``pixel_dtype`` is ``"uint8"`` (``UINT8``) uint8, the resized RGB samples before
      normalization in the same rows and positions: :meth:`to_torch` normalizes them (on its
      ``device``), :meth:`pixel_values_float32` with numpy, both to the float32 values a FLOAT32
      job writes, bit for bit (:func:`normalize_uint8`).
    * ``image_grid_thw``: ``(I, 3)`` int64, (grid_t, grid_h, grid_w) per image, in patches.
    * ``pixel_values_videos``: ``(PV, D)`` video patches of all videos in row order, in the file's
      element type as ``pixel_values`` (float32 values of the video processor's own arithmetic,
      batch-schema.json); ``video_grid_thw``: ``(V, 3)`` int64; ``second_per_grid_ts``:
      ``(V,)`` float32 seconds per temporal patch. Empty (V = 0) without videos.
    * ``sample_index``: ``(S,)`` int64, slot index of each sample's record in the run's
      deterministic order (``(mixture_start_step + epoch * steps_per_epoch) * W * B + position
      in the epoch's shuffled order``; for a stage from ``mixture_start_position > 0``,
      docs/batch-protocol.md "Row and slot order"); a back-filled sample repeats the index of
      the sample it copies.
    * ``source``: ``list[str]`` of length S, the name of the mixture source each sample's record
      belongs to (``"dataset"`` for a job run with ``stoker.dataset.path``), as in the dead
      letters.
    * ``location``: ``list[str]`` of length S, where each sample's record is: ``"<jsonl
      uri>:<1-based line>"``. A back-filled sample repeats the ``source`` and ``location`` of the
      sample it copies.
    * ``backfilled_slots``: ``tuple[int, ...]``, ascending positions ``0 .. S-1`` (unpacked: the
      rows) of samples that are a copy of another sample because their own record was
      dead-lettered or lay past the end of the epoch; empty when none. Weight them out of the
      loss to train on every record exactly once per epoch, e.g. ``keep = np.ones(S, bool);
      keep[list(batch.backfilled_slots)] = False`` (:attr:`sample_spans` gives their tokens).

    A **packed** batch (:attr:`packed`; job option ``stoker.packing.enabled``) holds several
    whole samples per row, one after another, each row at most :attr:`packing_max_tokens`
    tokens; B is then its number of rows R (:attr:`num_rows`), which the job chooses, and
    ``sample_index`` / ``source`` / ``location`` list the samples of row 0 first, then row 1's,
    ... (:attr:`row_offsets`). Only a packed batch has:

    * ``position_ids``: ``(4, B, L)`` int64, a strided view of the file (no copy): each
      sample's text positions ``0 .. n-1``, then its M-RoPE temporal, height and width
      positions, as transformers' ``get_rope_index`` gives the sample alone; the padding tail
      counts ``0 ..`` on all four axes.
    * ``cu_seqlens``: ``(N+1,)`` int32, flash-attention's varlen boundaries of the N
      sub-sequences (samples and padding tails) over the flattened ``(B*L,)`` tokens (row ``r``'s
      boundaries offset by ``r*L``); a new array.

    An unpacked batch has B = the manifest's ``micro_batch_size`` rows for every batch read by
    :class:`BatchReader`, or 0 when no slot of the batch held a sample; a packed batch has 0
    rows when its step had no sample.

    Arrays are not writable; the mapping stays valid (even after the file is unlinked) for as
    long as any array or tensor built from it is alive.
    """

    step: int
    rank: int
    path: str
    input_ids: np.ndarray
    labels: np.ndarray
    attention_mask: np.ndarray
    pixel_values: np.ndarray
    image_grid_thw: np.ndarray
    sample_index: np.ndarray
    source: list[str]
    location: list[str]
    metadata: dict[str, str]
    backfilled_slots: tuple[int, ...] = ()
    pixel_values_videos: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    video_grid_thw: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))
    second_per_grid_ts: np.ndarray = field(default_factory=lambda: np.zeros((0,), np.float32))
    #: Element type of ``pixel_values`` (metadata ``stoker.pixel_dtype``): float32, bfloat16 or
    #: uint8.
    pixel_dtype: str = "float32"
    #: The job's vision settings (``Manifest.vision``, set by :class:`~stoker.BatchReader` and by
    #: ``read_batch_file(..., vision=...)``): what normalizes uint8 ``pixel_values``; ``None``
    #: when not given.
    vision: VisionSettings | None = None
    #: (start address, size in bytes) of the file mapping the arrays live in.
    mapping_range: tuple[int, int] = (0, 0)
    #: T, tokens per packed row (metadata ``stoker.packing_max_tokens``); ``None``: not packed.
    packing_max_tokens: int | None = None
    #: Packed batches: ``(4, B, L)`` int64 view (text, temporal, height, width); else ``None``.
    position_ids: np.ndarray | None = None
    #: Packed batches: ``(N+1,)`` int32 flattened sub-sequence boundaries; else ``None``.
    cu_seqlens: np.ndarray | None = None
    _row_offsets: np.ndarray | None = field(default=None, repr=False)
    _sample_spans: np.ndarray | None = field(default=None, repr=False)
    _keepalive: Any = field(default=None, repr=False)

    @property
    def packed(self) -> bool:
        """Whether the rows hold several samples each (metadata ``stoker.packing_max_tokens``)."""
        return self.packing_max_tokens is not None

    @property
    def num_samples(self) -> int:
        """S, the number of samples, back-filled ones included: unpacked the number of rows (the
        micro-batch size, or 0); packed those of every row."""
        return int(self.sample_index.shape[0])

    @property
    def num_rows(self) -> int:
        """B (packed: R), the number of rows of ``input_ids``."""
        return int(self.input_ids.shape[0])

    @property
    def row_offsets(self) -> np.ndarray:
        """``(B+1,)`` int64: the samples of row ``r`` are positions ``row_offsets[r] ..
        row_offsets[r+1] - 1`` of ``sample_index``, ``source`` and ``location`` (unpacked ``0 ..
        B``)."""
        if self._row_offsets is None:
            offsets = np.arange(self.num_rows + 1, dtype=np.int64)
            offsets.setflags(write=False)
            self._row_offsets = offsets
        return self._row_offsets

    @property
    def sample_spans(self) -> np.ndarray:
        """``(S, 3)`` int64 ``(row, start, end)``: sample ``k``'s tokens are ``input_ids[row,
        start:end]`` (unpacked: row ``k``, from 0 to its ``attention_mask`` sum)."""
        if self._sample_spans is None:
            n = self.num_rows
            spans = np.zeros((n, 3), dtype=np.int64)
            spans[:, 0] = np.arange(n)
            spans[:, 2] = self.attention_mask.sum(axis=1)
            spans.setflags(write=False)
            self._sample_spans = spans
        return self._sample_spans

    @property
    def seq_len(self) -> int:
        """L, the padded sequence length."""
        return int(self.input_ids.shape[1])

    @property
    def num_images(self) -> int:
        """I, the number of images in the batch."""
        return int(self.image_grid_thw.shape[0])

    @property
    def pad_token_id(self) -> int | None:
        """Pad token id from the schema metadata, if present."""
        v = self.metadata.get(PAD_TOKEN_ID_KEY)
        return int(v) if v not in (None, "") else None

    def file_bytes(self) -> memoryview:
        """The whole batch file as a read-only byte view of the mapping (no copy).

        Valid while this batch is alive, also after the file was unlinked; e.g.
        ``hashlib.sha256(batch.file_bytes()).hexdigest()`` fingerprints the batch.
        """
        return memoryview(self._keepalive[1])

    @property
    def image_token_id(self) -> int:
        """Token id of ``<|image_pad|>`` (metadata ``stoker.image_token_id``; 151655).

        Raises:
            BatchFormatError: the file's metadata lacks it or it is not an integer.
        """
        v = self.metadata.get(IMAGE_TOKEN_ID_KEY)
        try:
            return int(v)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise BatchFormatError(
                f"{self.path}: metadata stoker.image_token_id={v!r} is not a token id"
            ) from None

    @property
    def video_token_id(self) -> int | None:
        """Token id of ``<|video_pad|>`` (metadata ``stoker.video_token_id``; 151656), or
        ``None`` when the file does not name one.

        Raises:
            BatchFormatError: the value is not an integer.
        """
        v = self.metadata.get(VIDEO_TOKEN_ID_KEY)
        if v is None:
            return None
        try:
            return int(v)
        except ValueError:
            raise BatchFormatError(
                f"{self.path}: metadata stoker.video_token_id={v!r} is not a token id"
            ) from None

    @property
    def num_videos(self) -> int:
        """V, the number of videos in the batch."""
        return int(self.video_grid_thw.shape[0])

    @property
    def mm_token_type_ids(self) -> np.ndarray:
        """``(B, L)`` int64: 1 where ``input_ids`` is the image token, 2 where it is the video
        token, 0 elsewhere (text, timestamps, vision start/end and padding). A new read-only
        array, not a view of the file.

        Matches what the Hugging Face Qwen-VL processors return under this name
        (``ProcessorMixin.create_mm_token_type_ids``, transformers 5.23.0: 0 text, 1 image,
        2 video). transformers 5's Qwen2-VL, Qwen2.5-VL and Qwen3-VL models need it to compute
        M-RoPE positions: Qwen2-VL raises without it, Qwen2.5-VL silently falls back to 1-D
        positions.
        """
        types = (self.input_ids == self.image_token_id).astype(np.int64)
        video = self.video_token_id
        if video is not None:
            types[self.input_ids == video] = 2
        types.setflags(write=False)  # read-only like the views of the file
        return types

    def arrays(self) -> dict[str, np.ndarray]:
        """The model inputs as numpy arrays, named as the Hugging Face Qwen-VL processors return
        them: ``input_ids``, ``labels``, ``attention_mask``, ``mm_token_type_ids`` (B, L) int64,
        ``pixel_values`` (P, D) as stored (:attr:`pixel_values`: float32 as the processors
        return it, or bfloat16 bits or uint8 samples), ``image_grid_thw`` (I, 3) int64. All but
        ``mm_token_type_ids`` are views of the file.

        A packed batch's inputs have ``position_ids`` (4, B, L) int64 instead of
        ``attention_mask``: transformers' Qwen2-VL, Qwen2.5-VL and Qwen3-VL (5.23) take the
        text axis of 4-row ``position_ids`` to build a block-diagonal causal mask (each sample
        attends only to itself) only when ``attention_mask`` is ``None`` (and no cache is
        used: :meth:`model_flags`); with the mask, attention would cross the samples of a
        row. (With ``attn_implementation
        "flash_attention_2"`` that mask is not built for more than one row: see
        :meth:`flash_varlen_kwargs`.)

        A batch holding videos (V > 0) also has ``pixel_values_videos`` (PV, D) as stored,
        ``video_grid_thw`` (V, 3) int64 and ``second_per_grid_ts`` (V,) float32 (Qwen2.5-VL's
        input; Qwen2-VL and Qwen3-VL do not read it); a batch without videos has none of the
        three, as the processors return none for a text-and-image conversation."""
        if self.packed:
            assert self.position_ids is not None
            out = {
                "input_ids": self.input_ids,
                "labels": self.labels,
                "position_ids": self.position_ids,
                "mm_token_type_ids": self.mm_token_type_ids,
                "pixel_values": self.pixel_values,
                "image_grid_thw": self.image_grid_thw,
            }
        else:
            out = {
                "input_ids": self.input_ids,
                "labels": self.labels,
                "attention_mask": self.attention_mask,
                "mm_token_type_ids": self.mm_token_type_ids,
                "pixel_values": self.pixel_values,
                "image_grid_thw": self.image_grid_thw,
            }
        if self.num_videos:
            out["pixel_values_videos"] = self.pixel_values_videos
            out["video_grid_thw"] = self.video_grid_thw
            out["second_per_grid_ts"] = self.second_per_grid_ts
        return out

    def flash_varlen_kwargs(self, device: Any = None) -> dict[str, Any]:
        """A packed batch's sub-sequence boundaries as flash-attention's varlen arguments, named
        as transformers' ``FlashAttentionKwargs``: ``cu_seq_lens_q`` and ``cu_seq_lens_k``
        (:attr:`cu_seqlens` as an int32 ``(N+1,)`` tensor on ``device``, the same tensor) and
        ``max_length_q`` and ``max_length_k`` (int, the longest sub-sequence), over the batch's
        ``B*L`` tokens flattened row after row (what ``flash_attn_varlen_func`` takes).

        Not part of :meth:`to_torch`: transformers' Qwen-VL models (5.23) hand their keyword
        arguments to the vision tower too, whose flash-attention call sets ``cu_seq_lens_q`` of
        its own (a batch with images then raises ``TypeError``), and eager and SDPA attention
        ignore them. With ``attn_implementation="flash_attention_2"`` and more than one row,
        the models neither build the block-diagonal mask nor derive the boundaries from
        ``position_ids`` (they do only for a single row), so attention would cross samples:
        pass these to your own varlen attention, or reshape the batch to one row of ``B*L``
        tokens (``input_ids``, ``labels``, ``mm_token_type_ids`` to ``(1, B*L)``,
        ``position_ids`` to ``(4, 1, B*L)``), from which transformers derives them itself.

        Raises:
            ValueError: the batch is not packed.
            ImportError: torch is not installed.
        """
        if self.cu_seqlens is None:
            raise ValueError(f"{self.path}: not a packed batch: it has no cu_seqlens")
        import torch

        cu = torch.from_numpy(self.cu_seqlens)
        if device is not None:
            cu = cu.to(device)
        longest = int(np.diff(self.cu_seqlens).max()) if self.cu_seqlens.size > 1 else 0
        return {
            "cu_seq_lens_q": cu,
            "cu_seq_lens_k": cu,
            "max_length_q": longest,
            "max_length_k": longest,
        }

    def pixel_values_float32(self) -> np.ndarray:
        """``(P, D)`` float32 ``pixel_values`` with numpy, whatever the file's element type.

        float32: :attr:`pixel_values` itself (a view of the file); bfloat16: the bits widened
        (:func:`bfloat16_to_float32`, exact); uint8: normalized with :attr:`vision` by
        :func:`normalize_uint8`, bit for bit the values a FLOAT32 job writes. The last two are
        new arrays.

        Raises:
            ValueError: a uint8 batch without :attr:`vision` (read it with
                ``read_batch_file(path, vision=manifest.vision)`` or through
                :class:`~stoker.BatchReader`).
        """
        if self.pixel_dtype == "bfloat16":
            return bfloat16_to_float32(self.pixel_values)
        if self.pixel_dtype == "uint8":
            return normalize_uint8(self.pixel_values, self._vision_for_uint8())
        return self.pixel_values

    def pixel_values_videos_float32(self) -> np.ndarray:
        """``(PV, D)`` float32 ``pixel_values_videos`` with numpy, as
        :meth:`pixel_values_float32` does for images (uint8: :func:`normalize_uint8_video`, the
        video processor's arithmetic).

        Raises:
            ValueError: a uint8 batch without :attr:`vision`.
        """
        if self.pixel_dtype == "bfloat16":
            return bfloat16_to_float32(self.pixel_values_videos)
        if self.pixel_dtype == "uint8":
            return normalize_uint8_video(self.pixel_values_videos, self._vision_for_uint8())
        return self.pixel_values_videos

    def to_torch(
        self,
        device: Any = None,
        *,
        pixel_dtype: Any = None,
        non_blocking: bool = False,
    ) -> dict[str, Any]:
        """Return ``{name: torch.Tensor}`` (packed: and ``use_cache=False``), the keyword
        arguments of the transformers Qwen-VL models' ``forward``, so
        ``model(**batch.to_torch("cuda"))`` works.

        Keys: ``input_ids``, ``labels``, ``attention_mask``, ``mm_token_type_ids`` (B, L)
        int64; ``pixel_values`` (P, D) float32 or torch.bfloat16 and ``image_grid_thw`` (I, 3)
        int64 when the batch holds images (I > 0), as the processors return them only then;
        ``pixel_values_videos``, ``video_grid_thw`` and ``second_per_grid_ts`` when it holds
        videos (:meth:`arrays`). A packed batch has ``position_ids`` (4, B, L) int64 (a strided view of the file)
        instead of ``attention_mask``, and ``use_cache`` ``False`` (a bool, not a tensor:
        :meth:`model_flags`), so that the model attends within each sample only (see
        :meth:`arrays`). Provenance (``sample_index``, ``source``, ``location``) stays
        on the :class:`Batch`.

        Args:
            device: ``None``: CPU tensors sharing memory with the mapping
                (``torch.from_numpy``, no copy; ``mm_token_type_ids``, a uint8 batch's
                ``pixel_values`` and a converted ``pixel_dtype`` are new), backed by read-only
                memory: do not write to them in place. A device (``"cuda"``,
                ``torch.device(...)``, ``"cpu"``): every tensor ``.to(device)``; the pixels of
                a uint8 batch travel as uint8 (a quarter of float32's bytes) and are
                normalized there.
            pixel_dtype: ``torch.float32`` or ``torch.bfloat16``; ``None``: the file's type
                (float32 for a uint8 batch). A float32 file's values are rounded to bfloat16
                by ``Tensor.to`` (nearest even, as the BFLOAT16 sink rounds); a bfloat16 file's
                are widened exactly.
            non_blocking: passed to ``Tensor.to`` (useful from pinned memory only).

        A uint8 batch's values are :func:`normalize_uint8_torch`'s: on the CPU bit for bit the
        float32 a FLOAT32 job writes (and with ``torch.bfloat16`` the BFLOAT16 job's bits).

        Raises:
            ImportError: torch is not installed.
            ValueError: ``pixel_dtype`` is neither float32 nor bfloat16, or a uint8 batch has
                no :attr:`vision`.
        """
        try:
            import torch
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                "Batch.to_torch() needs PyTorch, which is not installed; "
                "install torch or use Batch.arrays() for numpy arrays"
            ) from e
        if pixel_dtype not in (None, torch.float32, torch.bfloat16):
            raise ValueError(
                f"pixel_dtype must be torch.float32 or torch.bfloat16, got {pixel_dtype!r}"
            )
        tensors = self._torch_views()
        if device is not None:
            tensors = {k: v.to(device, non_blocking=non_blocking) for k, v in tensors.items()}
        pv = tensors.get("pixel_values")
        if pv is None:
            pass
        elif self.pixel_dtype == "uint8":
            tensors["pixel_values"] = normalize_uint8_torch(
                pv, self._vision_for_uint8(), dtype=pixel_dtype or torch.float32
            )
        elif pixel_dtype is not None and pv.dtype != pixel_dtype:
            tensors["pixel_values"] = pv.to(pixel_dtype)
        if "pixel_values_videos" in tensors:
            pvv = tensors["pixel_values_videos"]
            if self.pixel_dtype == "uint8":
                tensors["pixel_values_videos"] = normalize_uint8_video_torch(
                    pvv, self._vision_for_uint8(), dtype=pixel_dtype or torch.float32
                )
            elif pixel_dtype is not None and pvv.dtype != pixel_dtype:
                tensors["pixel_values_videos"] = pvv.to(pixel_dtype)
        tensors.update(self.model_flags())
        return tensors

    def model_flags(self) -> dict[str, Any]:
        """The non-tensor keyword arguments :meth:`to_torch` adds: ``{"use_cache": False}`` for
        a packed batch, ``{}`` otherwise.

        transformers' Qwen-VL text models (5.23) build the block-diagonal mask from the
        packed ``position_ids`` only without a cache (``masking_utils._preprocess_mask_arguments``
        looks for packed sequences only when ``past_key_values`` is ``None``), and with the
        configs' default ``use_cache=True`` their ``forward`` creates one, in training mode
        too (unless gradient checkpointing turns the cache off): attention would then cross
        the samples of a row, silently."""
        return {"use_cache": False} if self.packed else {}

    def _torch_views(self) -> dict[str, Any]:
        """:meth:`arrays` as CPU tensors over the same memory; a bfloat16 batch's
        ``pixel_values`` as ``torch.bfloat16``, a uint8 batch's still uint8."""
        import torch

        with warnings.catch_warnings():
            # from_numpy warns about non-writable arrays; sharing read-only memory is the point.
            warnings.simplefilter("ignore", UserWarning)
            tensors = {k: torch.from_numpy(v) for k, v in self.arrays().items()}
            if self.pixel_dtype == "bfloat16":
                # torch has no uint16 view; int16 has the same bits and itemsize
                bits = torch.from_numpy(self.pixel_values.view(np.int16))
                tensors["pixel_values"] = bits.view(torch.bfloat16)
                if "pixel_values_videos" in tensors:
                    vbits = torch.from_numpy(self.pixel_values_videos.view(np.int16))
                    tensors["pixel_values_videos"] = vbits.view(torch.bfloat16)
        if tensors["image_grid_thw"].shape[0] == 0:
            # as the processors return no image inputs for a text without images: the models run
            # their vision tower on any pixel_values given, and fail on none
            del tensors["pixel_values"], tensors["image_grid_thw"]
        return tensors

    def _vision_for_uint8(self) -> VisionSettings:
        if self.vision is None:
            raise ValueError(
                f"{self.path}: pixel_values are uint8 (stoker.pixel_dtype=uint8) and need the "
                "job's vision settings to be normalized: read the file with "
                "read_batch_file(path, vision=Manifest.load(<job dir>/manifest.json).vision) "
                "or through BatchReader"
            )
        return self.vision


def checks_for(manifest: Manifest, rank: int, step: int) -> dict[str, Any]:
    """:func:`read_batch_file`'s checks (and vision settings) for the file of (``step``,
    ``rank``) of ``manifest``'s generation."""
    return {
        "expected_step": step,
        "expected_rank": rank,
        "patch_dim": manifest.patch_dim,
        "micro_batch_size": manifest.micro_batch_size,
        "vision": manifest.vision,
        "packing_max_tokens": manifest.packing_max_tokens,
    }


def read_batch_file(
    path: str | os.PathLike[str],
    *,
    expected_step: int | None = None,
    expected_rank: int | None = None,
    patch_dim: int | None = None,
    micro_batch_size: int | None = None,
    vision: VisionSettings | None = None,
    packing_max_tokens: int | None | EllipsisType = ...,
) -> Batch:
    """Memory-map one batch file and build a :class:`Batch` over it without copying.

    Args:
        path: an Arrow IPC file ``step-<s>.arrow``.
        expected_step, expected_rank: check the ``stoker.step`` / ``stoker.rank`` metadata.
        patch_dim: check D of ``pixel_values`` (the manifest's ``patch_dim``).
        micro_batch_size: check that ``stoker.slots`` is this (the manifest's
            ``micro_batch_size``) and, unpacked, that the batch has exactly this many rows, or 0.
        vision: the job's vision settings (``Manifest.vision``), kept as :attr:`Batch.vision`
            to normalize uint8 ``pixel_values``; for a uint8 batch, checked to give D values
            per row (the other element types are already normalized and use no vision).
        packing_max_tokens: the manifest's ``packing_max_tokens``: an int requires a packed
            batch of that ``stoker.packing_max_tokens``, ``None`` an unpacked batch; ``...``
            (the default) accepts either.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        BatchFormatError: not an Arrow IPC file, not exactly one record batch, missing or
            mistyped columns, nulls, inconsistent lengths, step/rank/slots metadata that
            disagrees with the file's place, a row count other than ``micro_batch_size`` or 0,
            an invalid ``stoker.backfilled_slots``, a uint8 batch with ``vision`` for another
            D, or data that would need a copy (e.g. compressed buffers). For packed batches
            also: packing other than ``packing_max_tokens`` says, per-row sample lists that
            disagree with each other or with ``cu_seqlens``, a row without a sample,
            ``cu_seqlens`` that do not run strictly increasing from 0 to L, rows longer than
            ``stoker.packing_max_tokens`` or L not the longest row, an ``attention_mask``,
            ``labels`` or padding that disagrees with the boundaries, ``position_ids`` whose
            text axis does not count ``0 .. n-1`` within each sub-sequence or whose padding
            tail does not count from 0, back-filled positions outside ``0 .. S-1``.
    """
    path = Path(path)
    source = pa.memory_map(str(path), "r")
    size = source.size()
    whole = source.read_buffer(size)  # zero-copy view of the whole mapping
    source.seek(0)
    lo, hi = whole.address, whole.address + size
    try:
        reader = pa.ipc.open_file(source)
    except pa.ArrowInvalid as e:
        raise BatchFormatError(f"{path}: not an Arrow IPC file: {e}") from e
    schema = reader.schema
    if reader.num_record_batches > 1:
        raise BatchFormatError(
            f"{path}: holds {reader.num_record_batches} record batches, expected exactly 1"
        )
    max_tokens = validate_schema(schema, path, patch_dim=patch_dim)
    if packing_max_tokens is not ... and max_tokens != packing_max_tokens:
        want = (
            "unpacked batches"
            if packing_max_tokens is None
            else f"batches packed into rows of {packing_max_tokens} tokens"
        )
        got = "an unpacked batch" if max_tokens is None else f"rows of {max_tokens} tokens"
        raise BatchFormatError(
            f"{path}: the manifest's packing_max_tokens says {want}, the file holds {got}"
        )
    if reader.num_record_batches == 1:
        rb = reader.get_batch(0)
    else:  # a writer that wrote no record batch at all: an empty batch
        rb = pa.RecordBatch.from_pylist([], schema=schema)

    meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
    for key, want_value in ((STEP_KEY, expected_step), (RANK_KEY, expected_rank)):
        if want_value is not None and key in meta and meta[key] != str(want_value):
            raise BatchFormatError(
                f"{path}: metadata {key}={meta[key]!r} but the file is for {want_value}"
            )

    cols = {name: rb.column(name) for name in schema.names}
    b = rb.num_rows
    input_ids = fixed_rows(cols["input_ids"], path, "input_ids", "int64")
    labels = fixed_rows(cols["labels"], path, "labels", "int64")
    attention_mask = fixed_rows(cols["attention_mask"], path, "attention_mask", "int64")
    pixel_dtype = meta.get(PIXEL_DTYPE_KEY, "float32")
    pixel_spec = next(c for c in COLUMNS if c.name == "pixel_values")
    pixel_values = list_of_fixed(
        cols["pixel_values"],
        path,
        "pixel_values",
        pixel_spec.variants[pixel_dtype][1]
        if pixel_dtype in pixel_spec.variants
        else pixel_spec.reader_dtype,
    )
    if pixel_dtype == "uint8" and vision is not None and pixel_values.shape[1] != vision.patch_dim:
        raise BatchFormatError(
            f"{path}: pixel_values has D={pixel_values.shape[1]}, the vision settings give "
            f"{vision.patch_dim}"
        )
    image_grid_thw = list_of_fixed(cols["image_grid_thw"], path, "image_grid_thw", "int64")
    pixel_values_videos = list_of_fixed(
        cols["pixel_values_videos"],
        path,
        "pixel_values_videos",
        pixel_spec.variants[pixel_dtype][1]
        if pixel_dtype in pixel_spec.variants
        else pixel_spec.reader_dtype,
    )
    video_grid_thw = list_of_fixed(cols["video_grid_thw"], path, "video_grid_thw", "int64")
    second_per_grid_ts, _ = list_values(
        cols["second_per_grid_ts"], path, "second_per_grid_ts", "float32"
    )
    if second_per_grid_ts.shape[0] != video_grid_thw.shape[0]:
        raise BatchFormatError(
            f"{path}: second_per_grid_ts has {second_per_grid_ts.shape[0]} values for "
            f"{video_grid_thw.shape[0]} videos"
        )
    expected_pv = int(np.prod(video_grid_thw, axis=1).sum()) if video_grid_thw.size else 0
    if expected_pv != pixel_values_videos.shape[0]:
        raise BatchFormatError(
            f"{path}: pixel_values_videos has {pixel_values_videos.shape[0]} patches but "
            f"video_grid_thw implies {expected_pv}"
        )
    si = cols["sample_index"]
    row_offsets: np.ndarray | None = None
    provenance: dict[str, list[str]] = {}
    if max_tokens is None:
        sample_index = view(
            data_buffer(si, path, "sample_index"), "int64", si.offset, b, path, "sample_index"
        )
        for name in ("source", "location"):
            if cols[name].null_count:
                raise BatchFormatError(f"{path}: column {name!r} holds nulls")
            provenance[name] = cols[name].to_pylist()
    else:
        sample_index, row_offsets = list_values(si, path, "sample_index", "int64")
        for name in ("source", "location"):
            provenance[name], offsets = strings(cols[name], path, name)
            if not np.array_equal(row_offsets, offsets):
                raise BatchFormatError(
                    f"{path}: sample_index and {name} list different samples per row "
                    f"({np.diff(row_offsets).tolist()} vs {np.diff(offsets).tolist()})"
                )

    if not (labels.shape == attention_mask.shape == input_ids.shape):
        raise BatchFormatError(f"{path}: input_ids/labels/attention_mask shapes differ")
    if b and image_grid_thw.size:
        expected_p = int(np.prod(image_grid_thw, axis=1).sum())
        if expected_p != pixel_values.shape[0]:
            raise BatchFormatError(
                f"{path}: pixel_values has {pixel_values.shape[0]} patches but image_grid_thw implies {expected_p}"
            )
    packing = None
    if max_tokens is not None:
        assert row_offsets is not None
        pad = meta.get(PAD_TOKEN_ID_KEY)
        packing = check_packed(
            path,
            cols,
            input_ids,
            labels,
            attention_mask,
            row_offsets,
            max_tokens,
            int(pad) if pad not in (None, "") else None,
        )
    for name, a in (
        ("input_ids", input_ids),
        ("labels", labels),
        ("attention_mask", attention_mask),
        ("pixel_values", pixel_values),
        ("image_grid_thw", image_grid_thw),
        ("pixel_values_videos", pixel_values_videos),
        ("video_grid_thw", video_grid_thw),
        ("second_per_grid_ts", second_per_grid_ts),
        ("sample_index", sample_index),
        ("position_ids", None if packing is None else packing.position_rows),
    ):
        if a is None:
            continue
        if not a.flags.c_contiguous:
            raise BatchFormatError(f"{path}: column {name!r} is not contiguous")
        if a.size and not (lo <= a.ctypes.data and a.ctypes.data + a.nbytes <= hi):
            raise BatchFormatError(
                f"{path}: column {name!r} is not inside the file mapping (compressed IPC buffers?); "
                "the reader refuses to copy"
            )

    if micro_batch_size is not None:
        if max_tokens is None and b not in (0, micro_batch_size):
            raise BatchFormatError(
                f"{path}: holds {b} rows, expected micro_batch_size {micro_batch_size} (or 0)"
            )
        if meta.get(SLOTS_KEY, str(micro_batch_size)) != str(micro_batch_size):
            raise BatchFormatError(
                f"{path}: metadata stoker.slots={meta['stoker.slots']!r} but the manifest's "
                f"micro_batch_size is {micro_batch_size}"
            )
    backfilled = _parse_backfilled(
        meta.get(BACKFILLED_SLOTS_KEY, ""),
        int(sample_index.shape[0]),
        path,
        packed=max_tokens is not None,
    )

    step = int(meta.get(STEP_KEY, expected_step if expected_step is not None else -1))
    rank = int(meta.get(RANK_KEY, expected_rank if expected_rank is not None else -1))
    return Batch(
        step=step,
        rank=rank,
        path=str(path),
        input_ids=input_ids,
        labels=labels,
        attention_mask=attention_mask,
        pixel_values=pixel_values,
        image_grid_thw=image_grid_thw,
        sample_index=sample_index,
        source=provenance["source"],
        location=provenance["location"],
        metadata=meta,
        backfilled_slots=backfilled,
        pixel_values_videos=pixel_values_videos,
        video_grid_thw=video_grid_thw,
        second_per_grid_ts=second_per_grid_ts,
        pixel_dtype=pixel_dtype,
        vision=vision,
        mapping_range=(lo, size),
        packing_max_tokens=max_tokens,
        position_ids=None if packing is None else packing.position_ids,
        cu_seqlens=None if packing is None else packing.cu_seqlens,
        _row_offsets=None if packing is None else packing.row_offsets,
        _sample_spans=None if packing is None else packing.sample_spans,
        _keepalive=(source, whole, rb),
    )


def _parse_backfilled(text: str, rows: int, path: Path, *, packed: bool) -> tuple[int, ...]:
    """Parse ``stoker.backfilled_slots`` (``""`` or e.g. ``"0,2"``) into ascending row numbers
    (packed: positions of the ``rows`` samples).

    Raises:
        BatchFormatError: not comma-separated integers, a slot outside ``[0, rows)``, a
            repeated slot, or (unpacked) every row back-filled. A packed batch may be all
            back-fill: the copy a rank gets when the step's balance left it without a sample.
    """
    if not text.strip():
        return ()
    try:
        slots = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise BatchFormatError(
            f"{path}: metadata stoker.backfilled_slots={text!r} is not comma-separated integers"
        ) from None
    if any(not 0 <= k < rows for k in slots) or len(set(slots)) != len(slots):
        raise BatchFormatError(
            f"{path}: metadata stoker.backfilled_slots={text!r} must list distinct "
            f"{'samples' if packed else 'rows'} in [0, {rows})"
        )
    if len(slots) == rows and not packed:
        raise BatchFormatError(
            f"{path}: metadata stoker.backfilled_slots={text!r} marks every row back-filled; "
            "a batch without a sample has 0 rows"
        )
    return tuple(sorted(slots))


def validate_schema(
    schema: pa.Schema, path: str | os.PathLike[str], *, patch_dim: int | None = None
) -> int | None:
    """Check ``schema`` against :data:`stoker.schema.COLUMNS`: a packed batch's (metadata
    ``stoker.packing_max_tokens`` present) against the columns' packed types and with the
    ``packed_only`` columns, an unpacked batch's without them.

    Returns:
        The packed batch's ``stoker.packing_max_tokens``, or ``None`` for an unpacked batch.

    Raises:
        BatchFormatError: naming ``path`` and every missing, mistyped or (unpacked) packed-only
            column, or a ``stoker.packing_max_tokens`` that is not a positive integer.
    """
    problems = []
    names = set(schema.names)
    bound: dict[str, int] = {}
    meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
    pixel_dtype = meta.get(PIXEL_DTYPE_KEY, "float32")
    if pixel_dtype not in PIXEL_DTYPES:
        problems.append(f"metadata stoker.pixel_dtype={pixel_dtype!r} is not one of {PIXEL_DTYPES}")
        pixel_dtype = "float32"
    max_tokens: int | None = None
    if PACKING_MAX_TOKENS_KEY in meta:
        text = meta[PACKING_MAX_TOKENS_KEY]
        if text.isdigit() and int(text) > 0:  # isdigit: no sign, no spaces
            max_tokens = int(text)
        else:
            raise BatchFormatError(
                f"{path}: metadata {PACKING_MAX_TOKENS_KEY}={text!r} is not a positive integer"
            )
    packed = max_tokens is not None
    for spec in COLUMNS:
        if spec.packed_only and not packed:
            if spec.name in names:
                problems.append(
                    f"column {spec.name!r} is only in packed batches, but metadata "
                    f"{PACKING_MAX_TOKENS_KEY} is absent"
                )
            continue
        if spec.name not in names:
            problems.append(f"missing column {spec.name!r} ({spec.arrow_type_in(packed)})")
            continue
        t = schema.field(spec.name).type
        variant = pixel_dtype if pixel_dtype in spec.variants else None
        got = match_column(spec, t, variant, packed=packed)
        if got is None:
            expected = spec.arrow_type_in(packed, variant)
            detail = f" (stoker.pixel_dtype={pixel_dtype})" if variant else ""
            if packed and spec.packed is not None:
                detail += f" (packed: {PACKING_MAX_TOKENS_KEY}={max_tokens})"
            problems.append(f"column {spec.name!r} has type {t}, expected {expected}{detail}")
            continue
        for sym, v in got.items():
            if bound.setdefault(sym, v) != v:
                problems.append(
                    f"column {spec.name!r} has {sym}={v}, other columns have {sym}={bound[sym]}"
                )
    if patch_dim is not None and bound.get("D", patch_dim) != patch_dim:
        problems.append(f"pixel_values has D={bound['D']}, manifest patch_dim={patch_dim}")
    if problems:
        raise BatchFormatError(
            f"{path}: schema does not match batch-schema.json: " + "; ".join(problems)
        )
    return max_tokens
