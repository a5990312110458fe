"""torchtitan reading one Stoker stream per data-parallel rank: :class:`StokerDataLoader`, a
torchtitan ``BaseDataLoader`` whose state goes into torchtitan's distributed checkpoint (DCP) and
comes back from it, also at another DP world size.

torchtitan's own loader cannot take Stoker's per-rank batches as they are: its
``ParallelAwareDataloader`` pickles each rank's position under ``dp_rank_<r>`` and asserts the
same DP degree when it loads (a checkpoint of W ranks has no ``dp_rank_<r>`` for a rank r >= W,
which DCP's load refuses as a missing key), and its batches are torchtitan's token streams.
:class:`StokerDataLoader` changes exactly that:

* It iterates the rank's :class:`stoker.torch.StokerDataset` (DP rank and world size: the
  ``dp_rank`` / ``dp_world_size`` the trainer builds it with) and yields torchtitan's
  ``(input_dict, labels)``: ``input_dict["input"]`` is the batch's ``input_ids`` (B, L) int64,
  every other entry of the batch except ``labels`` keeps the name the transformers Qwen-VL
  ``forward`` takes (:meth:`stoker.Batch.to_torch`: ``attention_mask`` and
  ``mm_token_type_ids`` (B, L) int64; when the batch holds images ``pixel_values`` (N,
  patch_dim) float32 or bfloat16 and ``image_grid_thw`` (n, 3) int64, videos likewise
  ``pixel_values_videos`` / ``video_grid_thw``; a packed batch the M-RoPE ``position_ids``
  (4, B, L) int64 instead of ``attention_mask``, and ``use_cache`` ``False``), so torchtitan's
  ``post_dataloading_process`` passes them to ``model(input, **rest)``. ``input_dict`` is a
  :class:`stoker.torch.StokerBatch`, so its attributes (``step``, ``rank``, ``sample_index``...)
  say where the batch came from.
* ``labels`` (B, L) int64 are the batch's labels shifted left by one, the last position -100:
  torchtitan's cross-entropy compares the prediction at position t with ``labels[:, t]``
  (its own datasets shift when they tokenize), where a transformers model shifts inside its
  loss. Back-filled samples' labels are -100 unless ``mask_backfilled=False``.
* A batch of no rows (every slot of the rank's batch past the epoch's end or dead-lettered; the
  job still writes it, so that each rank has every step) is handed over as one placeholder token
  0 (``input`` (1, 1), ``attention_mask`` (1, 1) of 1) with label -100: the rank runs its
  forward and backward and joins the step's gradient reduction (FSDP / DDP), adding no token.
* The iteration ends after the job's last step, and after as many placeholder batches as fill
  the run's last optimizer step (``Config.gradient_accumulation_steps``, torchtitan's own
  accumulation; the job's steps need not be a multiple of it): torchtitan's ``batch_generator``
  turns the end into ``DataloaderExhaustedError`` and ``Trainer.train`` stops. Set
  ``training.steps`` to :func:`training_steps` (the job's steps over the accumulation, rounded
  up): a run that asks for more batches than the job has ends with its last step cancelled, and
  without the checkpoint of its last step.
* :meth:`StokerDataLoader.state_dict` is ``{STATE_KEY: <the rank's data state as JSON>}``
  (:mod:`stoker.data_state`), which torchtitan's ``CheckpointManager`` saves under
  ``dataloader``. The key is the same on every rank and at every world size, so DCP saves one
  copy (it keeps one rank's value of a key that every rank has) and every rank of any world size
  finds it when it loads. That is enough, because torchtitan checkpoints every rank after the
  same optimizer step: the ranks' states of one checkpoint differ only in ``rank``, and
  :meth:`~StokerDataLoader.load_state_dict` restores the rank from whichever was kept
  (:func:`stoker.data_state.as_rank`); at another world size (the job resubmitted with
  ``--stoker.dp-world-size W'``, which starts a stage at the checkpoint's next step) any rank's
  state restores any rank (:func:`stoker.data_state.check_restore`).
* When a checkpoint takes the state after batches trained since the last one, rank 0 logs the
  ``python -m stoker.resume <checkpoint folder>`` line that prints the job's resume command: it
  reads the data state out of torchtitan's ``step-<N>`` DCP folder.

Use it as the trainer config's ``dataloader`` (torchtitan builds it with ``build(dp_world_size=,
dp_rank=, tokenizer=, seq_len=, local_batch_size=, snapshot_every_n_steps=)``)::

    from stoker.torchtitan import StokerDataLoader, training_steps

    root = "/dev/shm/stoker/sft-run-7"
    accumulation = 4                                     # global / (local x DP degree)
    config.dataloader = StokerDataLoader.Config(
        root=root, timeout_s=600, gradient_accumulation_steps=accumulation
    )
    config.training.local_batch_size = 4                 # the job's stoker.micro-batch-size
    config.training.steps = training_steps(root, gradient_accumulation_steps=accumulation)

Launch one process per DP rank (``torchrun``; the job's ``stoker.dp-world-size`` DP ranks). The
model's ``forward(input, **input_dict)`` must return the logits (B, L, vocabulary), e.g. a
transformers Qwen-VL wrapped as ``model(input_ids=input, **rest).logits``. Needs torchtitan
(0.3) and torch beside ``stoker``; ``import stoker`` does not import them.

Data parallelism only (FSDP, DDP, HSDP: every process is a DP rank of its own). With tensor,
context or pipeline parallelism several processes share a DP rank, and each would open a reader
of that rank's stream, while one reader per rank acknowledges its steps and paces the job: the
loader refuses it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torchtitan.components.dataloader import BaseDataLoader

from .data_state import DataStateError, as_rank, validate_state
from .protocol import Manifest
from .torch import StokerBatch, StokerDataset

__all__ = ["STATE_KEY", "StokerDataLoader", "training_steps"]

logger = logging.getLogger(__name__)

#: The key of :meth:`StokerDataLoader.state_dict` (in torchtitan's DCP checkpoint:
#: ``dataloader.stoker_data_state``), the same on every rank and at every world size.
STATE_KEY = "stoker_data_state"

_PIXEL_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def training_steps(
    root: str | os.PathLike[str],
    gradient_accumulation_steps: int = 1,
    *,
    timeout_s: float | None = None,
) -> int:
    """torchtitan's ``training.steps`` for the Stoker job in ``root``: the job's ``num_steps``
    (every rank reads one batch per step) over ``gradient_accumulation_steps`` batches per
    optimizer step, rounded up (the loader, told the same accumulation, fills the last optimizer
    step with batches that train on nothing). Waits for ``root/manifest.json`` up to
    ``timeout_s`` (``None``: no limit).

    torchtitan's step counts on across resumes (its checkpoint holds it), so this holds for a
    run whose gradient accumulation stays the same, also across a resume at another world size.
    A run resumed from optimizer step k with another accumulation a' goes on for ``k +
    (num_steps - next_step) / a'`` steps, ``next_step`` being its checkpoint's (``k`` times the
    accumulation before).

    Raises:
        ValueError: ``gradient_accumulation_steps`` below 1.
        TimeoutError: no manifest within ``timeout_s``.
    """
    path = Path(root) / "manifest.json"
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while not path.exists():
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s}s waiting for {path}")
        time.sleep(0.1)
    m = Manifest.load(path)
    if gradient_accumulation_steps < 1:
        raise ValueError(
            f"gradient_accumulation_steps must be >= 1, got {gradient_accumulation_steps}"
        )
    return -(-m.num_steps // gradient_accumulation_steps)


class StokerDataLoader(BaseDataLoader):
    """The batches of one DP rank of a Stoker job as torchtitan's ``(input_dict, labels)``, with
    the rank's data state in torchtitan's checkpoint; see the module's description.

    Args:
        config: :class:`StokerDataLoader.Config`.
        dp_rank, dp_world_size: the rank's data-parallel position; ``dp_world_size`` must be
            the job's ``stoker.dp-world-size``.
        local_batch_size: torchtitan's ``training.local_batch_size``, which must be the job's
            ``stoker.micro-batch-size`` (torchtitan computes the gradient accumulation with it).
        tokenizer, seq_len, snapshot_every_n_steps: what torchtitan passes every loader; unused
            (the job tokenizes, each batch is as long as its longest row, and the state is
            taken at each checkpoint).

    Raises:
        ValueError: no ``root``, a ``pixel_dtype`` other than ``"float32"`` / ``"bfloat16"``,
            more ``torch.distributed`` ranks than DP ranks (tensor, context or pipeline
            parallelism), a ``local_batch_size`` other than the job's micro-batch size, or a DP
            world size other than the job's (:class:`stoker.torch.StokerDataset`).
        TimeoutError: no ``manifest.json`` within ``timeout_s``.
    """

    @dataclass(kw_only=True, slots=True)
    class Config(BaseDataLoader.Config):
        root: str = ""
        """The Stoker job directory, ``<stoker.output.root>/<stoker.job-name>``."""

        timeout_s: float | None = None
        """Longest wait for the manifest or a batch (``None``: no limit)."""

        mask_backfilled: bool = True
        """Label -100 on back-filled samples, so each record trains once per epoch."""

        pixel_dtype: str | None = None
        """``"float32"`` or ``"bfloat16"`` pixels; ``None``: the job's (float32 for uint8)."""

        device: str | None = None
        """Hand each batch over on this device, double buffered
        (:class:`stoker.torch.StokerDataset`); ``None``: on the host (torchtitan copies it)."""

        pin_memory: bool = False
        """With ``device``: stage the copy in pinned host memory."""

        gradient_accumulation_steps: int = 1
        """Batches per optimizer step, as torchtitan derives them (``global_batch_size`` /
        (``local_batch_size`` x DP degree)): after the job's last step the loader hands over
        placeholder batches (one token, label -100) until that optimizer step is full, so that
        torchtitan trains it instead of cancelling it for want of batches."""

    def __init__(
        self,
        config: Config,
        *,
        dp_rank: int,
        dp_world_size: int,
        local_batch_size: int,
        tokenizer: Any = None,
        seq_len: int | None = None,
        snapshot_every_n_steps: int | None = None,
    ) -> None:
        if not config.root:
            raise ValueError("StokerDataLoader.Config.root: pass the Stoker job directory")
        if config.pixel_dtype is not None and config.pixel_dtype not in _PIXEL_DTYPES:
            raise ValueError(
                f"pixel_dtype {config.pixel_dtype!r} is not one of {sorted(_PIXEL_DTYPES)}"
            )
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() != dp_world_size:
            raise ValueError(
                f"{dist.get_world_size()} torch.distributed ranks but DP world size "
                f"{dp_world_size}: with tensor, context or pipeline parallelism several ranks "
                "share a DP rank and each would read (and acknowledge) its Stoker stream; "
                "StokerDataLoader supports data parallelism only (FSDP, DDP, HSDP)"
            )
        self.dataset = StokerDataset(
            config.root,
            rank=dp_rank,
            world_size=dp_world_size,
            timeout_s=config.timeout_s,
            mask_backfilled=config.mask_backfilled,
            pixel_dtype=None if config.pixel_dtype is None else _PIXEL_DTYPES[config.pixel_dtype],
            device=config.device,
            pin_memory=config.pin_memory,
        )
        m = self.dataset.manifest
        if local_batch_size != m.micro_batch_size:
            raise ValueError(
                f"training.local_batch_size is {local_batch_size}, but job {m.job_name!r} "
                f"writes batches of {m.micro_batch_size} rows (stoker.micro-batch-size): set "
                f"training.local_batch_size = {m.micro_batch_size}"
            )
        if config.gradient_accumulation_steps < 1:
            raise ValueError(
                "StokerDataLoader.Config.gradient_accumulation_steps must be >= 1, got "
                f"{config.gradient_accumulation_steps}"
            )
        self._accumulation = config.gradient_accumulation_steps
        #: The next step when the state was last loaded or saved: a checkpoint after more
        #: batches logs the resume line.
        self._reported_step = self.dataset.next_step

    @property
    def rank(self) -> int:
        """The DP rank whose batches this loader reads."""
        return self.dataset.rank

    def __iter__(self) -> Iterator[tuple[dict[str, Any], torch.Tensor]]:
        for batch in self.dataset:
            yield self._titan_batch(batch)
        m = self.dataset.manifest
        if self.dataset.next_step >= m.num_steps:  # the job's last step was handed over
            for step in range(
                m.num_steps, -(-m.num_steps // self._accumulation) * self._accumulation
            ):
                yield self._titan_batch(StokerBatch.placeholder(step, self.rank, m.generation))

    def state_dict(self) -> dict[str, Any]:
        """``{STATE_KEY: json}``: the rank's data state (:meth:`StokerDataset.state_dict`) as a
        JSON string, to be saved in torchtitan's checkpoint. Counts only batches handed over."""
        state = self.dataset.state_dict()
        if self.rank == 0 and state["next_step"] > self._reported_step:
            logger.info(
                "checkpoint: data state next step %d; to resume the job for it: python -m "
                "stoker.resume <the checkpoint's step-N folder> --savepoint <the job's "
                "savepoint> -- <the job's options>",
                state["next_step"],
            )
        self._reported_step = state["next_step"]
        return {STATE_KEY: json.dumps(state, sort_keys=True)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a checkpoint's :meth:`state_dict` (any rank's; before iterating). An
        empty one (torchtitan's fresh start) changes nothing.

        At the checkpoint's world size the state is taken as this rank's
        (:func:`stoker.data_state.as_rank`); at another one, as it is (the job must start a
        stage of this world size at its next step). Then
        :meth:`stoker.torch.StokerDataset.load_state_dict` checks that the job continues it.

        Raises:
            DataStateError: no ``STATE_KEY`` (not a checkpoint of a StokerDataLoader), not a
                data state, or a job that does not continue it (the message names what differs
                and the ``--stoker.resume-step`` to resubmit the job with).
        """
        if not state_dict:
            return
        if STATE_KEY not in state_dict:
            raise DataStateError(
                f"the checkpoint's dataloader state has no {STATE_KEY!r} (keys "
                f"{sorted(state_dict)}): not a checkpoint of a stoker.torchtitan.StokerDataLoader"
            )
        state = validate_state(json.loads(state_dict[STATE_KEY]))
        if state["world_size"] == self.dataset.world_size:
            state = as_rank(state, self.rank)
        self.dataset.load_state_dict(state)
        self._reported_step = self.dataset.next_step

    @staticmethod
    def _titan_batch(batch: StokerBatch) -> tuple[StokerBatch, torch.Tensor]:
        """``batch`` as torchtitan's ``(input_dict, labels)`` (see the module's description)."""
        if batch["input_ids"].shape[0] == 0:  # a 0-row step: the placeholder, its provenance
            placeholder = StokerBatch.placeholder(batch.step, batch.rank, batch.generation)
            placeholder.__dict__.update(batch.__dict__)
            batch = placeholder
        inputs = StokerBatch()
        inputs.__dict__.update(batch.__dict__)  # the provenance attributes
        inputs["input"] = batch["input_ids"]
        inputs.update((k, v) for k, v in batch.items() if k not in ("input_ids", "labels"))
        labels = batch["labels"]
        shifted = torch.full_like(labels, -100)
        shifted[:, :-1] = labels[:, 1:]
        return inputs, shifted
