"""The Hugging Face ``Trainer`` (and TRL's ``SFTTrainer``, and what runs on accelerate) reading one
Stoker stream per data-parallel rank.

A ``Trainer`` left as it is cannot take Stoker's per-rank batches: without ``max_steps`` it refuses
an ``IterableDataset``; accelerate's ``prepare`` makes rank 0 read and broadcast
(``dispatch_batches``) or every rank read ``world_size`` x the batch and keep a slice
(``IterableDatasetShard``); on resume it skips ``global_step x gradient_accumulation_steps``
batches of a stream that already starts at the right step; and its data-loader state is one file
with no rank in its name. :class:`StokerTrainerMixin` changes exactly that:

* ``get_train_dataloader`` returns ``DataLoader(dataset, batch_size=None, num_workers=0)`` over
  the rank's :class:`stoker.torch.StokerDataset`, not passed through ``accelerator.prepare``: no
  dispatch, no re-sharding; each rank trains on its own batches (``model(**batch)``).
* ``args.max_steps`` (optimizer steps), when not set, is ``ceil(num_steps /
  gradient_accumulation_steps)`` of the job's manifest (the run's steps count on across resumes,
  so ``global_step x gradient_accumulation_steps`` is the next Stoker step), and
  ``args.ignore_data_skip`` is set.
* Each checkpoint folder ``<output_dir>/checkpoint-<N>/`` gets every rank's data state
  (:meth:`~stoker.torch.StokerDataset.state_dict`) as :data:`DATA_STATE_FILE` (JSON), beside the
  Trainer's own per-rank RNG files; rank 0 logs the ``python -m stoker.resume`` line that prints
  the job's resume command for it.
* A batch of no rows (all of the rank's slots past the epoch's end or dead-lettered) trains as
  a forward pass of one placeholder token times 0, so the rank still joins DDP's reduction.
* The model's weights are restored exactly: transformers 5's Trainer does not map Qwen-VL
  checkpoints' weight names back and silently resumed from the initial weights
  (:meth:`StokerTrainerMixin._load_from_checkpoint`).
* ``train(resume_from_checkpoint=...)`` (a folder, or ``True`` for the last one in
  ``output_dir``) first restores the rank's data state from that folder, which checks that the
  job continues it (:func:`stoker.data_state.check_restore`); a rank with no file of its own (a
  resume with another world size) takes rank 0's.

Use it as ``StokerTrainer`` (a ``transformers.Trainer``), or mixed into another trainer class
before it, e.g. ``class SFT(StokerTrainerMixin, trl.SFTTrainer)``::

    from stoker.hf import StokerTrainer
    from stoker.torch import StokerDataset

    data = StokerDataset("/dev/shm/stoker/sft-run-7", mask_backfilled=True)
    args = TrainingArguments(output_dir="/ckpt/sft-run-7", gradient_accumulation_steps=4,
                             save_steps=500, per_device_train_batch_size=data.manifest.micro_batch_size)
    trainer = StokerTrainer(model=model, args=args, train_dataset=data)
    trainer.train(resume_from_checkpoint=resume)   # True / a folder after a restart

Launch one process per DP rank (``torchrun --nproc-per-node W``, the job's
``stoker.dp-world-size``). Needs ``transformers`` (and its ``accelerate``) and torch beside
``stoker``; ``import stoker`` does not import them.

Raises (at construction):
    TypeError: ``train_dataset`` is not a :class:`~stoker.torch.StokerDataset`.
    ValueError: ``args.dataloader_num_workers > 0`` (one reader per rank writes the acks that
        pace the job), or an ``args.max_steps`` beyond the job's steps.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader
from transformers import PreTrainedModel, Trainer
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint
from transformers.utils import ADAPTER_SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME

from .data_state import DataStateError, validate_state
from .torch import StokerDataset

__all__ = ["DATA_STATE_FILE", "StokerTrainer", "StokerTrainerMixin", "data_state_path"]

logger = logging.getLogger(__name__)

#: Each rank's data state in a Trainer checkpoint folder (JSON: :mod:`stoker.data_state`).
DATA_STATE_FILE = "stoker-data-state-rank-{rank}.json"


def data_state_path(checkpoint: str | os.PathLike[str], rank: int) -> Path:
    """Where rank ``rank``'s data state is in the Trainer checkpoint folder ``checkpoint``."""
    return Path(checkpoint) / DATA_STATE_FILE.format(rank=rank)


class StokerTrainerMixin:
    """Makes a ``transformers.Trainer`` (or a subclass, e.g. TRL's ``SFTTrainer``) train on one
    Stoker stream per DP rank; see the module's description. Put it before the trainer class."""

    train_dataset: Any
    args: Any
    state: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Trainer(model, args, data_collator, train_dataset, ...): by keyword or by position
        data = kwargs.get("train_dataset", args[3] if len(args) > 3 else None)
        if not isinstance(data, StokerDataset):
            raise TypeError(
                f"train_dataset must be a stoker.torch.StokerDataset, got {type(data).__name__}"
            )
        targs = kwargs.get("args") if "args" in kwargs else (args[1] if len(args) > 1 else None)
        if targs is None:
            raise ValueError("pass TrainingArguments (args=...): output_dir holds the checkpoints")
        if targs.dataloader_num_workers > 0:
            raise ValueError(
                f"dataloader_num_workers={targs.dataloader_num_workers}: a Stoker stream is read "
                "by one reader per rank in the training process (it writes the acks that pace "
                "the job); set it to 0"
            )
        m = data.manifest
        accumulation = targs.gradient_accumulation_steps
        planned = math.ceil(m.num_steps / accumulation)
        if targs.max_steps is None or targs.max_steps <= 0:
            targs.max_steps = planned
        elif targs.max_steps > planned:
            raise ValueError(
                f"max_steps={targs.max_steps} optimizer steps of {accumulation} batches, but job "
                f"{m.job_name!r} has {m.num_steps} steps ({planned} optimizer steps); leave "
                "max_steps unset to train on all of them"
            )
        targs.ignore_data_skip = True  # the stream itself starts at the right step
        if targs.per_device_train_batch_size != m.micro_batch_size:
            # the Trainer only counts samples with it (logs, throughput); the job fixes the batch
            targs.per_device_train_batch_size = m.micro_batch_size
        super().__init__(*args, **kwargs)

    def get_train_dataloader(self) -> DataLoader[Any]:
        """The rank's batches as :class:`~stoker.torch.StokerDataset` hands them over, not
        prepared by accelerate (which would dispatch or re-shard them)."""
        return DataLoader(self.train_dataset, batch_size=None, num_workers=0)

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        """``Trainer.compute_loss``, except for a batch of no rows (every slot of the rank's
        batch past the epoch's end or dead-lettered; the job still writes it, so that each rank
        has every step): a forward pass of one placeholder token whose loss is multiplied by 0,
        so the rank joins the step's gradient reduction (DDP) and adds nothing to it."""
        if inputs["input_ids"].shape[0] > 0:
            return super().compute_loss(  # type: ignore[misc]
                model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
            )
        device = inputs["input_ids"].device
        placeholder = torch.zeros((1, 1), dtype=torch.long, device=device)
        out = model(input_ids=placeholder, attention_mask=torch.ones_like(placeholder))
        loss = out.logits.sum() * 0.0
        return (loss, out) if return_outputs else loss

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any) -> Any:
        """``Trainer.train``, after restoring this rank's data state from the checkpoint
        folder it resumes from (``True``: the last one in ``args.output_dir``).

        Raises:
            DataStateError: the folder has no data state, or the job does not continue it
                (the message names what differs and the ``--stoker.resume-step`` to pass).
        """
        if resume_from_checkpoint is True:
            resume_from_checkpoint = get_last_checkpoint(self.args.output_dir)
            if resume_from_checkpoint is None:
                raise ValueError(f"no checkpoint folder in {self.args.output_dir} to resume from")
        if resume_from_checkpoint:
            self.train_dataset.load_state_dict(self._load_data_state(str(resume_from_checkpoint)))
        return super().train(  # type: ignore[misc]
            resume_from_checkpoint=resume_from_checkpoint or None, **kwargs
        )

    def _load_data_state(self, checkpoint: str) -> dict[str, Any]:
        rank = self.train_dataset.rank
        path = data_state_path(checkpoint, rank)
        if not path.is_file():
            path = data_state_path(checkpoint, 0)  # a rank the checkpoint's run did not have
        try:
            return validate_state(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise DataStateError(
                f"{checkpoint} holds no Stoker data state ({DATA_STATE_FILE.format(rank=rank)}): "
                "not a checkpoint of a StokerTrainer"
            ) from None

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        """``Trainer._load_from_checkpoint``, made exact where the checkpoint's weight names are
        not the model's module names. transformers 5's ``save_pretrained`` writes Qwen2-VL,
        Qwen2.5-VL and Qwen3-VL weights under their original names (``visual.*``,
        ``model.layers.*``), which the Trainer's ``load_state_dict(strict=False)`` does not map
        back: its resume kept every weight at its initial value, warning only (transformers
        5.23; QwenLM/Qwen3-VL#1763). A full-model checkpoint (``model.safetensors``, or its
        shards' index) of a ``PreTrainedModel`` is read here with ``from_pretrained``, which
        applies the model's name mapping, and copied in with ``strict=True`` (a second copy of
        the weights in CPU memory while it loads); FSDP, DeepSpeed and adapter checkpoints go to
        the Trainer's own loader.

        Raises:
            RuntimeError: the checkpoint's weights do not fit the model (``strict=True``).
        """
        target = self.model if model is None else model  # type: ignore[attr-defined]
        folder = Path(resume_from_checkpoint)
        full = (folder / SAFE_WEIGHTS_NAME).is_file() or (
            folder / SAFE_WEIGHTS_INDEX_NAME
        ).is_file()
        adapter = (folder / ADAPTER_SAFE_WEIGHTS_NAME).is_file()
        if not full or adapter or not isinstance(target, PreTrainedModel):
            super()._load_from_checkpoint(resume_from_checkpoint, model)  # type: ignore[misc]
            return
        dtype = next(target.parameters()).dtype
        saved = type(target).from_pretrained(folder, dtype=dtype)
        target.load_state_dict(saved.state_dict(), strict=True)
        del saved

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        super()._save_checkpoint(model, trial)  # type: ignore[misc]
        folder = Path(self._get_output_dir(trial=trial)) / (  # type: ignore[attr-defined]
            f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        )
        folder.mkdir(parents=True, exist_ok=True)
        data: StokerDataset = self.train_dataset
        path = data_state_path(folder, data.rank)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(data.state_dict()), encoding="utf-8")
        os.replace(tmp, path)
        if data.rank == 0:
            logger.info(
                "checkpoint %s: data state next step %d; to resume the job for it: python -m "
                "stoker.resume %s --savepoint <the job's savepoint> -- <the job's options>",
                folder,
                data.next_step,
                folder / DATA_STATE_FILE.format(rank="*"),
            )


class StokerTrainer(StokerTrainerMixin, Trainer):
    """A ``transformers.Trainer`` that trains on one Stoker stream per DP rank
    (:class:`StokerTrainerMixin`)."""
