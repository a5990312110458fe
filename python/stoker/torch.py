"""PyTorch trainer side: :class:`StokerDataset`, an ``IterableDataset`` over one DP rank's batches
with checkpointable state (torchdata's ``StatefulDataLoader`` protocol) and an optional
double-buffered copy to the rank's device. Needs torch (``pip install stoker[torch]``); ``import
stoker`` does not import this module.

::

    from stoker.torch import StokerDataset

    data = StokerDataset("/dev/shm/stoker/my-job", device="cuda", pin_memory=True)
    data.load_state_dict(ckpt["data"])                 # when resuming (before iterating)
    for batch in data:                                 # or DataLoader(data, batch_size=None)
        loss = model(**batch).loss                     # batch.keep: samples that are not back-fills
        ...
        torch.save({"model": ..., "data": data.state_dict()}, path)
"""

from __future__ import annotations

import copy
import os
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch  # torch.utils.data with it

from .batch import Batch
from .data_state import (
    DataStateError,
    check_restore,
    check_sequence,
    make_state,
    sequence_of,
    validate_state,
)
from .pixels import normalize_uint8_torch, normalize_uint8_video_torch
from .protocol import Manifest, VisionSettings
from .reader import BatchReader

__all__ = ["DataStateError", "RankInfo", "StokerBatch", "StokerDataset", "discover_rank"]


@dataclass(frozen=True)
class RankInfo:
    """Where this process sits: DP ``rank`` of ``world_size``, ``local_rank`` on its node, and
    where they came from (``"arguments"``, ``"torch.distributed"``, ``"environment"`` or
    ``"default"``, a single process)."""

    rank: int
    local_rank: int
    world_size: int
    source: str


def _env_int(name: str) -> int | None:
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"environment variable {name}={v!r} is not an integer") from None


def discover_rank(
    rank: int | None = None, world_size: int | None = None, local_rank: int | None = None
) -> RankInfo:
    """The DP rank, local rank and world size of this process.

    ``rank`` and ``world_size`` given (both, or neither): those, e.g. the data-parallel group's
    when tensor or pipeline parallelism splits the world (``dist.get_rank(dp_group)``). Else
    ``torch.distributed``'s when it is initialised, else the ``RANK`` / ``WORLD_SIZE`` variables
    torchrun sets, else rank 0 of 1. ``local_rank``: the argument, else ``LOCAL_RANK``, else 0.

    Raises:
        ValueError: only one of ``rank`` / ``world_size`` given, only one of ``RANK`` /
            ``WORLD_SIZE`` set, a variable that is not an integer, or a rank outside
            ``[0, world_size)``.
    """
    if (rank is None) != (world_size is None):
        raise ValueError(
            f"pass both rank and world_size or neither (got rank={rank}, world_size={world_size})"
        )
    env_rank, env_world = _env_int("RANK"), _env_int("WORLD_SIZE")
    if rank is not None and world_size is not None:
        info = (rank, world_size, "arguments")
    elif torch.distributed.is_available() and torch.distributed.is_initialized():
        info = (
            torch.distributed.get_rank(),
            torch.distributed.get_world_size(),
            "torch.distributed",
        )
    elif env_rank is not None or env_world is not None:
        if env_rank is None or env_world is None:
            raise ValueError(
                f"RANK={os.environ.get('RANK')!r} and WORLD_SIZE={os.environ.get('WORLD_SIZE')!r}: "
                "set both (torchrun does) or neither"
            )
        info = (env_rank, env_world, "environment")
    else:
        info = (0, 1, "default")
    r, w, source = info
    if w < 1 or not 0 <= r < w:
        raise ValueError(f"rank {r} is outside world size {w} (from {source})")
    lr = local_rank if local_rank is not None else _env_int("LOCAL_RANK")
    return RankInfo(rank=r, local_rank=0 if lr is None else lr, world_size=w, source=source)


class StokerBatch(dict[str, Any]):
    """One batch as ``{name: tensor}`` with exactly the keys of :meth:`Batch.to_torch`
    (``input_ids``, ``labels``, ``attention_mask``, ``mm_token_type_ids``, ``pixel_values``,
    ``image_grid_thw``; a packed batch ``position_ids`` (4, B, L) instead of
    ``attention_mask``, and ``use_cache`` ``False``, the one entry that is not a tensor:
    :meth:`Batch.model_flags`), so ``model(**batch)`` works, and its provenance as attributes (a
    ``dict`` built from it, e.g. ``{k: v.to(d) for k, v in batch.items()}``, drops them; the
    DataLoader's ``default_convert`` and ``pin_memory`` keep them):

    * ``step``, ``rank`` (int), ``generation`` (str): where the batch came from;
    * ``sample_index``: ``(S,)`` int64 CPU tensor, each sample's slot index
      (docs/batch-protocol.md); unpacked S = B, one sample per row;
    * ``source``: ``list[str]`` of S mixture source names (:attr:`stoker.Batch.source`);
    * ``location``: ``list[str]`` of S ``"<jsonl uri>:<line>"``;
    * ``backfilled_slots``: ``tuple[int, ...]`` samples (unpacked: rows) that copy another;
    * ``keep``: ``(S,)`` bool CPU tensor, ``False`` on back-filled samples;
    * ``packing_max_tokens``: ``int`` tokens per packed row, or ``None`` (not packed);
    * ``sample_spans``: ``(S, 3)`` int64 CPU tensor, each sample's ``(row, start, end)`` tokens
      (:attr:`stoker.Batch.sample_spans`).
    """

    step: int
    rank: int
    generation: str
    sample_index: torch.Tensor
    source: list[str]
    location: list[str]
    backfilled_slots: tuple[int, ...]
    packing_max_tokens: int | None
    sample_spans: torch.Tensor
    #: Set while ``pixel_values`` are a uint8 batch's samples still to be normalized on the
    #: device (:class:`StokerDataset` with ``device``, between reading and staging).
    _pending_vision: VisionSettings | None = None

    @property
    def keep(self) -> torch.Tensor:
        """``(S,)`` bool: ``True`` on samples holding their own record, ``False`` on
        back-fills."""
        keep = torch.ones(int(self.sample_index.shape[0]), dtype=torch.bool)
        keep[list(self.backfilled_slots)] = False
        return keep

    @classmethod
    def placeholder(cls, step: int, rank: int, generation: str) -> StokerBatch:
        """A batch of one token 0 labelled -100 and no samples: ``input_ids`` and ``labels``
        ``(1, 1)`` int64, ``attention_mask`` 1 and ``mm_token_type_ids`` 0 (both ``(1, 1)``
        int64), no images; its forward and backward add nothing to the gradient. What a rank
        trains on where it must join a step but has no samples: a 0-row batch, or the fill of a
        framework's last optimizer step past the job's steps (:mod:`stoker.megatron`,
        :mod:`stoker.torchtitan`)."""
        batch = cls()
        token = torch.zeros((1, 1), dtype=torch.long)
        batch.update(
            input_ids=token,
            labels=torch.full_like(token, -100),
            attention_mask=torch.ones_like(token),
            mm_token_type_ids=torch.zeros_like(token),
        )
        batch.step, batch.rank, batch.generation = step, rank, generation
        batch.sample_index = torch.zeros(0, dtype=torch.long)
        batch.source, batch.location, batch.backfilled_slots = [], [], ()
        batch.packing_max_tokens = None
        batch.sample_spans = torch.zeros((0, 3), dtype=torch.long)
        return batch

    def _with(self, tensors: dict[str, Any]) -> StokerBatch:
        out = copy.copy(self)
        out.update(tensors)
        return out

    def tensors(self) -> dict[str, torch.Tensor]:
        """The tensor entries (all but a packed batch's ``use_cache``)."""
        return {k: v for k, v in self.items() if isinstance(v, torch.Tensor)}

    def pin_memory(self) -> StokerBatch:
        """A copy whose CPU tensors are in pinned memory (what ``DataLoader(pin_memory=True)``
        calls); tensors already on a device stay as they are."""
        return self._with(
            {k: v.pin_memory() if v.device.type == "cpu" else v for k, v in self.tensors().items()}
        )

    def to(self, device: str | torch.device, non_blocking: bool = False) -> StokerBatch:
        """A copy with every tensor moved to ``device`` (attributes kept)."""
        return self._with(
            {k: v.to(device, non_blocking=non_blocking) for k, v in self.tensors().items()}
        )


def _stoker_batch(
    batch: Batch,
    generation: str,
    mask_backfilled: bool,
    pixel_dtype: torch.dtype | None,
    defer_uint8: bool,
) -> StokerBatch:
    """``batch`` as a :class:`StokerBatch` on the host; with ``defer_uint8`` a uint8 batch's
    ``pixel_values`` stay uint8 (normalized after the copy to the device, :meth:`_stage`)."""
    if defer_uint8 and batch.pixel_dtype == "uint8":
        out = StokerBatch({**batch._torch_views(), **batch.model_flags()})
        out._pending_vision = batch._vision_for_uint8()
    else:
        out = StokerBatch(batch.to_torch(pixel_dtype=pixel_dtype))
    if mask_backfilled and batch.backfilled_slots:
        labels = out["labels"].clone()  # the mapped tensor is read-only
        if batch.packed:
            for row, start, end in batch.sample_spans[list(batch.backfilled_slots)].tolist():
                labels[row, start:end] = -100
        else:
            labels[list(batch.backfilled_slots)] = -100
        out["labels"] = labels
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a read-only view, as in to_torch()
        out.sample_index = torch.from_numpy(batch.sample_index)
        out.sample_spans = torch.from_numpy(batch.sample_spans)
    out.step, out.rank, out.generation = batch.step, batch.rank, generation
    out.source, out.location = batch.source, batch.location
    out.backfilled_slots = batch.backfilled_slots
    out.packing_max_tokens = batch.packing_max_tokens
    return out


def _accelerator_available() -> bool:
    acc = getattr(torch, "accelerator", None)
    if acc is not None:
        return bool(acc.is_available())
    return bool(torch.cuda.is_available())  # pragma: no cover - torch < 2.6


class _Staged:
    """A batch whose copy to the device has been issued (``event``: its end on the copy
    stream, CUDA only)."""

    def __init__(self, batch: StokerBatch, event: Any) -> None:
        self.batch = batch
        self.event = event


class StokerDataset(torch.utils.data.IterableDataset):
    """The batches of one DP rank of a Stoker job, as :class:`StokerBatch` dicts of tensors.

    Args:
        root: job directory, e.g. ``/dev/shm/stoker/<job-name>`` (holds ``manifest.json``).
        rank, world_size, local_rank: see :func:`discover_rank` (default: ``torch.distributed``,
            else torchrun's variables, else a single process). ``world_size`` must be the job's
            ``stoker.dp-world-size``.
        start_step: first step to read when no state is loaded (default: the manifest's
            ``first_step``).
        stop_after_step, timeout_s, poll_interval_s, manifest_poll_interval_s, read_ahead: as
            :class:`stoker.BatchReader`.
        mask_backfilled: set ``labels`` of back-filled samples to -100 (unpacked their rows,
            packed their tokens; a new tensor for a batch that has any), so
            ``model(**batch).loss`` trains on each record once per epoch.
        device: hand each batch over on this device (``"cuda"`` means ``cuda:<local_rank>``),
            double buffered: when batch ``s`` is handed over, the copy of ``s + 1`` is already
            issued (on a side CUDA stream, so it overlaps the training on ``s``; the consumer's
            stream waits for it before ``s + 1`` is used). ``None``: tensors over the mapped
            file (read-only, no copy). On the CPU the hand-off is a copy the batch owns.
        pin_memory: with ``device``, stage each batch in pinned host memory first, which makes
            the copy to an accelerator asynchronous; without an accelerator it warns once and
            stages in ordinary memory (as ``DataLoader(pin_memory=True)`` does).
        pixel_dtype: ``torch.float32`` or ``torch.bfloat16`` for ``pixel_values``; ``None``:
            the file's (float32 for a uint8 job), as :meth:`stoker.Batch.to_torch`. A uint8
            job's pixels (``stoker.image.pixel-dtype: UINT8``) cross to ``device`` as uint8 (a
            quarter of float32's bytes) and are normalized there, on the copy stream
            (:func:`stoker.pixels.normalize_uint8_torch`); without ``device`` on the CPU.

    With ``device``, the reader fetches step ``s + 1`` when ``s`` is handed over, so ``ack.json``
    marks ``s`` consumed while it trains (the job's resume step comes from :meth:`state_dict`,
    which counts only the batches handed over). The first batch waits for the second's file.

    Iterating yields steps ``next_step .. end`` once each; iterating again continues where the
    last iteration stopped. Use it directly or through ``DataLoader(ds, batch_size=None,
    num_workers=0, pin_memory=...)`` / torchdata's ``StatefulDataLoader`` (which saves
    :meth:`state_dict`). ``num_workers > 0`` raises ``RuntimeError`` at the first batch.

    Raises:
        ValueError: (at construction) a bad rank (see :func:`discover_rank`) or a world size
            other than the manifest's; :class:`DataStateError` (a ``ValueError``) from
            :meth:`load_state_dict` and while iterating, when the job does not continue the
            loaded state; otherwise what :class:`stoker.BatchReader` raises.
        TimeoutError: no ``manifest.json`` within ``timeout_s``.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        rank: int | None = None,
        world_size: int | None = None,
        local_rank: int | None = None,
        start_step: int | None = None,
        stop_after_step: int | None = None,
        timeout_s: float | None = None,
        poll_interval_s: float = 0.005,
        manifest_poll_interval_s: float = 0.1,
        read_ahead: bool = True,
        mask_backfilled: bool = False,
        device: str | torch.device | None = None,
        pin_memory: bool = False,
        pixel_dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if pixel_dtype not in (None, torch.float32, torch.bfloat16):
            raise ValueError(
                f"pixel_dtype must be torch.float32 or torch.bfloat16, got {pixel_dtype!r}"
            )
        self.pixel_dtype = pixel_dtype
        self.root = Path(root)
        self.ranks = discover_rank(rank, world_size, local_rank)
        self.timeout_s = timeout_s
        self.poll_interval_s = poll_interval_s
        self._reader_args: dict[str, Any] = {
            "poll_interval_s": poll_interval_s,
            "timeout_s": timeout_s,
            "manifest_poll_interval_s": manifest_poll_interval_s,
            "stop_after_step": stop_after_step,
            "read_ahead": read_ahead,
        }
        self.mask_backfilled = mask_backfilled
        self.device = self._resolve_device(device)
        self.pin_memory = pin_memory
        if pin_memory and self.device is None:
            raise ValueError("pin_memory=True stages the copy to a device: pass device= too")
        self._manifest = self._load_manifest()
        m = self._manifest
        if m.world_size != self.ranks.world_size:
            raise ValueError(
                f"this trainer has DP world size {self.ranks.world_size} (from "
                f"{self.ranks.source}), but job {m.job_name!r} ({self._manifest_path}) writes "
                f"batches for world_size {m.world_size}: start {m.world_size} DP ranks, or "
                f"resubmit the job with --stoker.dp-world-size {self.ranks.world_size}"
            )
        self._sequence = sequence_of(m)
        self._job_name = m.job_name
        self._next_step = m.first_step if start_step is None else start_step
        self._generation = m.generation
        self._reader: BatchReader | None = None
        self._warned_pin = False
        self._copy_stream: Any = None
        #: With ``device``: the step whose copy is in flight (or done) while the last batch
        #: handed over trains, ``None`` when there is none (before the first, at the end).
        self.staged_step: int | None = None

    # ------------------------------------------------------------------ public API
    @property
    def rank(self) -> int:
        """The DP rank whose batches this dataset reads."""
        return self.ranks.rank

    @property
    def world_size(self) -> int:
        """The DP world size (the manifest's)."""
        return self.ranks.world_size

    @property
    def manifest(self) -> Manifest:
        """The manifest the dataset last checked (at construction, restore, or a generation the
        reader followed)."""
        return self._manifest

    @property
    def next_step(self) -> int:
        """The step the next batch handed over will be."""
        return self._next_step

    @property
    def reader(self) -> BatchReader | None:
        """The :class:`stoker.BatchReader` of the current iteration (counters, wait-time ratio),
        or ``None`` before the first."""
        return self._reader

    def state_dict(self) -> dict[str, Any]:
        """The data position to save in the trainer's checkpoint (plain ``int``/``str``/``None``
        and dicts; :mod:`stoker.data_state` describes it): the next step, this rank, the world
        size, the job and the generation of the last batch, and the fields that fix the batch
        sequence. Counts only batches handed over (not the one a double buffer holds)."""
        state = make_state(self._manifest, self.rank, self._next_step, self._generation)
        state["job_name"] = self._job_name
        state["sequence"] = dict(self._sequence)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state_dict` (before iterating; replaces ``start_step``).

        Reads ``manifest.json`` again and checks it continues ``state`` (see
        :func:`stoker.data_state.check_restore`): same rank and world size (any rank's state of
        the checkpoint where the job starts a stage of another world size at the state's next
        step), same job and batch sequence, and a job resubmitted since must start at the state's
        next step.

        Raises:
            DataStateError: a mismatch; the message names both values (and the
                ``--stoker.resume-step`` to resubmit the job with).
        """
        state = validate_state(state)
        m = self._load_manifest()
        check_restore(state, m, self.rank, self.world_size, str(self._manifest_path))
        self.close()
        self._manifest = m
        self._sequence = dict(state["sequence"])
        self._job_name = state["job_name"]
        self._next_step = state["next_step"]
        self._generation = state["generation"]

    def close(self) -> None:
        """End the current iteration's reader (:meth:`stoker.BatchReader.close`)."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def __iter__(self) -> Iterator[StokerBatch]:
        if torch.utils.data.get_worker_info() is not None:
            raise RuntimeError(
                "StokerDataset cannot run in DataLoader worker processes (num_workers > 0): "
                "each worker would open its own reader of the same rank, and the rank's reader "
                "is the one that acknowledges steps (ack.json), unlinks their files and so "
                "paces the job's prefetch gate; several would ack out of order and each hand "
                "over every batch. Use DataLoader(dataset, batch_size=None, num_workers=0, "
                "pin_memory=True): the reader already maps the next batch on a background "
                "thread, and StokerDataset(device=..., pin_memory=True) double-buffers the copy "
                "to the GPU"
            )
        self.close()
        reader = BatchReader(self.root, self.rank, start_step=self._next_step, **self._reader_args)
        self._reader = reader
        host = self._host_batches(reader)
        if self.device is None:
            return self._plain(host)
        return self._double_buffered(host)

    def __getstate__(self) -> dict[str, Any]:
        # picklable before iterating (DataLoader workers with the spawn start method), so that
        # the worker check in __iter__ gives the message instead of a pickling error
        state = self.__dict__.copy()
        state["_reader"] = None
        state["_copy_stream"] = None
        return state

    # ------------------------------------------------------------------ internals
    @property
    def _manifest_path(self) -> Path:
        return self.root / "manifest.json"

    def _load_manifest(self) -> Manifest:
        path = self._manifest_path
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        while not path.exists():
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {self.timeout_s}s waiting for {path}")
            time.sleep(self.poll_interval_s)
        return Manifest.load(path)

    def _resolve_device(self, device: str | torch.device | None) -> torch.device | None:
        if device is None:
            return None
        d = torch.device(device)
        if d.type != "cpu" and d.index is None:
            d = torch.device(d.type, self.ranks.local_rank)
        return d

    def _host_batches(self, reader: BatchReader) -> Iterator[StokerBatch]:
        """The reader's batches as :class:`StokerBatch` on the host, each checked to come from
        a job that continues this dataset's sequence."""
        checked: Manifest | None = None
        for batch in reader:
            m = reader.manifest
            if m is not checked:
                check_sequence(self._state_for_check(batch.step), m, str(self._manifest_path))
                # a new stage of the run (accepted at its first step) goes on in its sequence
                self._sequence = sequence_of(m)
                self._manifest, checked = m, m
            yield _stoker_batch(
                batch,
                m.generation,
                self.mask_backfilled,
                self.pixel_dtype,
                defer_uint8=self.device is not None,
            )

    def _state_for_check(self, next_step: int) -> dict[str, Any]:
        return {"job_name": self._job_name, "sequence": self._sequence, "next_step": next_step}

    def _handed(self, batch: StokerBatch) -> None:
        self._next_step = batch.step + 1
        self._generation = batch.generation

    def _plain(self, host: Iterator[StokerBatch]) -> Iterator[StokerBatch]:
        for batch in host:
            self._handed(batch)
            yield batch

    def _stage(self, batch: StokerBatch) -> _Staged:
        """Issue the copy of ``batch`` to the device (through pinned memory if asked)."""
        assert self.device is not None
        pin = self.pin_memory
        if pin and not _accelerator_available():
            if not self._warned_pin:
                warnings.warn(
                    "StokerDataset(pin_memory=True): no accelerator, so no pinned memory; "
                    "staging in ordinary memory",
                    stacklevel=3,
                )
                self._warned_pin = True
            pin = False
        if pin:
            host = {
                k: torch.empty(v.shape, dtype=v.dtype, pin_memory=True).copy_(v)
                for k, v in batch.tensors().items()
            }
        else:
            host = batch.tensors()
        if self.device.type == "cuda":
            if self._copy_stream is None:
                self._copy_stream = torch.cuda.Stream(self.device)
            with torch.cuda.stream(self._copy_stream):
                moved = {k: v.to(self.device, non_blocking=pin) for k, v in host.items()}
                self._normalize_pending(batch, moved)
                event = torch.cuda.Event()
                event.record(self._copy_stream)
            return _Staged(self._staged_batch(batch, moved), event)
        if self.device.type == "cpu":
            # the hand-off on the CPU: a copy the batch owns (pinned staging already is one)
            moved = host if pin else {k: v.clone() for k, v in host.items()}
        else:
            moved = {k: v.to(self.device, non_blocking=pin) for k, v in host.items()}
        self._normalize_pending(batch, moved)
        return _Staged(self._staged_batch(batch, moved), None)

    def _normalize_pending(self, batch: StokerBatch, moved: dict[str, torch.Tensor]) -> None:
        """Normalize a uint8 batch's ``pixel_values`` (and ``pixel_values_videos``, with the
        video processor's arithmetic) where ``moved`` has them (the device)."""
        if batch._pending_vision is None:
            return
        if "pixel_values" in moved:
            moved["pixel_values"] = normalize_uint8_torch(
                moved["pixel_values"], batch._pending_vision, dtype=self.pixel_dtype
            )
        if "pixel_values_videos" in moved:
            moved["pixel_values_videos"] = normalize_uint8_video_torch(
                moved["pixel_values_videos"], batch._pending_vision, dtype=self.pixel_dtype
            )

    @staticmethod
    def _staged_batch(batch: StokerBatch, moved: dict[str, torch.Tensor]) -> StokerBatch:
        out = batch._with(moved)
        out._pending_vision = None
        return out

    def _ready(self, staged: _Staged) -> StokerBatch:
        """``staged``'s batch, usable on the consumer's current stream."""
        if staged.event is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(staged.event)
            for v in staged.batch.tensors().values():
                v.record_stream(current)  # the copy stream allocated it
        return staged.batch

    def _double_buffered(self, host: Iterator[StokerBatch]) -> Iterator[StokerBatch]:
        first = next(host, None)
        staged = None if first is None else self._stage(first)
        while staged is not None:
            current = staged
            following = next(host, None)  # the reader acks current's step
            staged = None if following is None else self._stage(following)
            self.staged_step = None if following is None else following.step
            batch = self._ready(current)
            self._handed(batch)
            yield batch
