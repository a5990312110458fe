"""The trainer of ``test_torchtitan.py``: a tiny random transformers Qwen2-VL trained from a Stoker
job through :class:`stoker.torchtitan.StokerDataLoader` in the loop of torchtitan's
``Trainer.train`` / ``train_step`` (torchtitan 0.3), on the CPU over gloo, one process per DP
rank (launched with the variables torchrun sets).

torchtitan's own pieces, built from their configs as ``Trainer.__init__`` builds them: the data
loader (``config.dataloader.build(dp_world_size=, dp_rank=, tokenizer=, seq_len=,
local_batch_size=, snapshot_every_n_steps=)``), ``OptimizersContainer`` (AdamW),
``LRSchedulersContainer``, ``CrossEntropyLoss`` and the DCP ``CheckpointManager`` (model,
optimizer, lr scheduler, data loader and train state in ``<dump-folder>/checkpoint/step-<N>``,
loaded from the latest one at the start: ``checkpointer.load(step=-1)``). The loop is
``Trainer.train``'s: each optimizer step draws ``--grad-accum`` batches through
``batch_generator`` (``StopIteration`` becomes ``DataloaderExhaustedError``), sums the valid
tokens over the DP ranks, runs forward and backward per batch with the loss over the global
tokens, then ``optimizers.step()``, ``lr_schedulers.step()`` and ``checkpointer.save(step,
last_step=...)``. What is not torchtitan's: the model (a transformers model returning its
logits, not a torchtitan ``BaseModel`` built on the meta device), the gradient reduction over the
ranks (a sum all-reduce in place of torchtitan's FSDP / DDP ``parallelize_fn``) and
``torch.distributed`` set up here (``Trainer`` selects a CUDA device even without one).

``--record FILE`` appends one JSON line per batch trained on (step, rank, generation, rows,
sample indices, locations, back-filled rows, sha256 of the batch's tensors, loss, tokens).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torchtitan.components.checkpointer import CheckpointManager
from torchtitan.components.dataloader import DataloaderExhaustedError
from torchtitan.components.loss import IGNORE_INDEX, CrossEntropyLoss
from torchtitan.components.optimizer import OptimizersContainer, ParamGroupConfig
from torchtitan.components.optimizer.lr_scheduler import LRSchedulersContainer
from torchtitan.tools.logging import init_logger
from train_qwen_vl import tiny_model  # examples/, on PYTHONPATH

from stoker.torch import discover_rank
from stoker.torchtitan import StokerDataLoader, training_steps


class Logits(torch.nn.Module):
    """A transformers Qwen-VL as torchtitan calls a model: ``model(input, **rest)`` -> logits."""

    def __init__(self, hf: torch.nn.Module) -> None:
        super().__init__()
        self.hf = hf

    def forward(self, tokens: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return self.hf(input_ids=tokens, **kwargs).logits


class TrainState:
    """``Trainer``'s own ``Stateful`` part of the checkpoint (``train_state``)."""

    def __init__(self) -> None:
        self.step = 0
        self.ntokens_seen = 0

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "ntokens_seen": self.ntokens_seen}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.step = state_dict["step"]
        self.ntokens_seen = state_dict["ntokens_seen"]


def batch_generator(loader: Iterable[Any]) -> Iterator[Any]:
    """``Trainer.batch_generator``: the end of the data is ``DataloaderExhaustedError``."""
    it = iter(loader)
    while True:
        try:
            batch = next(it)
        except StopIteration as ex:
            raise DataloaderExhaustedError() from ex
        yield batch


def sha256(input_dict: dict[str, Any], labels: torch.Tensor) -> str:
    h = hashlib.sha256()
    tensors = {**{k: v for k, v in input_dict.items() if torch.is_tensor(v)}, "labels": labels}
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        h.update(f"{name}{tuple(t.shape)}{t.dtype}".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", required=True, help="the Stoker job directory")
    p.add_argument("--dump-folder", type=Path, required=True, help="checkpoint/ goes in it")
    p.add_argument("--local-batch-size", type=int, required=True, help="the job's B")
    p.add_argument("--grad-accum", type=int, default=1, help="batches per optimizer step")
    p.add_argument("--interval", type=int, default=2, help="optimizer steps per checkpoint")
    p.add_argument("--record", type=Path, required=True)
    p.add_argument("--data-timeout-s", type=float, default=600.0)
    args = p.parse_args(argv)

    init_logger()  # torchtitan's (the root logger's) INFO lines, stoker.torchtitan's among them
    ranks = discover_rank()  # torchrun's RANK / WORLD_SIZE
    dist.init_process_group("gloo")
    steps = training_steps(args.root, args.grad_accum, timeout_s=args.data_timeout_s)
    config = StokerDataLoader.Config(
        root=args.root, timeout_s=args.data_timeout_s, gradient_accumulation_steps=args.grad_accum
    )
    dataloader = config.build(
        dp_world_size=ranks.world_size,
        dp_rank=ranks.rank,
        tokenizer=None,
        seq_len=4096,
        local_batch_size=args.local_batch_size,
        snapshot_every_n_steps=None,
    )
    torch.manual_seed(0)
    model = Logits(tiny_model(dataloader.dataset.manifest.model_preset or "qwen2-vl"))
    model.train()
    optimizers = OptimizersContainer.Config(
        param_groups=[
            ParamGroupConfig(pattern=".*", optimizer_name="AdamW", optimizer_kwargs={"lr": 1e-3})
        ],
        implementation="for-loop",
    ).build(model_parts=[model])
    lr_schedulers = LRSchedulersContainer.Config(warmup_steps=1).build(
        optimizers=optimizers, training_steps=steps
    )
    loss_fn = CrossEntropyLoss.Config().build()
    train_state = TrainState()
    checkpointer = CheckpointManager.Config(
        enable=True, folder="checkpoint", interval=args.interval, last_save_model_only=False
    ).build(
        dataloader=dataloader,
        model_parts=[model],
        optimizers=optimizers,
        lr_schedulers=lr_schedulers,
        states={"train_state": train_state},
        sd_adapter=None,
        base_folder=str(args.dump_folder),
    )
    record = os.open(args.record, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    params = list(model.parameters())

    checkpointer.load(step=-1)  # Trainer.train: the latest checkpoint, if any
    data_iterator = batch_generator(dataloader)
    try:
        while train_state.step < steps:
            train_state.step += 1
            optimizers.zero_grad()
            try:
                micro = [next(data_iterator) for _ in range(args.grad_accum)]
            except DataloaderExhaustedError:
                print("Ran out of data; last step was canceled.", flush=True)
                break
            global_tokens = torch.stack([(labels != IGNORE_INDEX).sum() for _, labels in micro])
            global_tokens = global_tokens.sum()
            dist.all_reduce(global_tokens)  # Trainer.train_step's global_valid_tokens
            for input_dict, labels in micro:
                inputs = input_dict["input"]
                extra = {k: v for k, v in input_dict.items() if k != "input"}
                loss, _ = loss_fn(model(inputs, **extra), labels, global_tokens)
                loss.backward()
                train_state.ntokens_seen += labels.numel()
                n = int((labels != IGNORE_INDEX).sum())
                line = {
                    "step": input_dict.step,
                    "rank": input_dict.rank,
                    "generation": input_dict.generation,
                    "rows": int(input_dict.sample_index.shape[0]),
                    "sample_index": input_dict.sample_index.tolist(),
                    "location": list(input_dict.location),
                    "backfilled": list(input_dict.backfilled_slots),
                    "sha256": sha256(input_dict, labels),
                    "loss": float(loss.detach()) if n else None,
                    "tokens": n,
                }
                os.write(record, (json.dumps(line) + "\n").encode())
            for param in params:  # the DP reduction: gradients of the loss over global tokens
                if param.grad is None:
                    param.grad = torch.zeros_like(param)
                dist.all_reduce(param.grad)
            optimizers.step()
            lr_schedulers.step()
            checkpointer.save(train_state.step, last_step=train_state.step == steps)
    finally:
        checkpointer.close()
        dist.destroy_process_group()
    if ranks.rank == 0:
        print(f"done: optimizer step {train_state.step} of {steps}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
