"""Megatron-LM reading one Stoker stream per data-parallel rank through its external data iterator
(``--dataloader-type external``), with the rank's data state in Megatron's per-DP-rank dataloader
checkpoint (``--dataloader-save``), restored also at another DP world size.

The protocol matched is Megatron-LM's training loop at commit
``d98e8a64ddf34856e74b24714e3bedb2f5a39553`` (``megatron/training/``, not on PyPI) with
megatron-core 0.16.1's ``RerunDataIterator``:

* ``build_train_valid_test_data_loaders`` (training.py) calls the provider with
  ``train_val_test_num_samples`` on every rank when the provider has ``is_distributed = True``
  (else on tensor-parallel rank 0 only), and ``build_pretraining_data_loader`` passes an external
  "dataset" through as it is; ``build_train_valid_test_data_iterators`` wraps it as
  ``RerunDataIterator(dataloader)``, which calls ``next()`` on it once per micro-batch
  (``forward_step`` -> ``get_batch(data_iterator)``), ``get_num_microbatches()`` times per
  iteration, ``global_batch_size = DP x micro_batch_size x num_microbatches``.
* ``save_checkpoint`` -> ``maybe_save_dataloader_state`` (checkpointing.py), on the tensor-parallel
  rank 0 of the first pipeline stage of each DP rank, calls ``train_iterator.iterable.save_state()``
  and ``torch.save({"dataloader_state_dict": state}, ...)`` to
  ``<dataloader_save>/iter_<iteration:07d>/mp_rank_00[_000]/train_dataloader_dprank<dp:03d>.pt``
  (:func:`dataloader_state_path`); a rank whose iterator is ``None`` saves nothing.
* Nothing in Megatron-LM restores it: the provider does, at build time, from ``args.iteration``
  (set by ``load_checkpoint``), as ``examples/multimodal/dataloader_provider.py`` does with
  Energon's ``restore_state_rank``. :class:`StokerProvider` does that.

What the adapter does:

* :class:`StokerProvider` is the ``train_valid_test_datasets_provider`` to pass to ``pretrain``.
  ``is_distributed = True``, so Megatron calls it on every rank and it decides which reads: one
  process per DP rank reads the rank's stream (its reader acknowledges the steps, which paces
  the job, so two readers of one rank would not work), the one on tensor-parallel rank 0 and
  context-parallel rank 0; it returns ``(StokerDataIterator, None, None)`` there and ``(None,
  None, None)`` on the other ranks of the DP rank, whose ``get_batch`` receives the batch by
  broadcast, as in Megatron's own examples (``tensor_parallel.broadcast_data``). Pipeline
  parallelism is refused (the last stage needs the labels too, which would take a second reader).
  The DP rank and size come from ``megatron.core.parallel_state`` when it is initialised, else
  from ``torch.distributed`` (every process a DP rank).
* :class:`StokerDataIterator` (the ``RerunDataIterator``'s ``iterable``) hands over the rank's
  batches as :class:`stoker.torch.StokerBatch` (the transformers Qwen-VL ``forward``'s keys:
  ``input_ids``, ``labels`` (B, L) int64, not shifted; ``attention_mask``,
  ``mm_token_type_ids`` (B, L) int64; ``pixel_values`` (N, patch_dim) float32 or bfloat16 and
  ``image_grid_thw`` (n, 3) int64 with images, ``pixel_values_videos`` / ``video_grid_thw``
  with videos; a packed batch ``position_ids`` (4, B, L) instead of ``attention_mask``), with
  their provenance (``step``, ``rank``, ``sample_index``...). Megatron's iteration ``i`` trains
  Stoker steps ``i*M .. i*M + M - 1`` (``M = num_microbatches``), so after iteration ``i`` the
  data state's ``next_step`` is ``i*M`` and ``consumed_train_samples`` is ``i x
  global_batch_size``; both are checked when the provider restores.
* A batch of no rows (every slot of the rank's batch past the epoch's end or dead-lettered; the
  job still writes it, so each rank has every step) is handed over as one placeholder token 0
  (``input_ids``, ``attention_mask`` of 1, ``mm_token_type_ids`` 0, (1, 1)) labelled -100, so
  the rank runs its forward and backward and joins the gradient reduction, adding no token.
  After the job's last step the iterator hands over such placeholders until the iteration is
  full, then raises ``StopIteration``: set ``--train-iters`` to :func:`train_iters`.
* ``save_state()`` is the rank's data state (:mod:`stoker.data_state`; plain ints, strings and
  dicts, so ``torch.load(weights_only=True)`` and ``python -m stoker.resume`` read the ``.pt``
  file); rank 0 logs the ``python -m stoker.resume`` line that prints the job's resume command.
* At a resume (``args.iteration > 0``) the provider loads ``train_dataloader_dprank<r>.pt`` of
  its DP rank, or dprank000's when there is none (a resume with more DP ranks), and
  :meth:`StokerDataIterator.restore_state_rank` checks that the job continues it
  (:func:`stoker.data_state.check_restore`): at the checkpoint's world size the state is taken
  as this rank's; at another one (the job resubmitted with ``--stoker.dp-world-size W'``, which
  starts a stage at the checkpoint's next step) any rank's state restores any rank. Keep ``DP x
  micro_batch_size`` (the job's W x B) and the global batch size at such a resume, so that the
  iteration still maps to the same steps; the checks say so when they differ.

Use it in the script that calls ``pretrain`` (``--dataloader-type external --dataloader-save
<dir> --micro-batch-size <the job's B> --global-batch-size <W x B x M> --train-iters <train_iters>``)::

    from megatron.training import get_args, pretrain
    from stoker.megatron import StokerProvider

    provider = StokerProvider("/dev/shm/stoker/sft-run-7", get_args, timeout_s=600)
    pretrain(provider, model_provider, ModelType.encoder_or_decoder, forward_step)

with a ``forward_step(data_iterator, model)`` whose ``get_batch`` takes ``next(data_iterator)``
(a dict of tensors) on the reading rank. Needs megatron-core (0.16) and torch beside ``stoker``;
``import stoker`` does not import them.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from megatron.core import parallel_state

from .data_state import DataStateError, as_rank, validate_state
from .torch import StokerBatch, StokerDataset

__all__ = [
    "DATALOADER_FILE",
    "StokerDataIterator",
    "StokerProvider",
    "dataloader_state_path",
    "train_iters",
]

logger = logging.getLogger(__name__)

#: Megatron-LM's per-DP-rank dataloader checkpoint file (``maybe_save_dataloader_state``).
DATALOADER_FILE = "train_dataloader_dprank{dp_rank:03d}.pt"


def dataloader_state_path(
    dataloader_save: str | os.PathLike[str],
    iteration: int,
    dp_rank: int,
    *,
    pipeline_parallel: bool = False,
) -> Path:
    """Where Megatron-LM's ``maybe_save_dataloader_state`` saves DP rank ``dp_rank``'s state
    after ``iteration``: ``<dataloader_save>/iter_<iteration:07d>/mp_rank_00/`` (``mp_rank_00_000``
    with ``pipeline_parallel``) ``train_dataloader_dprank<dp_rank:03d>.pt``."""
    mp = "mp_rank_00_000" if pipeline_parallel else "mp_rank_00"
    return (
        Path(dataloader_save)
        / f"iter_{iteration:07d}"
        / mp
        / DATALOADER_FILE.format(dp_rank=dp_rank)
    )


def train_iters(num_steps: int, num_microbatches: int) -> int:
    """Megatron's ``--train-iters`` for a job of ``num_steps`` steps (the manifest's) read as
    ``num_microbatches`` micro-batches per iteration: ``ceil(num_steps / num_microbatches)``
    (the iterator fills the last iteration with placeholder batches).

    Raises:
        ValueError: ``num_microbatches`` below 1.
    """
    if num_microbatches < 1:
        raise ValueError(f"num_microbatches must be >= 1, got {num_microbatches}")
    return math.ceil(num_steps / num_microbatches)


class StokerDataIterator:
    """The batches of one DP rank as Megatron's external data iterator (wrapped by Megatron in a
    ``RerunDataIterator``); see the module's description.

    Args:
        dataset: the rank's :class:`stoker.torch.StokerDataset`.
        num_microbatches: micro-batches per Megatron iteration (``get_num_microbatches()``):
            the last iteration is filled up to it with placeholder batches.

    Raises:
        ValueError: ``num_microbatches`` below 1.
    """

    def __init__(self, dataset: StokerDataset, num_microbatches: int) -> None:
        if num_microbatches < 1:
            raise ValueError(f"num_microbatches must be >= 1, got {num_microbatches}")
        self.dataset = dataset
        self.num_microbatches = num_microbatches
        self._batches: Iterator[StokerBatch] | None = None
        self._filled = 0  # placeholder batches handed over past the job's last step
        self._reported_step = dataset.next_step

    def __iter__(self) -> StokerDataIterator:
        return self

    def __next__(self) -> StokerBatch:
        """The rank's next batch (a placeholder for a 0-row one or to fill the last iteration).

        Raises:
            StopIteration: the job's steps and the last iteration's fill are handed over.
            DataStateError: the job does not continue the restored state (from the reader).
        """
        if self._batches is None:
            self._batches = iter(self.dataset)
        batch = next(self._batches, None)
        if batch is not None:
            if batch["input_ids"].shape[0] > 0:
                return batch
            filler = StokerBatch.placeholder(batch.step, batch.rank, batch.generation)
            filler.__dict__.update(batch.__dict__)  # the step's provenance (no samples)
        else:
            m = self.dataset.manifest
            last = math.ceil(m.num_steps / self.num_microbatches) * self.num_microbatches
            step = m.num_steps + self._filled
            if self.dataset.next_step < m.num_steps or step >= last:
                raise StopIteration
            self._filled += 1
            filler = StokerBatch.placeholder(step, self.dataset.rank, m.generation)
        device = self.dataset.device
        return filler if device is None else filler.to(device)

    def save_state(self) -> dict[str, Any]:
        """What ``maybe_save_dataloader_state`` saves for this DP rank: the data state
        (:meth:`stoker.torch.StokerDataset.state_dict`; counts the batches handed over, not the
        placeholders). Rank 0 logs the ``python -m stoker.resume`` line for the checkpoint."""
        state = self.dataset.state_dict()
        if self.dataset.rank == 0 and state["next_step"] > self._reported_step:
            logger.info(
                "checkpoint: data state next step %d; to resume the job for it: python -m "
                "stoker.resume <dataloader-save>/iter_<N>/mp_rank_00/%s --savepoint <the job's "
                "savepoint> -- <the job's options>",
                state["next_step"],
                DATALOADER_FILE.format(dp_rank=0),
            )
        self._reported_step = state["next_step"]
        return state

    def restore_state_rank(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`save_state` (any DP rank's of the checkpoint; before the first
        batch), named as Energon's loader method that Megatron-LM's multimodal provider calls.

        Raises:
            DataStateError: not a data state, or the job does not continue it (the message names
                what differs and the ``--stoker.resume-step`` to resubmit the job with).
        """
        state = validate_state(state)
        if state["world_size"] == self.dataset.world_size:
            state = as_rank(state, self.dataset.rank)
        self.dataset.load_state_dict(state)
        self._batches = None
        self._reported_step = self.dataset.next_step


def _dp_position() -> tuple[int, int, bool]:
    """(DP rank, DP size, whether this process reads): from ``megatron.core.parallel_state``
    when initialised (the reader is tensor- and context-parallel rank 0), else
    ``torch.distributed`` (every process a DP rank).

    Raises:
        ValueError: pipeline parallelism.
        RuntimeError: neither is initialised.
    """
    ps = parallel_state
    if ps.model_parallel_is_initialized():
        if ps.get_pipeline_model_parallel_world_size() > 1:
            raise ValueError(
                "pipeline parallelism: the first and the last stage both need the batch, and one "
                "reader per DP rank acknowledges its Stoker steps; StokerProvider supports "
                "data, tensor and context parallelism"
            )
        reads = ps.get_tensor_model_parallel_rank() == 0 and ps.get_context_parallel_rank() == 0
        return ps.get_data_parallel_rank(), ps.get_data_parallel_world_size(), reads
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size(), True
    raise RuntimeError(
        "neither megatron.core.parallel_state nor torch.distributed is initialised: "
        "StokerProvider runs inside Megatron's pretrain (after initialize_megatron)"
    )


class StokerProvider:
    """Megatron-LM's ``train_valid_test_datasets_provider`` for a Stoker job: the DP rank's
    :class:`StokerDataIterator` as the training "dataset" (no validation or test data), its
    state restored at a resume; see the module's description.

    Args:
        root: the Stoker job directory, ``<stoker.output.root>/<stoker.job-name>``.
        get_args: returns Megatron's arguments when called (``megatron.training.get_args``):
            the provider reads ``micro_batch_size``, ``global_batch_size``, ``iteration``,
            ``consumed_train_samples``, ``dataloader_save`` and ``rampup_batch_size`` when
            Megatron calls it (after ``load_checkpoint`` set ``iteration``).
        timeout_s, mask_backfilled, pixel_dtype, device, pin_memory: as
            :class:`stoker.torch.StokerDataset` (``mask_backfilled`` default ``True``: each
            record trains once per epoch).

    Calling it (``provider(train_val_test_num_samples, vp_stage=None)``, as Megatron does)
    returns ``(StokerDataIterator | None, None, None)`` and raises:
        ValueError: a micro-batch size other than the job's, a global batch size that is not a
            multiple of DP x micro-batch size, ``--rampup-batch-size``, pipeline parallelism, or
            a DP size other than the job's (:class:`~stoker.torch.StokerDataset`).
        DataStateError: a resume (``iteration > 0``) without ``--dataloader-save`` or its
            state file, a state whose ``next_step`` is not ``iteration x num_microbatches`` or
            whose consumed samples are not ``consumed_train_samples``, or a job that does not
            continue it.
        TimeoutError: no ``manifest.json`` within ``timeout_s``.
    """

    #: Megatron calls the provider on every rank (``build_train_valid_test_data_loaders``).
    is_distributed = True

    def __init__(
        self,
        root: str | os.PathLike[str],
        get_args: Callable[[], Any],
        *,
        timeout_s: float | None = None,
        mask_backfilled: bool = True,
        pixel_dtype: torch.dtype | None = None,
        device: str | torch.device | None = None,
        pin_memory: bool = False,
    ) -> None:
        self.root = Path(root)
        self.get_args = get_args
        self._dataset_args: dict[str, Any] = {
            "timeout_s": timeout_s,
            "mask_backfilled": mask_backfilled,
            "pixel_dtype": pixel_dtype,
            "device": device,
            "pin_memory": pin_memory,
        }

    def __call__(
        self, train_val_test_num_samples: Any = None, vp_stage: int | None = None
    ) -> tuple[StokerDataIterator | None, None, None]:
        dp_rank, dp_size, reads = _dp_position()
        if not reads:
            return None, None, None
        args = self.get_args()
        if getattr(args, "rampup_batch_size", None):
            raise ValueError(
                "--rampup-batch-size changes the micro-batches per iteration, so Megatron's "
                "iteration no longer maps to fixed Stoker steps: leave it unset"
            )
        dataset = StokerDataset(self.root, rank=dp_rank, world_size=dp_size, **self._dataset_args)
        m = dataset.manifest
        if args.micro_batch_size != m.micro_batch_size:
            raise ValueError(
                f"--micro-batch-size is {args.micro_batch_size}, but job {m.job_name!r} writes "
                f"batches of {m.micro_batch_size} rows (stoker.micro-batch-size): pass "
                f"--micro-batch-size {m.micro_batch_size}"
            )
        per_step = dp_size * m.micro_batch_size
        if args.global_batch_size % per_step:
            raise ValueError(
                f"--global-batch-size {args.global_batch_size} is not a multiple of DP size x "
                f"micro-batch size = {per_step} (one Stoker step of the job)"
            )
        num_microbatches = args.global_batch_size // per_step
        data = StokerDataIterator(dataset, num_microbatches)
        if args.iteration > 0:
            self._restore(data, args, dp_rank, num_microbatches)
        return data, None, None

    @staticmethod
    def _restore(data: StokerDataIterator, args: Any, dp_rank: int, num_microbatches: int) -> None:
        """Restore ``data`` from the dataloader checkpoint of ``args.iteration`` (this DP rank's
        file, else dprank000's) and check it against the iteration and consumed samples."""
        iteration = args.iteration
        if not getattr(args, "dataloader_save", None):
            raise DataStateError(
                f"resuming at iteration {iteration} without --dataloader-save: the Stoker data "
                "state is in the dataloader checkpoint; pass the run's --dataloader-save"
            )
        path = dataloader_state_path(args.dataloader_save, iteration, dp_rank)
        if not path.is_file():
            path = dataloader_state_path(args.dataloader_save, iteration, 0)  # more DP ranks now
        if not path.is_file():
            raise DataStateError(
                f"no dataloader state {path} for iteration {iteration}: not a checkpoint of a "
                "run with StokerProvider and --dataloader-save"
            )
        saved = torch.load(path, map_location="cpu", weights_only=True)
        state = validate_state(saved.get("dataloader_state_dict"))
        if state["next_step"] != iteration * num_microbatches:
            raise DataStateError(
                f"{path}: data state next step {state['next_step']}, but Megatron resumes after "
                f"iteration {iteration} of {num_microbatches} micro-batches (Stoker steps "
                f"0 .. {iteration * num_microbatches - 1}): the global batch size or DP x "
                "micro-batch size changed since the checkpoint; keep them"
            )
        sequence = state["sequence"]
        consumed = state["next_step"] * sequence["world_size"] * sequence["micro_batch_size"]
        if args.consumed_train_samples != consumed:
            raise DataStateError(
                f"{path}: the data state's {state['next_step']} steps of "
                f"{sequence['world_size']} x {sequence['micro_batch_size']} samples are {consumed} "
                f"samples, but Megatron's consumed_train_samples is {args.consumed_train_samples}: "
                "the checkpoint and its dataloader state are not of one run, or DP x "
                "micro-batch size changed since the checkpoint; keep it"
            )
        data.restore_state_rank(state)
        if dp_rank == 0:
            logger.info(
                "restored the Stoker data state from %s (next step %d)",
                path,
                data.dataset.next_step,
            )
