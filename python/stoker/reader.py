"""Zero-copy reader of Stoker batches (see ``docs/batch-protocol.md``).

Typical trainer loop, one process per DP rank::

    from stoker import BatchReader

    # start_step: the step after the trainer checkpoint's step; default: the job's first_step
    reader = BatchReader("/dev/shm/stoker/my-job", rank=dp_rank, start_step=None)
    for batch in reader:                 # waits for each step's file
        inputs = batch.to_torch()        # dict of torch tensors over the mapped memory
        loss = model(**inputs).loss      # batch.backfilled_slots: rows that repeat another row
        ...
    print(reader.wait_time_ratio)

The job directory holds ``manifest.json``, which names the current *generation*; batches live in
``gen-<generation>/rank-<r>/step-<s:010d>.arrow``. Requesting step ``s + 1`` acknowledges step
``s`` (``ack.json`` in the same directory, which also paces the job's prefetch) and unlinks its
file, both on a background thread, while another maps the next step's file ahead. When the job is
resubmitted while the trainer runs (a new generation), the reader follows the manifest to the new
generation's directory and continues at the same step.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import queue
import re
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.ipc

from .schema import COLUMNS, FORMAT_VERSION, PIXEL_DTYPES, match_column

__all__ = ["Batch", "BatchReader", "BatchFormatError", "Manifest", "ResumeError"]

_GENERATION_RE = re.compile(r"[A-Za-z0-9_-]+\Z")
_STEP_FILE_RE = re.compile(r"step-(\d{10})\.arrow\Z")
#: Seconds a read-ahead thread waits for its file when the reader has no ``timeout_s``; the
#: request that needs the file then waits for it itself.
_READ_AHEAD_GIVE_UP_S = 60.0
#: Seconds the interpreter's exit waits at most for each reader's queued acks.
_EXIT_FLUSH_S = 5.0


class BatchFormatError(ValueError):
    """A batch file or the manifest does not follow the protocol/schema; the message names the file."""


class ResumeError(ValueError):
    """The job's current generation will not produce the step this reader needs next.

    Raised when the requested start step lies before the generation's ``first_step``, when a new
    generation starts after the reader's next step, or when the rank's ``ack.json`` says the
    step was already consumed (so the job will not write it again). The message names both steps
    and the fix: resubmit the job from its savepoint with ``--stoker.resume-step <step - 1>``.
    """


def _resume_fix(next_step: int) -> str:
    return (
        f"resubmit the job (from its savepoint) with --stoker.resume-step {next_step - 1} "
        f"so that it produces step {next_step} onwards, or restart the trainer from a checkpoint "
        "that matches the job"
    )


def _optional_str(raw: dict[str, Any], key: str) -> str | None:
    v = raw.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise TypeError(f"{key} must be a string, got {v!r}")
    return v


@dataclass(frozen=True)
class Manifest:
    """Job-level facts from ``manifest.json`` (format_version 2).

    Attributes:
        format_version: protocol version, 2.
        job_name: the Flink job's name.
        generation: stamp of the current submission; batches are in ``gen-<generation>/``.
        world_size: DP ranks W.
        micro_batch_size: rows per batch B.
        num_records: records per epoch N.
        epochs: passes over the dataset.
        steps_per_epoch: ``ceil(N / (W*B))``.
        num_steps: steps of the whole run (``epochs * steps_per_epoch``); steps count on across
            epochs, so every rank's steps are ``0 .. num_steps - 1``.
        first_step: first step this generation produces (the job's resume step + 1).
        shuffle_seed: seed of the per-epoch shuffle, or ``None`` when the order is not shuffled.
        patch_dim: D, floats per ``pixel_values`` row, or ``None`` if absent.
        dataset_fingerprint: ``"sha256:<hex>"`` of the dataset listing (files, sizes, where each
            record starts), or ``None`` if absent.
        model_preset: the job's ``stoker.model.preset`` (e.g. ``"qwen2-vl"``), or ``None`` if
            absent.
        raw: the parsed JSON object.
    """

    format_version: int
    job_name: str
    generation: str
    world_size: int
    micro_batch_size: int
    num_records: int
    epochs: int
    steps_per_epoch: int
    num_steps: int
    first_step: int
    shuffle_seed: int | None
    patch_dim: int | None
    dataset_fingerprint: str | None = None
    model_preset: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def load(cls, path: Path) -> Manifest:
        """Parse ``manifest.json``.

        Raises:
            BatchFormatError: unreadable or not JSON, a required field missing or of the wrong
                type, an unsupported ``format_version``, an invalid generation stamp or
                out-of-range sizes; the message names ``path``.
        """
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            version = int(raw["format_version"])
            if version != FORMAT_VERSION:
                raise BatchFormatError(
                    f"{path}: format_version {version} is not supported (expected "
                    f"{FORMAT_VERSION}); the job and the reader come from different releases"
                )
            num_steps = int(raw["num_steps"])
            seed = raw.get("shuffle_seed")
            m = cls(
                format_version=version,
                job_name=str(raw.get("job_name", "")),
                generation=str(raw["generation"]),
                world_size=int(raw["world_size"]),
                micro_batch_size=int(raw["micro_batch_size"]),
                num_records=int(raw.get("num_records", -1)),
                epochs=int(raw.get("epochs", 1)),
                steps_per_epoch=int(raw.get("steps_per_epoch", num_steps)),
                num_steps=num_steps,
                first_step=int(raw["first_step"]),
                shuffle_seed=int(seed) if seed is not None else None,
                patch_dim=int(raw["patch_dim"]) if raw.get("patch_dim") is not None else None,
                dataset_fingerprint=_optional_str(raw, "dataset_fingerprint"),
                model_preset=_optional_str(raw, "model_preset"),
                raw=raw,
            )
        except BatchFormatError:
            raise
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise BatchFormatError(f"{path}: invalid manifest: {e!r}") from e
        if not _GENERATION_RE.match(m.generation):
            raise BatchFormatError(f"{path}: invalid generation stamp {m.generation!r}")
        if m.world_size < 1 or m.micro_batch_size < 1 or m.num_steps < 0 or m.first_step < 0:
            raise BatchFormatError(
                f"{path}: need world_size >= 1, micro_batch_size >= 1, num_steps >= 0 and "
                f"first_step >= 0: {raw}"
            )
        return m


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


def _checks(manifest: Manifest, rank: int, step: int) -> dict[str, int | None]:
    """:func:`read_batch_file`'s checks for the file of (``step``, ``rank``) of ``manifest``'s
    generation."""
    return {
        "expected_step": step,
        "expected_rank": rank,
        "patch_dim": manifest.patch_dim,
        "micro_batch_size": manifest.micro_batch_size,
    }


def _step_name(step: int) -> str:
    return f"step-{step:010d}.arrow"


def _write_json_atomic(path: Path, obj: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def _read_consumed_step(ack: Path) -> int | None:
    """``consumed_step`` of an ``ack.json``, or ``None`` if missing or unreadable."""
    try:
        return int(json.loads(ack.read_text(encoding="utf-8"))["consumed_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _unlink_steps_below(rank_dir: Path, step: int) -> int:
    """Unlink the published batch files of steps ``< step`` in ``rank_dir``; returns how many.

    Only ``step-<10 digits>.arrow`` entries directly in ``rank_dir`` are touched (never
    ``.staging/`` or temporary files). A missing directory counts as empty.
    """
    removed = 0
    try:
        entries = list(os.scandir(rank_dir))
    except FileNotFoundError:
        return 0
    for entry in entries:
        m = _STEP_FILE_RE.match(entry.name)
        if m is None or int(m.group(1)) >= step:
            continue
        try:
            os.unlink(entry.path)
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def _ack_step(rank_dir: Path, ack: dict[str, Any]) -> bool:
    """Write ``rank_dir/ack.json`` and unlink the files of steps up to the acked one (the
    acked step's, and any of an earlier step the sink published while it learnt of a skip:
    start step or generation switch). Returns ``False``, doing nothing, when ``rank_dir`` is gone
    (a new generation replaced it, and following it acks there)."""
    try:
        _write_json_atomic(rank_dir / "ack.json", ack)
    except FileNotFoundError:
        return False
    _unlink_steps_below(rank_dir, int(ack["consumed_step"]) + 1)
    return True


class _BackgroundThread:
    """A reader's daemon thread: runs the tasks handed to it one after another.

    A daemon, so a task still waiting for a file never holds up the interpreter's exit; started
    once, so handing over a task costs a queue put, not a thread start (which waits for the new
    thread to be scheduled). The first exception a task raises is kept for :meth:`take_error`
    (the later tasks still run). The thread holds no reference to a task once it has run (an
    exception a task kept, raised in the trainer's request, refers to the reader).
    """

    def __init__(self, name: str) -> None:
        self._tasks: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._error: Exception | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, task: Callable[[], object]) -> None:
        """Queue ``task``; it runs after the tasks queued before it."""
        self._tasks.put(task)

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until the tasks queued so far have run (or the thread ended: stopped by another
        thread meanwhile, or not carried over into a forked child), at most ``timeout_s``."""
        done = threading.Event()
        self.submit(done.set)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not done.wait(0.05):
            if not self._thread.is_alive():
                return
            if deadline is not None and time.monotonic() >= deadline:
                return

    def take_error(self) -> Exception | None:
        """The first exception a task raised since the last call, or ``None``; clears it."""
        if self._error is None:  # the common case, without the lock
            return None
        with self._lock:
            error, self._error = self._error, None
        return error

    def stop(self) -> None:
        """End the thread once the queued tasks have run."""
        self._tasks.put(None)

    def _run(self) -> None:
        while True:
            task = self._tasks.get()
            if task is None:
                return
            try:
                task()
            except Exception as e:  # noqa: BLE001 - kept for the reader to raise
                with self._lock:
                    if self._error is None:
                        self._error = e
                del e
            del task


#: The ack threads of the live readers, flushed when the interpreter exits.
_ACK_THREADS: weakref.WeakSet[_BackgroundThread] = weakref.WeakSet()


@atexit.register
def _flush_acks_at_exit() -> None:
    """Write the acks still queued when the interpreter exits (the ack threads are daemons: a
    trainer that ends without :meth:`BatchReader.close` would otherwise lose the last ones).
    ``atexit`` runs while daemon threads still run."""
    for thread in list(_ACK_THREADS):
        thread.flush(_EXIT_FLUSH_S)


class _ReadAhead:
    """One step's batch file, mapped and checked on the reader's background thread.

    :meth:`run` waits for the file of ``step`` in ``rank_dir`` to appear (a ``stat`` every
    ``poll_interval_s``, for at most ``give_up_s``, or until :meth:`cancel`), then runs
    :func:`read_batch_file` with the checks that ``manifest`` implies, so the trainer's next
    request finds the batch mapped and validated. The :class:`BatchReader` still decides whether
    to use it (same generation, same step) and reads the file itself when the read-ahead gave
    up, was cancelled or saw the file vanish.

    What the trainer's request does with it is kept to attribute reads and calls into C (no
    ``pathlib``, no ``threading.Event``): the request runs right after the trainer's compute,
    on a core whose caches that compute evicted, where each further piece of Python code it
    touches costs a tenth of a millisecond or more.
    """

    def __init__(
        self,
        manifest: Manifest,
        rank: int,
        rank_dir: Path,
        step: int,
        poll_interval_s: float,
        give_up_s: float,
    ) -> None:
        self.manifest = manifest
        self.rank = rank
        self.rank_dir = rank_dir
        self.step = step
        self._poll_interval_s = poll_interval_s
        self._give_up_s = give_up_s
        self._running = threading.Lock()  # held until run() finished
        self._running.acquire()
        self._waiting = threading.Lock()  # held until cancel()
        self._waiting.acquire()
        self._batch: Batch | None = None
        self._error: Exception | None = None

    def run(self) -> None:
        """Wait for the file and map it (on the background thread)."""
        try:
            path = self.rank_dir / _step_name(self.step)
            give_up = time.monotonic() + self._give_up_s
            while self._waiting.locked() and time.monotonic() < give_up:
                if path.exists():
                    self._batch = read_batch_file(
                        path, **_checks(self.manifest, self.rank, self.step)
                    )
                    return
                if self._waiting.acquire(timeout=self._poll_interval_s):
                    return  # cancelled
        except FileNotFoundError:
            pass  # removed between the check and the mapping: the reader reads it itself
        except Exception as e:  # noqa: BLE001 - raised in the trainer's request, as if read there
            self._error = e
        finally:
            self._running.release()

    @property
    def finished(self) -> bool:
        """Whether :meth:`run` finished (without waiting)."""
        return not self._running.locked()

    def wait(self, timeout_s: float) -> bool:
        """Whether :meth:`run` finished, waiting at most ``timeout_s``."""
        if not self._running.acquire(timeout=timeout_s):
            return False
        self._running.release()
        return True

    def result(self) -> Batch | None:
        """The mapped batch, or ``None`` (gave up, cancelled, file vanished); call once
        :attr:`finished`.

        Raises:
            BatchFormatError: the file did not pass :func:`read_batch_file`'s checks.
        """
        if self._error is not None:
            raise self._error
        return self._batch

    def cancel(self) -> None:
        """Stop waiting for the file (a mapping already made is dropped with this object)."""
        try:
            self._waiting.release()
        except RuntimeError:
            pass  # cancelled before


class BatchReader:
    """Iterate the batches of one DP rank from a Stoker job directory.

    Args:
        root: job directory, e.g. ``/dev/shm/stoker/<job-name>`` (holds ``manifest.json``).
        rank: 0-based DP rank; reads ``<root>/gen-<generation>/rank-<rank>/``.
        poll_interval_s: seconds between checks for a file that is not there yet.
        timeout_s: maximum seconds to wait for the manifest or any one batch file (restarted
            when the reader follows a new generation); ``None`` waits forever.
        start_step: first step to read, i.e. the step after the trainer checkpoint's step.
            ``None`` (default): the manifest's ``first_step``. A start step after
            ``first_step`` is announced to the job on the first request: ``ack.json`` gets
            ``consumed_step = start_step - 1`` (so the job's prefetch gate moves on and the sink
            does not write steps the trainer skips) and files of earlier steps are unlinked.
        manifest_poll_interval_s: while waiting for a batch file, seconds between checks of
            ``manifest.json`` for a new generation (a ``stat``; the file is parsed only when
            it changed).
        stop_after_step: last step to read (a trainer that stops, e.g. to be restarted from its
            checkpoint at that step); ``None`` (default): ``num_steps - 1``. The request after
            it acknowledges it, as at the end of the run, and ends the iteration.
        read_ahead: after returning a batch, map and check the next step's file on a daemon
            thread while the trainer computes (waiting for it if it is not there yet), and write
            each ack and unlink the acked file on another, in order, so a request only hands
            over a mapped batch. An error writing an ack is raised (once) by a later request;
            the request that ends the iteration, :meth:`close` and the interpreter's exit wait
            for every ack. ``False`` does all of it in the request, on the trainer's thread.

    Iterating yields :class:`Batch` for steps ``start_step .. end_step - 1``, in order, each
    exactly once (``end_step``: ``num_steps``, or ``stop_after_step + 1`` if that is smaller).
    If the job is resubmitted meanwhile (new generation in ``manifest.json``), the reader
    switches to the new generation's directory: it acks ``next_step - 1`` there, unlinks that
    directory's files of earlier steps and keeps waiting for ``next_step``.

    Raises (while iterating):
        TimeoutError: a file did not appear within ``timeout_s`` (message names the path).
        BatchFormatError: the manifest or a batch file does not match the protocol/schema,
            or a new generation changed ``world_size`` or ``micro_batch_size`` (message names
            the file).
        ResumeError: (a ``ValueError``) ``start_step`` is before the generation's
            ``first_step``, a new generation starts after the reader's next step, or the
            rank's ``ack.json`` already marks the next step consumed. The message names the
            steps and the ``--stoker.resume-step`` to resubmit the job with. The error repeats
            on every later request.
        ValueError: ``rank`` is outside ``[0, world_size)``.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        rank: int,
        *,
        poll_interval_s: float = 0.005,
        timeout_s: float | None = None,
        start_step: int | None = None,
        manifest_poll_interval_s: float = 0.1,
        stop_after_step: int | None = None,
        read_ahead: bool = True,
    ) -> None:
        if rank < 0:
            raise ValueError(f"rank must be >= 0, got {rank}")
        if poll_interval_s <= 0:
            raise ValueError(f"poll_interval_s must be > 0, got {poll_interval_s}")
        if manifest_poll_interval_s <= 0:
            raise ValueError(
                f"manifest_poll_interval_s must be > 0, got {manifest_poll_interval_s}"
            )
        if start_step is not None and start_step < 0:
            raise ValueError(f"start_step must be >= 0, got {start_step}")
        if stop_after_step is not None and stop_after_step < -1:
            raise ValueError(f"stop_after_step must be >= -1, got {stop_after_step}")
        self.root = Path(root)
        self._manifest_path = str(self.root / "manifest.json")  # a str: stat'ed every request
        self.rank = rank
        self.poll_interval_s = poll_interval_s
        self.timeout_s = timeout_s
        self.manifest_poll_interval_s = manifest_poll_interval_s
        self._requested_start = start_step
        self._stop_after = stop_after_step
        self.read_ahead = read_ahead
        self._pid = os.getpid()  # the threads below are not carried over into a forked child
        self._ahead: _ReadAhead | None = None
        self._reads: _BackgroundThread | None = None  # read-ahead
        self._acks: _BackgroundThread | None = None  # acks and unlinks, in order
        self._manifest: Manifest | None = None
        self._manifest_sig: tuple[int, int, int] | None = None
        self._next_manifest_check = 0.0
        self._next_step: int | None = None  # resolved on the first request
        self._pending_ack: tuple[int, Path] | None = None  # (step, its rank directory)
        self._rank_dir: tuple[Manifest, Path] | None = None  # rank_dir of that manifest
        self._failure: Exception | None = None
        self._t0: float | None = None
        self._done = False
        #: Seconds spent inside ``__next__`` (waiting, acking, mapping), i.e. data-wait time.
        self.data_wait_s = 0.0
        #: Number of batches returned.
        self.batches_read = 0
        #: Number of returned batches the read-ahead had mapped (the rest were mapped in the
        #: request: the first one, and any after a generation switch or a read-ahead give-up).
        self.batches_read_ahead = 0
        #: Number of returned batches acknowledged in ``ack.json`` (or handed to the ack thread
        #: to write; skip acks not counted).
        self.steps_acked = 0
        #: Rows (samples, back-filled rows included), back-filled rows, images and patches
        #: returned so far.
        self.samples_read = 0
        self.backfilled_read = 0
        self.images_read = 0
        self.patches_read = 0
        #: Bytes of batch files mapped so far.
        self.bytes_mapped = 0
        #: Last step acknowledged (also by a start or generation-switch ack), or ``None``.
        self.last_acked_step: int | None = None
        #: Times the reader followed the job to a new generation.
        self.generation_switches = 0

    # ------------------------------------------------------------------ public API
    @property
    def manifest(self) -> Manifest:
        """The manifest of the generation being read; waits for ``manifest.json``.

        Raises:
            TimeoutError: no manifest within ``timeout_s``.
            BatchFormatError: the manifest is invalid.
            ValueError: ``rank`` is outside ``[0, world_size)``.
        """
        if self._manifest is None:
            path = self.root / "manifest.json"
            self._wait_for(path)
            sig = self._stat_manifest()  # before reading: a newer file is then seen as changed
            m = Manifest.load(path)
            if self.rank >= m.world_size:
                raise ValueError(f"rank {self.rank} is outside world_size {m.world_size} ({path})")
            self._manifest, self._manifest_sig = m, sig
            self._next_manifest_check = time.monotonic() + self.manifest_poll_interval_s
        return self._manifest

    @property
    def generation(self) -> str:
        """The generation being read (``manifest.generation``)."""
        return self.manifest.generation

    @property
    def rank_dir(self) -> Path:
        """``<root>/gen-<generation>/rank-<rank>``, the directory being read."""
        m = self.manifest
        if self._rank_dir is None or self._rank_dir[0] is not m:
            self._rank_dir = (m, self.root / f"gen-{m.generation}" / f"rank-{self.rank}")
        return self._rank_dir[1]

    @property
    def num_steps(self) -> int:
        """Steps of the whole run, all epochs (from the manifest)."""
        return self.manifest.num_steps

    @property
    def end_step(self) -> int:
        """One past the last step this reader returns: ``num_steps``, or ``stop_after_step + 1``."""
        if self._stop_after is None:
            return self.num_steps
        return min(self.num_steps, self._stop_after + 1)

    @property
    def start_step(self) -> int:
        """The first step this reader returns: ``start_step`` if given, else ``first_step``."""
        if self._requested_start is not None:
            return self._requested_start
        return self.manifest.first_step

    @property
    def next_step(self) -> int:
        """The step the next request returns (``start_step`` before the first request)."""
        return self.start_step if self._next_step is None else self._next_step

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
            "batches_read_ahead": self.batches_read_ahead,
            "steps_acked": self.steps_acked,
            "samples_read": self.samples_read,
            "backfilled_read": self.backfilled_read,
            "images_read": self.images_read,
            "patches_read": self.patches_read,
            "bytes_mapped": self.bytes_mapped,
            "generation_switches": self.generation_switches,
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
            if self._failure is not None:
                raise self._failure
            if self._pid != os.getpid():
                self._after_fork()
            if self._next_step is None:
                self._start(t_start)
            assert self._next_step is not None
            if self._done or self._next_step >= self.end_step:
                self._ack_pending(t_start, background=False)
                self.close()
                raise StopIteration
            step = self._next_step
            try:
                mapped = self._take_mapped(step, t_start)
                if mapped is None:
                    # the job may be waiting for this ack (its prefetch bound) to write the step
                    self._ack_pending(t_start, background=self.read_ahead)
                    batch, rank_dir = self._wait_and_read(step, t_start), self.rank_dir
                else:
                    batch, rank_dir = mapped
                    # only now: a woken background thread contends with the request for the GIL
                    self._ack_pending(t_start, background=True)
                    self.batches_read_ahead += 1
            except (ResumeError, BatchFormatError) as e:
                self._failure = e
                # a request that raises still acks the step returned before (and the threads
                # end after writing it); the error repeats on every later request
                self._hand_over_ack(t_start, background=self.read_ahead)
                self._stop_threads()
                raise
            self._next_step += 1
            self._pending_ack = (step, rank_dir)
            if self.read_ahead and self._next_step < self.end_step:
                self._start_read_ahead(self._next_step)
            self.batches_read += 1
            self.samples_read += batch.num_samples
            self.backfilled_read += len(batch.backfilled_slots)
            self.images_read += batch.num_images
            self.patches_read += int(batch.pixel_values.shape[0])
            self.bytes_mapped += batch.mapping_range[1]
            return batch
        finally:
            self.data_wait_s += time.monotonic() - t_start

    def close(self) -> None:
        """Stop iterating, wait for the acks handed to the background thread (so ``ack.json``
        says :attr:`last_acked_step` when it returns; an error writing one is not raised) and
        end the background threads (also at the end of the iteration; when the reader is
        garbage-collected, without waiting). The current (unacknowledged) step is left in place,
        not acked."""
        self._done = True
        acks = self._acks
        if acks is not None and self._pid == os.getpid():
            acks.flush()
        self._stop_threads()

    def __del__(self) -> None:
        # not close(): garbage collection may run this on any thread, the ack thread included
        if hasattr(self, "_acks"):  # not if __init__ raised
            self._done = True
            self._stop_threads()

    def _stop_threads(self) -> None:
        self._drop_read_ahead()
        for thread in (self._reads, self._acks):
            if thread is not None:
                thread.stop()
        self._reads = self._acks = None

    def _after_fork(self) -> None:
        """In a forked child: the parent's background threads did not come along; start over
        (the acks the parent handed over are the parent's to write)."""
        self._pid = os.getpid()
        self._ahead = self._reads = self._acks = None

    # ------------------------------------------------------------------ internals
    def _start(self, t_request: float) -> None:
        m = self.manifest
        start = self.start_step
        if start < m.first_step:
            raise ResumeError(
                f"rank {self.rank}: start_step {start} is before first_step {m.first_step} of "
                f"generation {m.generation} ({self.root / 'manifest.json'}): the job does not "
                f"produce steps before {m.first_step}; {_resume_fix(start)}"
            )
        self._adopt(m, start, t_request, announce=start > m.first_step)
        self._next_step = start

    def _adopt(self, m: Manifest, next_step: int, t_request: float, *, announce: bool) -> None:
        """Start reading generation ``m`` at ``next_step``; with ``announce``, ack the skip."""
        rank_dir = self.root / f"gen-{m.generation}" / f"rank-{self.rank}"
        consumed = _read_consumed_step(rank_dir / "ack.json")
        if consumed is not None and consumed >= next_step:
            raise ResumeError(
                f"rank {self.rank}: {rank_dir / 'ack.json'} says step {consumed} was already "
                f"consumed in generation {m.generation}, so the job will not write step "
                f"{next_step} again; {_resume_fix(next_step)}"
            )
        if not announce:
            return
        try:
            # the sink creates the generation directory before it publishes the manifest; a
            # missing one was removed by a newer generation, which the manifest check will find
            rank_dir.mkdir(mode=0o700, exist_ok=True)
            self._write_ack(rank_dir, next_step - 1, t_request)
        except FileNotFoundError:
            return
        _unlink_steps_below(rank_dir, next_step)

    def _ack_content(self, step: int, t_request: float) -> dict[str, Any]:
        # data-wait so far, including the part of the current request already spent
        data_wait = self.data_wait_s + (time.monotonic() - t_request)
        elapsed = self.elapsed_s
        return {
            "consumed_step": step,
            "data_wait_s": round(data_wait, 6),
            "elapsed_s": round(elapsed, 6),
            # the sink shows it as the gauge trainerWaitTimeRatio (web UI, REST)
            "wait_time_ratio": round(min(1.0, data_wait / elapsed), 6) if elapsed > 0 else 0.0,
        }

    def _flush_acks(self) -> None:
        """Wait for the acks handed to the background thread, so a later one cannot overtake
        them (what writing one raised is raised by :meth:`_raise_ack_error`)."""
        acks = self._acks
        if acks is not None:
            acks.flush()

    def _raise_ack_error(self) -> None:
        """Raise, once, what writing an ack on the background thread raised."""
        acks = self._acks
        error = None if acks is None else acks.take_error()
        if error is not None:
            raise error

    def _write_ack(self, rank_dir: Path, step: int, t_request: float) -> None:
        self._flush_acks()
        _write_json_atomic(rank_dir / "ack.json", self._ack_content(step, t_request))
        self.last_acked_step = step

    def _ack_pending(self, t_request: float, *, background: bool) -> None:
        """:meth:`_hand_over_ack`, then raise, once, what writing an earlier ack on the thread
        raised (this ack is handed over or written all the same)."""
        self._hand_over_ack(t_request, background=background)
        self._raise_ack_error()

    def _hand_over_ack(self, t_request: float, *, background: bool) -> None:
        """Ack the step returned last and unlink its file: with ``background``, on the ack
        thread (the syscalls, milliseconds when unlinking a large file frees its pages, are
        then off the request; an error writing an ack is raised by a later request), else
        right here."""
        if self._pending_ack is not None:
            step, rank_dir = self._pending_ack
            self._pending_ack = None
            task = functools.partial(_ack_step, rank_dir, self._ack_content(step, t_request))
            if background:
                if self._acks is None:
                    self._acks = _BackgroundThread(f"stoker-ack-rank-{self.rank}")
                    _ACK_THREADS.add(self._acks)
                self._acks.submit(task)
                written = True
            else:
                self._flush_acks()
                written = task()
            if written:
                self.last_acked_step = step
                self.steps_acked += 1

    def _stat_manifest(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self._manifest_path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _check_generation(self, t_request: float) -> bool:
        """Follow a new generation named by ``manifest.json``; returns whether it switched."""
        now = time.monotonic()
        if now < self._next_manifest_check:
            return False
        self._next_manifest_check = now + self.manifest_poll_interval_s
        sig = self._stat_manifest()
        if sig is None or sig == self._manifest_sig:
            return False
        path = self.root / "manifest.json"
        try:
            m = Manifest.load(path)
        except BatchFormatError:
            if not path.exists():  # removed between stat and read
                return False
            raise
        old = self.manifest
        if m.generation == old.generation:
            self._manifest_sig = sig
            return False  # rewritten by another sink subtask or after a failover
        if (m.world_size, m.micro_batch_size) != (old.world_size, old.micro_batch_size):
            raise BatchFormatError(
                f"{path}: generation {m.generation} has world_size {m.world_size} and "
                f"micro_batch_size {m.micro_batch_size}, but this reader started on generation "
                f"{old.generation} with world_size {old.world_size} and micro_batch_size "
                f"{old.micro_batch_size}; restart the trainer with the new configuration"
            )
        assert self._next_step is not None
        if self._next_step < m.first_step:
            raise ResumeError(
                f"rank {self.rank}: the job was resubmitted (generation {m.generation}) and "
                f"produces steps from first_step {m.first_step}, but this reader needs step "
                f"{self._next_step} next; {_resume_fix(self._next_step)}"
            )
        self._adopt(m, self._next_step, t_request, announce=True)
        # only now: a switch that failed half-way (an ack that could not be written, an
        # interrupt) is tried again by the next request instead of being lost
        self._manifest, self._manifest_sig = m, sig
        self.generation_switches += 1
        return True

    def _start_read_ahead(self, step: int) -> None:
        self._drop_read_ahead()
        give_up_s = _READ_AHEAD_GIVE_UP_S if self.timeout_s is None else self.timeout_s
        self._ahead = _ReadAhead(
            self.manifest, self.rank, self.rank_dir, step, self.poll_interval_s, give_up_s
        )
        if self._reads is None:
            self._reads = _BackgroundThread(f"stoker-read-ahead-rank-{self.rank}")
        self._reads.submit(self._ahead.run)

    def _drop_read_ahead(self) -> None:
        if self._ahead is not None:
            self._ahead.cancel()
            self._ahead = None

    def _take_mapped(self, step: int, t_request: float) -> tuple[Batch, Path] | None:
        """``(batch, its rank directory)`` when the read-ahead has already mapped ``step`` of the
        generation being read (after following a new generation, if any), without waiting;
        ``None`` otherwise.

        Raises:
            BatchFormatError: the read-ahead's file did not pass the checks, or the new
                generation's manifest is invalid or changed the batch shape.
            ResumeError: the new generation will not produce ``step``.
        """
        ahead = self._ahead
        if ahead is None or not ahead.finished:
            return None
        self._check_generation(t_request)
        _, batch = self._take_read_ahead(step)
        return None if batch is None else (batch, ahead.rank_dir)

    def _take_read_ahead(self, step: int) -> tuple[bool, Batch | None]:
        """``(True, batch)`` when the read-ahead of ``step`` finished with a batch, ``(True,
        None)`` when there is none to wait for (or it ended without one: read it here),
        ``(False, None)`` when it is still waiting for the file (after up to one poll
        interval)."""
        ahead = self._ahead
        if ahead is None:
            return True, None
        # a Manifest object is replaced only when the reader follows a new generation
        if ahead.manifest is not self._manifest or ahead.step != step:
            self._drop_read_ahead()  # a new generation: its directory is read here
            return True, None
        if not ahead.wait(self.poll_interval_s):
            return False, None
        self._ahead = None
        return True, ahead.result()

    def _wait_and_read(self, step: int, t_request: float) -> Batch:
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        while True:
            if self._check_generation(t_request) and self.timeout_s is not None:
                deadline = time.monotonic() + self.timeout_s
            path = self.rank_dir / _step_name(step)
            settled, ready = self._take_read_ahead(step)
            if ready is not None:
                self.batches_read_ahead += 1
                return ready
            if settled and path.exists():
                try:
                    return read_batch_file(path, **_checks(self.manifest, self.rank, step))
                except FileNotFoundError:
                    pass  # removed since: its generation was replaced; the check will follow
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {self.timeout_s}s waiting for {path}")
            if settled:
                time.sleep(self.poll_interval_s)

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
