"""Zero-copy reader of Stoker batches (see ``docs/batch-protocol.md``).

Typical trainer loop, one process per DP rank::

    from stoker import BatchReader

    reader = BatchReader("/dev/shm/stoker/my-job", rank=dp_rank)
    for batch in reader:                 # waits for each step's file
        inputs = batch.to_torch()        # dict of torch tensors over the mapped memory
        loss = model(**inputs).loss
        ...
    print(reader.wait_time_ratio)

Requesting step ``s + 1`` acknowledges step ``s`` (``ack.json``) and unlinks its file.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.ipc

from .schema import COLUMNS, FORMAT_VERSION, match_column

__all__ = ["Batch", "BatchReader", "BatchFormatError", "Manifest"]


class BatchFormatError(ValueError):
    """A batch file or the manifest does not follow the protocol/schema; the message names the file."""


@dataclass(frozen=True)
class Manifest:
    """Job-level facts from ``manifest.json``."""

    format_version: int
    job_name: str
    world_size: int
    micro_batch_size: int
    num_records: int
    num_steps: int
    patch_dim: int | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def load(cls, path: Path) -> Manifest:
        """Parse ``manifest.json``; raises :class:`BatchFormatError` naming ``path``."""
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            m = cls(
                format_version=int(raw["format_version"]),
                job_name=str(raw.get("job_name", "")),
                world_size=int(raw["world_size"]),
                micro_batch_size=int(raw["micro_batch_size"]),
                num_records=int(raw.get("num_records", -1)),
                num_steps=int(raw["num_steps"]),
                patch_dim=int(raw["patch_dim"]) if raw.get("patch_dim") is not None else None,
                raw=raw,
            )
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise BatchFormatError(f"{path}: invalid manifest: {e!r}") from e
        if m.format_version != FORMAT_VERSION:
            raise BatchFormatError(
                f"{path}: format_version {m.format_version} is not supported (expected {FORMAT_VERSION})"
            )
        if m.world_size < 1 or m.num_steps < 0:
            raise BatchFormatError(f"{path}: world_size must be >= 1 and num_steps >= 0: {raw}")
        return m


@dataclass
class Batch:
    """One (step, rank) batch; every array is a read-only view over the memory-mapped file.

    Shapes and dtypes (B = rows, L = padded sequence length, P = patches, D = patch dim,
    I = images):

    * ``input_ids``, ``labels``, ``attention_mask``: ``(B, L)`` int64 (token ids; labels use
      -100 for ignored positions; mask is 1/0).
    * ``pixel_values``: ``(P, D)`` float32, normalized pixel patches of all images in row order.
    * ``image_grid_thw``: ``(I, 3)`` int64, (grid_t, grid_h, grid_w) per image, in patches.
    * ``sample_index``: ``(B,)`` int64, position of each row's record in the dataset order.
    * ``source``: ``list[str]`` of length B, ``"<jsonl uri>:<1-based line>"``.

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
    #: (start address, size in bytes) of the file mapping the arrays live in.
    mapping_range: tuple[int, int] = (0, 0)
    _keepalive: Any = field(default=None, repr=False)

    @property
    def num_samples(self) -> int:
        """B, the number of rows (may be below the micro-batch size, or 0)."""
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

    def arrays(self) -> dict[str, np.ndarray]:
        """The model inputs as numpy arrays, named as Hugging Face names them."""
        return {
            "input_ids": self.input_ids,
            "labels": self.labels,
            "attention_mask": self.attention_mask,
            "pixel_values": self.pixel_values,
            "image_grid_thw": self.image_grid_thw,
        }

    def to_torch(self) -> dict[str, Any]:
        """Return ``{name: torch.Tensor}`` sharing memory with the mapping (``torch.from_numpy``).

        Keys: ``input_ids``, ``labels``, ``attention_mask`` (B, L) int64; ``pixel_values``
        (P, D) float32; ``image_grid_thw`` (I, 3) int64; ``sample_index`` (B,) int64.
        The tensors are backed by read-only memory: do not write to them in place (move them
        to the GPU with ``.to(device, non_blocking=True)`` or clone them first).

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
        out = dict(self.arrays(), sample_index=self.sample_index)
        with warnings.catch_warnings():
            # from_numpy warns about non-writable arrays; sharing read-only memory is the point.
            warnings.simplefilter("ignore", UserWarning)
            return {k: torch.from_numpy(v) for k, v in out.items()}


def _step_name(step: int) -> str:
    return f"step-{step:010d}.arrow"


def _write_json_atomic(path: Path, obj: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


class BatchReader:
    """Iterate the batches of one DP rank from a Stoker job directory.

    Args:
        root: job directory, e.g. ``/dev/shm/stoker/<job-name>`` (holds ``manifest.json``).
        rank: 0-based DP rank; reads ``<root>/rank-<rank>/``.
        poll_interval_s: seconds between checks for a file that is not there yet.
        timeout_s: maximum seconds to wait for the manifest or any one batch file;
            ``None`` waits forever.
        start_step: first step to read (resume after a trainer restart); default 0.

    Iterating yields :class:`Batch` for steps ``start_step .. num_steps - 1``.

    Raises (while iterating):
        TimeoutError: a file did not appear within ``timeout_s`` (message names the path).
        BatchFormatError: the manifest or a batch file does not match the protocol/schema
            (message names the file).
        ValueError: ``rank`` is outside ``[0, world_size)``.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        rank: int,
        *,
        poll_interval_s: float = 0.005,
        timeout_s: float | None = None,
        start_step: int = 0,
    ) -> None:
        if rank < 0:
            raise ValueError(f"rank must be >= 0, got {rank}")
        if poll_interval_s <= 0:
            raise ValueError(f"poll_interval_s must be > 0, got {poll_interval_s}")
        self.root = Path(root)
        self.rank = rank
        self.rank_dir = self.root / f"rank-{rank}"
        self.poll_interval_s = poll_interval_s
        self.timeout_s = timeout_s
        self._manifest: Manifest | None = None
        self._next_step = start_step
        self._pending_ack: tuple[int, Path] | None = None
        self._t0: float | None = None
        self._done = False
        #: Seconds spent inside ``__next__`` (waiting, acking, mapping), i.e. data-wait time.
        self.data_wait_s = 0.0
        #: Number of batches returned.
        self.batches_read = 0
        #: Number of steps acknowledged in ``ack.json``.
        self.steps_acked = 0
        #: Rows (samples), images and patches returned so far.
        self.samples_read = 0
        self.images_read = 0
        self.patches_read = 0
        #: Bytes of batch files mapped so far.
        self.bytes_mapped = 0
        #: Last step acknowledged, or ``None``.
        self.last_acked_step: int | None = None

    # ------------------------------------------------------------------ public API
    @property
    def manifest(self) -> Manifest:
        """The job manifest; waits for ``manifest.json`` (TimeoutError after ``timeout_s``)."""
        if self._manifest is None:
            path = self.root / "manifest.json"
            self._wait_for(path)
            m = Manifest.load(path)
            if self.rank >= m.world_size:
                raise ValueError(f"rank {self.rank} is outside world_size {m.world_size} ({path})")
            self._manifest = m
        return self._manifest

    @property
    def num_steps(self) -> int:
        """Steps in the epoch (from the manifest)."""
        return self.manifest.num_steps

    @property
    def elapsed_s(self) -> float:
        """Seconds since the first batch was requested (0 before)."""
        return 0.0 if self._t0 is None else time.monotonic() - self._t0

    @property
    def wait_time_ratio(self) -> float:
        """``data_wait_s / elapsed_s`` in [0, 1]; 0.0 before the first request."""
        el = self.elapsed_s
        return min(1.0, self.data_wait_s / el) if el > 0 else 0.0

    def counters(self) -> dict[str, float | int]:
        """Snapshot of the counters (for logging/metrics)."""
        return {
            "rank": self.rank,
            "batches_read": self.batches_read,
            "steps_acked": self.steps_acked,
            "samples_read": self.samples_read,
            "images_read": self.images_read,
            "patches_read": self.patches_read,
            "bytes_mapped": self.bytes_mapped,
            "data_wait_s": self.data_wait_s,
            "elapsed_s": self.elapsed_s,
            "wait_time_ratio": self.wait_time_ratio,
        }

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        """Ack the previous step, wait for the next file and return its :class:`Batch`."""
        t_start = time.monotonic()
        if self._t0 is None:
            self._t0 = t_start
        try:
            self._ack_pending(t_start)
            if self._done or self._next_step >= self.num_steps:
                self._done = True
                raise StopIteration
            step = self._next_step
            path = self.rank_dir / _step_name(step)
            self._wait_for(path)
            batch = read_batch_file(
                path, expected_step=step, expected_rank=self.rank, patch_dim=self.manifest.patch_dim
            )
            self._next_step += 1
            self._pending_ack = (step, path)
            self.batches_read += 1
            self.samples_read += batch.num_samples
            self.images_read += batch.num_images
            self.patches_read += int(batch.pixel_values.shape[0])
            self.bytes_mapped += batch.mapping_range[1]
            return batch
        finally:
            self.data_wait_s += time.monotonic() - t_start

    def close(self) -> None:
        """Stop iterating. The current (unacknowledged) step is left in place, not acked."""
        self._done = True

    # ------------------------------------------------------------------ internals
    def _ack_pending(self, t_request: float) -> None:
        if self._pending_ack is None:
            return
        step, path = self._pending_ack
        # data-wait so far, including the part of the current request already spent
        data_wait = self.data_wait_s + (time.monotonic() - t_request)
        elapsed = self.elapsed_s
        _write_json_atomic(
            self.rank_dir / "ack.json",
            {
                "consumed_step": step,
                "data_wait_s": round(data_wait, 6),
                "elapsed_s": round(elapsed, 6),
                # the sink shows it as the gauge trainerWaitTimeRatio (web UI, REST)
                "wait_time_ratio": round(min(1.0, data_wait / elapsed), 6) if elapsed > 0 else 0.0,
            },
        )
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        self._pending_ack = None
        self.steps_acked += 1
        self.last_acked_step = step

    def _wait_for(self, path: Path) -> None:
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        while not path.exists():
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {self.timeout_s}s waiting for {path}")
            time.sleep(self.poll_interval_s)


# ---------------------------------------------------------------------- file decoding
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
) -> Batch:
    """Memory-map one batch file and build a :class:`Batch` over it without copying.

    Raises:
        BatchFormatError: not an Arrow IPC file, not exactly one record batch, missing or
            mistyped columns, nulls, inconsistent lengths, step/rank metadata that disagrees with
            the file's place, or data that would need a copy (e.g. compressed buffers).
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
    pixel_values = _list_of_fixed(cols["pixel_values"], path, "pixel_values", "float32")
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
        mapping_range=(lo, size),
        _keepalive=(source, whole, rb),
    )


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
    for spec in COLUMNS:
        if spec.name not in names:
            problems.append(f"missing column {spec.name!r} ({spec.arrow_type})")
            continue
        t = schema.field(spec.name).type
        got = match_column(spec, t)
        if got is None:
            problems.append(f"column {spec.name!r} has type {t}, expected {spec.arrow_type}")
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
