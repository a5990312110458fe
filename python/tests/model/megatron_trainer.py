"""The trainer of ``test_megatron.py``: a tiny random transformers Qwen2-VL trained from a Stoker
job through :class:`stoker.megatron.StokerProvider` in Megatron-LM's training loop as its source
runs it (Megatron-LM commit ``d98e8a64ddf34856e74b24714e3bedb2f5a39553``,
``megatron/training/``), on the CPU over gloo, one process per DP rank (launched with the
variables torchrun sets).

megatron-core's own pieces (0.16.1): ``parallel_state.initialize_model_parallel`` (TP = PP = 1,
so every process is a DP rank; its groups on gloo), ``init_num_microbatches_calculator`` /
``get_num_microbatches``, the rerun state machine (``should_run_forward_backward``,
``should_checkpoint_and_exit``) and ``RerunDataIterator`` wrapping the provider's iterator.

Reproduced from ``megatron/training/`` (not on PyPI), in the order its functions call the data
iterator and the checkpoint:

* ``load_checkpoint``: the tracker ``latest_checkpointed_iteration.txt`` names the iteration;
  ``iter_<N>/mp_rank_00/model_optim_rng.pt`` holds model, optimizer, ``iteration`` and
  ``consumed_train_samples``.
* ``build_train_valid_test_data_iterators``: the provider is called with
  ``train_val_test_num_samples`` on every rank (``is_distributed``), its train "dataset" passed
  through (``build_pretraining_data_loader`` for ``external``) and wrapped as
  ``RerunDataIterator(dataloader)``.
* ``train`` / ``train_step``: ``while should_run_forward_backward(data_iterator)``: the
  schedule (``forward_backward_no_pipelining``) runs ``forward_step(data_iterator, model)``
  ``get_num_microbatches()`` times, each ``get_batch`` taking ``next(data_iterator)``, and the
  loss function returns (loss summed over the tokens, tokens); ``finalize_model_grads`` sums the
  gradients and the tokens over the DP ranks and divides (``calculate_per_token_loss``); the
  optimizer steps; ``iteration += 1``; ``consumed_train_samples += DP x micro_batch_size x
  num_microbatches``; ``save_checkpoint`` every ``--save-interval`` iterations and at the end.
* ``save_checkpoint``: ``maybe_save_dataloader_state`` (``train_iterator.iterable.save_state()``
  into ``<dataloader_save>/iter_<N>/mp_rank_00/train_dataloader_dprank<r>.pt``, DP barriers),
  the model on DP rank 0, a barrier, then the tracker.

The real schedule (``megatron.core.pipeline_parallel.schedules``) allocates its token count on
``cuda`` and ``megatron.training`` does not install, hence that loop. What is not Megatron's: the
model (a transformers model, not a Megatron ``GPTModel`` / ``LLaVAModel``), ``torch.optim.AdamW``
in place of Megatron's optimizer wrapper and a gradient all-reduce in place of its DDP buffers.

``--record FILE`` appends one JSON line per batch trained on (step, rank, generation, rows,
sample indices, locations, back-filled rows, sha256 of the batch's tensors, loss, tokens).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.num_microbatches_calculator import (
    get_num_microbatches,
    init_num_microbatches_calculator,
)
from megatron.core.rerun_state_machine import RerunDataIterator, get_rerun_state_machine
from train_qwen_vl import batch_sha256, tiny_model  # examples/, on PYTHONPATH

from stoker.megatron import StokerProvider, dataloader_state_path, train_iters

TRACKER = "latest_checkpointed_iteration.txt"


def checkpoint_path(save: Path, iteration: int) -> Path:
    """``get_checkpoint_name(save, iteration)``: the model's file of TP rank 0 without PP."""
    return save / f"iter_{iteration:07d}" / "mp_rank_00" / "model_optim_rng.pt"


def load_checkpoint(save: Path, model: torch.nn.Module, optimizer: Any, args: Any) -> None:
    """``load_checkpoint``: the tracker's iteration, its model and optimizer, ``args.iteration``
    and ``args.consumed_train_samples`` (nothing when there is no tracker)."""
    tracker = save / TRACKER
    if not tracker.exists():
        return
    iteration = int(tracker.read_text())
    saved = torch.load(checkpoint_path(save, iteration), map_location="cpu", weights_only=True)
    model.load_state_dict(saved["model"], strict=True)
    optimizer.load_state_dict(saved["optimizer"])
    args.iteration = saved["iteration"]
    args.consumed_train_samples = saved["consumed_train_samples"]
    print(f"loaded checkpoint from {save} at iteration {iteration}", flush=True)


def maybe_save_dataloader_state(train_iterator: Any, iteration: int, dataloader_save: str) -> None:
    """checkpointing.py's ``maybe_save_dataloader_state`` (TP = PP = 1: every rank is the first
    of its DP rank)."""
    if train_iterator is None or not dataloader_save:
        return
    if not hasattr(train_iterator.iterable, "save_state"):
        raise RuntimeError(f"no save_state for the train_iterator of {type(train_iterator)}")
    dp_rank = parallel_state.get_data_parallel_rank()
    state = train_iterator.iterable.save_state()
    path = dataloader_state_path(dataloader_save, iteration, dp_rank)
    group = parallel_state.get_data_parallel_group()
    dist.barrier(group=group)
    if dp_rank == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
    dist.barrier(group=group)
    torch.save({"dataloader_state_dict": state}, path)


def save_checkpoint(
    iteration: int, model: torch.nn.Module, optimizer: Any, args: Any, train_iterator: Any
) -> None:
    """``save_checkpoint``: the dataloader states, the model (DP rank 0), then the tracker."""
    maybe_save_dataloader_state(train_iterator, iteration, args.dataloader_save)
    if parallel_state.get_data_parallel_rank() == 0:
        path = checkpoint_path(Path(args.save), iteration)
        path.parent.mkdir(parents=True, exist_ok=True)
        saved = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "iteration": iteration,
            "consumed_train_samples": args.consumed_train_samples,
        }
        torch.save(saved, path)
    dist.barrier()
    if dist.get_rank() == 0:
        (Path(args.save) / TRACKER).write_text(str(iteration))
    dist.barrier()


def forward_step(data_iterator: Any, model: torch.nn.Module, record: int) -> tuple[Any, int]:
    """The user's ``forward_step`` with its ``get_batch`` (``next(data_iterator)``): the loss
    summed over the batch's tokens (position t predicts token t + 1) and their count."""
    batch = next(data_iterator)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    logits = model(**inputs).logits
    labels = batch["labels"][:, 1:]
    loss_sum = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
        labels.reshape(-1),
        ignore_index=-100,
        reduction="sum",
    )
    tokens = int((labels != -100).sum())
    line = {
        "step": batch.step,
        "rank": batch.rank,
        "generation": batch.generation,
        "rows": int(batch.sample_index.shape[0]),
        "sample_index": batch.sample_index.tolist(),
        "location": list(batch.location),
        "backfilled": list(batch.backfilled_slots),
        "sha256": batch_sha256(batch),
        "loss": float(loss_sum.detach()) / tokens if tokens else None,
        "tokens": tokens,
    }
    os.write(record, (json.dumps(line) + "\n").encode())
    return loss_sum, tokens


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", required=True, help="the Stoker job directory")
    p.add_argument("--save", type=Path, required=True, help="Megatron's --save / --load")
    p.add_argument("--micro-batch-size", type=int, required=True, help="the job's B")
    p.add_argument("--global-batch-size", type=int, required=True)
    p.add_argument("--save-interval", type=int, default=2, help="iterations per checkpoint")
    p.add_argument("--record", type=Path, required=True)
    p.add_argument("--data-timeout-s", type=float, default=600.0)
    cli = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")

    dist.init_process_group("gloo")
    parallel_state.initialize_model_parallel(1, 1)
    dp_size = parallel_state.get_data_parallel_world_size()
    init_num_microbatches_calculator(
        dist.get_rank(), None, cli.global_batch_size, cli.micro_batch_size, dp_size
    )
    args = SimpleNamespace(  # what get_args() holds at that point
        micro_batch_size=cli.micro_batch_size,
        global_batch_size=cli.global_batch_size,
        rampup_batch_size=None,
        iteration=0,
        consumed_train_samples=0,
        save=str(cli.save),
        dataloader_save=str(cli.save / "dataloader"),
    )
    torch.manual_seed(0)
    model = tiny_model("qwen2-vl")
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    load_checkpoint(cli.save, model, optimizer, args)

    provider = StokerProvider(cli.root, lambda: args, timeout_s=cli.data_timeout_s)
    assert getattr(provider, "is_distributed", False)  # so every rank calls it
    train_ds, _, _ = provider(train_val_test_num_samples=None)
    train_data_iterator = RerunDataIterator(train_ds)  # dataloader_type == "external"
    num_steps = train_ds.dataset.manifest.num_steps
    iters = train_iters(num_steps, get_num_microbatches())

    record = os.open(cli.record, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    params = list(model.parameters())
    rerun = get_rerun_state_machine()
    iteration = args.iteration
    try:
        while iteration < iters:
            while rerun.should_run_forward_backward(train_data_iterator):
                optimizer.zero_grad()
                num_tokens = torch.zeros((), dtype=torch.long)
                for _ in range(get_num_microbatches()):
                    loss_sum, tokens = forward_step(train_data_iterator, model, record)
                    loss_sum.backward()
                    num_tokens += tokens
                dist.all_reduce(num_tokens)  # finalize_model_grads(..., num_tokens)
                for param in params:
                    if param.grad is None:
                        param.grad = torch.zeros_like(param)
                    dist.all_reduce(param.grad)
                    param.grad /= max(int(num_tokens), 1)
            should_checkpoint, should_exit, _ = rerun.should_checkpoint_and_exit()
            assert not (should_checkpoint or should_exit)
            optimizer.step()
            iteration += 1
            args.consumed_train_samples += dp_size * args.micro_batch_size * get_num_microbatches()
            if iteration % cli.save_interval == 0 or iteration == iters:
                save_checkpoint(iteration, model, optimizer, args, train_data_iterator)
    finally:
        os.close(record)
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()
    if train_ds.dataset.rank == 0:
        print(f"done: iteration {iteration} of {iters}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
