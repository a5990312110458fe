"""One batch file: its mapping, its checks against the schema, and the arrays over it.

The job publishes batch (step, rank) as one Arrow IPC *file* holding one record batch, columns
and schema metadata as ``schema/batch-schema.json`` defines them (mirrored by
:mod:`stoker.schema`). :func:`read_batch_file` memory-maps it, checks it (schema, metadata, row
count, back-filled slots, that every column lies inside the mapping) and returns a
:class:`Batch` whose numpy arrays are views of the mapped memory: no copy, and the mapping stays
valid, even after the file is unlinked, for as long as an array or tensor built on it is alive.
A file that breaks the contract raises :class:`~stoker.protocol.BatchFormatError` naming it.
This module reads a file; which file and when is :class:`~stoker.reader.BatchReader`'s part.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.ipc

from .protocol import BatchFormatError, Manifest
from .schema import COLUMNS, PIXEL_DTYPES, match_column

__all__ = ["Batch", "bfloat16_to_float32", "read_batch_file", "validate_schema"]


@dataclass
class Batch:
    """One (step, rank) batch; every array is a read-only view over the memory-mapped file.

    Shapes and dtypes (B = rows, L = padded sequence length, P = patches, D = patch dim,
    I = images):

    * ``input_ids``, ``labels``, ``attention_mask``: ``(B, L)`` int64 (token ids; labels use
      -100 for ignored positions; mask is 1/0).
    * ``pixel_values``: ``(P, D)`` float32, normalized pixel patches of all images in row order;
      when ``pixel_dtype`` is ``"bfloat16"`` (sink option ``stoker.image.pixel-dtype: BFLOAT16``)
      uint16 holding the bfloat16 bits instead (numpy has no bfloat16): :meth:`to_torch` returns
      them as ``torch.bfloat16``, :func:`bfloat16_to_float32` widens them for numpy.
    * ``image_grid_thw``: ``(I, 3)`` int64, (grid_t, grid_h, grid_w) per image, in patches.
    * ``sample_index``: ``(B,)`` int64, slot index of each row's record in the run's
      deterministic order (``epoch * steps_per_epoch * W * B + position in the epoch's shuffled
      order``); a back-filled row repeats the index of the row it copies.
    * ``source``: ``list[str]`` of length B, ``"<jsonl uri>:<1-based line>"``.
    * ``backfilled_slots``: ``tuple[int, ...]``, ascending rows (slots ``0 .. B-1``) that hold a
      copy of another row of the batch because their own record was dead-lettered or lay past
      the end of the epoch; empty when none. Weight them out of the loss to train on every
      record exactly once per epoch, e.g. ``keep = np.ones(B, bool);
      keep[list(batch.backfilled_slots)] = False``.

    B is the manifest's ``micro_batch_size`` for every batch read by :class:`BatchReader`, or 0
    when no slot of the batch held a sample.

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
    metadata: dict[str, str]
    backfilled_slots: tuple[int, ...] = ()
    #: Element type of ``pixel_values`` (metadata ``stoker.pixel_dtype``): float32 or bfloat16.
    pixel_dtype: str = "float32"
    #: (start address, size in bytes) of the file mapping the arrays live in.
    mapping_range: tuple[int, int] = (0, 0)
    _keepalive: Any = field(default=None, repr=False)

    @property
    def num_samples(self) -> int:
        """B, the number of rows (the micro-batch size, or 0), back-filled rows included."""
        return int(self.input_ids.shape[0])

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
        v = self.metadata.get("stoker.pad_token_id")
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
        v = self.metadata.get("stoker.image_token_id")
        try:
            return int(v)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise BatchFormatError(
                f"{self.path}: metadata stoker.image_token_id={v!r} is not a token id"
            ) from None

    @property
    def mm_token_type_ids(self) -> np.ndarray:
        """``(B, L)`` int64: 1 where ``input_ids`` is the image token, 0 elsewhere (text and
        padding). A new read-only array, not a view of the file.

        Matches what the Hugging Face Qwen-VL processors return under this name
        (``ProcessorMixin.create_mm_token_type_ids``, transformers 5.23.0: 0 text, 1 image,
        2 video; Stoker batches hold no video). transformers 5's Qwen2-VL, Qwen2.5-VL and
        Qwen3-VL models need it to compute M-RoPE positions: Qwen2-VL raises without it,
        Qwen2.5-VL silently falls back to 1-D positions.
        """
        types = (self.input_ids == self.image_token_id).astype(np.int64)
        types.setflags(write=False)  # read-only like the views of the file
        return types

    def arrays(self) -> dict[str, np.ndarray]:
        """The model inputs as numpy arrays, named and typed as the Hugging Face Qwen-VL
        processors return them: ``input_ids``, ``labels``, ``attention_mask``,
        ``mm_token_type_ids`` (B, L) int64, ``pixel_values`` (P, D), ``image_grid_thw`` (I, 3)
        int64. All but ``mm_token_type_ids`` are views of the file."""
        return {
            "input_ids": self.input_ids,
            "labels": self.labels,
            "attention_mask": self.attention_mask,
            "mm_token_type_ids": self.mm_token_type_ids,
            "pixel_values": self.pixel_values,
            "image_grid_thw": self.image_grid_thw,
        }

    def to_torch(self) -> dict[str, Any]:
        """Return ``{name: torch.Tensor}`` sharing memory with the mapping (``torch.from_numpy``).

        Keys: ``input_ids``, ``labels``, ``attention_mask``, ``mm_token_type_ids`` (B, L)
        int64; ``pixel_values`` (P, D) float32, or torch.bfloat16 when :attr:`pixel_dtype` is
        ``"bfloat16"`` (a view of the same bytes, still no copy); ``image_grid_thw`` (I, 3)
        int64. These are exactly the keyword arguments of the transformers Qwen-VL models'
        ``forward``, so ``model(**batch.to_torch())`` works; provenance (``sample_index``,
        ``source``) stays on the :class:`Batch`.
        The tensors over the file are backed by read-only memory: do not write to them in place
        (move them to the GPU with ``.to(device, non_blocking=True)`` or clone them first).

        Raises:
            ImportError: torch is not installed.
        """
        try:
            import torch
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                "Batch.to_torch() needs PyTorch, which is not installed; "
                "install torch or use Batch.arrays() for numpy arrays"
            ) from e
        out = self.arrays()
        with warnings.catch_warnings():
            # from_numpy warns about non-writable arrays; sharing read-only memory is the point.
            warnings.simplefilter("ignore", UserWarning)
            tensors = {k: torch.from_numpy(v) for k, v in out.items() if k != "pixel_values"}
            if self.pixel_dtype == "bfloat16":
                # torch has no uint16 view; int16 has the same bits and itemsize
                bits = torch.from_numpy(self.pixel_values.view(np.int16))
                tensors["pixel_values"] = bits.view(torch.bfloat16)
            else:
                tensors["pixel_values"] = torch.from_numpy(self.pixel_values)
            return tensors


def bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    """Widen bfloat16 values given as their uint16 bits (``Batch.pixel_values`` of a bfloat16
    batch) to float32, exactly (bfloat16 is the upper half of a float32). Returns a new array."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def checks_for(manifest: Manifest, rank: int, step: int) -> dict[str, int | None]:
    """:func:`read_batch_file`'s checks for the file of (``step``, ``rank``) of ``manifest``'s
    generation."""
    return {
        "expected_step": step,
        "expected_rank": rank,
        "patch_dim": manifest.patch_dim,
        "micro_batch_size": manifest.micro_batch_size,
    }


def _data_buffer(arr: pa.Array, path: Path, col: str) -> pa.Buffer | None:
    if arr.null_count:
        raise BatchFormatError(
            f"{path}: column {col!r} holds {arr.null_count} nulls; nulls are not allowed"
        )
    return arr.buffers()[1]


def _view(
    buf: pa.Buffer | None, dtype: npt.DTypeLike, start: int, count: int, path: Path, col: str
) -> np.ndarray:
    """``count`` elements of ``dtype`` starting at element ``start`` of ``buf``, without a copy."""
    dtype = np.dtype(dtype)
    if count == 0:
        a = np.empty(0, dtype=dtype)
        a.flags.writeable = False
        return a
    need = (start + count) * dtype.itemsize
    if buf is None or buf.size < need:
        have = 0 if buf is None else buf.size
        raise BatchFormatError(
            f"{path}: column {col!r} data buffer holds {have} bytes, needs {need} (truncated file?)"
        )
    return np.frombuffer(buf, dtype=dtype, count=count, offset=start * dtype.itemsize)


def _fixed_rows(arr: pa.Array, path: Path, col: str, dtype: str) -> np.ndarray:
    """(B, L) view of a ``fixed_size_list<prim>[L]`` array, respecting both offsets."""
    if arr.null_count:
        raise BatchFormatError(
            f"{path}: column {col!r} holds {arr.null_count} nulls; nulls are not allowed"
        )
    width = arr.type.list_size
    child = arr.values  # ignores arr.offset; account for it explicitly
    buf = _data_buffer(child, path, col)
    start = child.offset + arr.offset * width
    return _view(buf, dtype, start, len(arr) * width, path, col).reshape(len(arr), width)


def _list_of_fixed(arr: pa.Array, path: Path, col: str, dtype: str) -> np.ndarray:
    """(N, W) view of the items of a ``list<fixed_size_list<prim>[W]>`` array (rows concatenated)."""
    if arr.null_count:
        raise BatchFormatError(
            f"{path}: column {col!r} holds {arr.null_count} nulls; nulls are not allowed"
        )
    width = arr.type.value_type.list_size
    if len(arr) == 0:
        first = last = 0
    else:
        offsets = arr.offsets  # accounts for arr.offset; length B + 1, zero-copy int32 view
        first, last = offsets[0].as_py(), offsets[len(arr)].as_py()
        if last < first:
            raise BatchFormatError(f"{path}: column {col!r} has decreasing list offsets")
    inner = arr.values  # fixed_size_list array, ignores arr.offset (offsets already include it)
    if inner.null_count:
        raise BatchFormatError(f"{path}: column {col!r} holds null items; nulls are not allowed")
    leaf = inner.values
    buf = _data_buffer(leaf, path, col)
    start = leaf.offset + (inner.offset + first) * width
    n = last - first
    return _view(buf, dtype, start, n * width, path, col).reshape(n, width)


def read_batch_file(
    path: str | os.PathLike[str],
    *,
    expected_step: int | None = None,
    expected_rank: int | None = None,
    patch_dim: int | None = None,
    micro_batch_size: int | None = None,
) -> Batch:
    """Memory-map one batch file and build a :class:`Batch` over it without copying.

    Args:
        path: an Arrow IPC file ``step-<s>.arrow``.
        expected_step, expected_rank: check the ``stoker.step`` / ``stoker.rank`` metadata.
        patch_dim: check D of ``pixel_values`` (the manifest's ``patch_dim``).
        micro_batch_size: check that the batch has exactly this many rows, or 0, and that
            ``stoker.slots`` agrees (the manifest's ``micro_batch_size``).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        BatchFormatError: not an Arrow IPC file, not exactly one record batch, missing or
            mistyped columns, nulls, inconsistent lengths, step/rank/slots metadata that
            disagrees with the file's place, a row count other than ``micro_batch_size`` or 0,
            an invalid ``stoker.backfilled_slots``, or data that would need a copy (e.g.
            compressed buffers).
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
    validate_schema(schema, path, patch_dim=patch_dim)
    if reader.num_record_batches == 1:
        rb = reader.get_batch(0)
    else:  # a writer that wrote no record batch at all: an empty batch
        rb = pa.RecordBatch.from_pylist([], schema=schema)

    meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
    for key, want in (("stoker.step", expected_step), ("stoker.rank", expected_rank)):
        if want is not None and key in meta and meta[key] != str(want):
            raise BatchFormatError(
                f"{path}: metadata {key}={meta[key]!r} but the file is for {want}"
            )

    cols = {name: rb.column(name) for name in schema.names}
    b = rb.num_rows
    input_ids = _fixed_rows(cols["input_ids"], path, "input_ids", "int64")
    labels = _fixed_rows(cols["labels"], path, "labels", "int64")
    attention_mask = _fixed_rows(cols["attention_mask"], path, "attention_mask", "int64")
    pixel_dtype = meta.get("stoker.pixel_dtype", "float32")
    pixel_values = _list_of_fixed(
        cols["pixel_values"],
        path,
        "pixel_values",
        "uint16" if pixel_dtype == "bfloat16" else "float32",
    )
    image_grid_thw = _list_of_fixed(cols["image_grid_thw"], path, "image_grid_thw", "int64")
    si = cols["sample_index"]
    sample_index = _view(
        _data_buffer(si, path, "sample_index"), "int64", si.offset, b, path, "sample_index"
    )
    src = cols["source"]
    if src.null_count:
        raise BatchFormatError(f"{path}: column 'source' holds nulls")

    if not (labels.shape == attention_mask.shape == input_ids.shape):
        raise BatchFormatError(f"{path}: input_ids/labels/attention_mask shapes differ")
    if b and image_grid_thw.size:
        expected_p = int(np.prod(image_grid_thw, axis=1).sum())
        if expected_p != pixel_values.shape[0]:
            raise BatchFormatError(
                f"{path}: pixel_values has {pixel_values.shape[0]} patches but image_grid_thw implies {expected_p}"
            )
    for name, a in (
        ("input_ids", input_ids),
        ("labels", labels),
        ("attention_mask", attention_mask),
        ("pixel_values", pixel_values),
        ("image_grid_thw", image_grid_thw),
        ("sample_index", sample_index),
    ):
        if not a.flags.c_contiguous:
            raise BatchFormatError(f"{path}: column {name!r} is not contiguous")
        if a.size and not (lo <= a.ctypes.data and a.ctypes.data + a.nbytes <= hi):
            raise BatchFormatError(
                f"{path}: column {name!r} is not inside the file mapping (compressed IPC buffers?); "
                "the reader refuses to copy"
            )

    if micro_batch_size is not None:
        if b not in (0, micro_batch_size):
            raise BatchFormatError(
                f"{path}: holds {b} rows, expected micro_batch_size {micro_batch_size} (or 0)"
            )
        if meta.get("stoker.slots", str(micro_batch_size)) != str(micro_batch_size):
            raise BatchFormatError(
                f"{path}: metadata stoker.slots={meta['stoker.slots']!r} but the manifest's "
                f"micro_batch_size is {micro_batch_size}"
            )
    backfilled = _parse_backfilled(meta.get("stoker.backfilled_slots", ""), b, path)

    step = int(meta.get("stoker.step", expected_step if expected_step is not None else -1))
    rank = int(meta.get("stoker.rank", expected_rank if expected_rank is not None else -1))
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
        source=src.to_pylist(),
        metadata=meta,
        backfilled_slots=backfilled,
        pixel_dtype=pixel_dtype,
        mapping_range=(lo, size),
        _keepalive=(source, whole, rb),
    )


def _parse_backfilled(text: str, rows: int, path: Path) -> tuple[int, ...]:
    """Parse ``stoker.backfilled_slots`` (``""`` or e.g. ``"0,2"``) into ascending row numbers.

    Raises:
        BatchFormatError: not comma-separated integers, a slot outside ``[0, rows)``, a
            repeated slot, or every row back-filled.
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
            f"{path}: metadata stoker.backfilled_slots={text!r} must list distinct rows in "
            f"[0, {rows})"
        )
    if len(slots) == rows:
        raise BatchFormatError(
            f"{path}: metadata stoker.backfilled_slots={text!r} marks every row back-filled; "
            "a batch without a sample has 0 rows"
        )
    return tuple(sorted(slots))


def validate_schema(
    schema: pa.Schema, path: str | os.PathLike[str], *, patch_dim: int | None = None
) -> None:
    """Check ``schema`` against :data:`stoker.schema.COLUMNS`.

    Raises:
        BatchFormatError: naming ``path`` and every missing or mistyped column.
    """
    problems = []
    names = set(schema.names)
    bound: dict[str, int] = {}
    meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
    pixel_dtype = meta.get("stoker.pixel_dtype", "float32")
    if pixel_dtype not in PIXEL_DTYPES:
        problems.append(f"metadata stoker.pixel_dtype={pixel_dtype!r} is not one of {PIXEL_DTYPES}")
        pixel_dtype = "float32"
    for spec in COLUMNS:
        if spec.name not in names:
            problems.append(f"missing column {spec.name!r} ({spec.arrow_type})")
            continue
        t = schema.field(spec.name).type
        variant = pixel_dtype if pixel_dtype in spec.variants else None
        got = match_column(spec, t, variant)
        if got is None:
            expected = spec.variants[variant][0] if variant else spec.arrow_type
            detail = f" (stoker.pixel_dtype={pixel_dtype})" if variant else ""
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
