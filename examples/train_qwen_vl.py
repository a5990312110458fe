"""Train a transformers Qwen-VL model on a Stoker job's batches: a complete data-parallel loop
(AdamW, gradient accumulation, checkpoints that hold the model, the optimizer and the data
position, resume from the latest one).

One process per DP rank, launched by ``torchrun`` (any launcher that sets ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` will do); the number of
processes must be the job's ``stoker.dp-world-size``. Each rank reads its own batches with
:class:`stoker.torch.StokerDataset` and calls ``model(**batch)``; gradients are summed over the
ranks with ``torch.distributed`` (gloo on CPU, NCCL on CUDA) once per optimizer step.

Needs torch and transformers beside ``stoker`` (the model venv ``.stoker/model-venv`` that
``./stoker test`` builds has them). On CPU, with a tiny randomly initialised model of the job's
``stoker.model.preset`` (2 layers, the real vocabulary, special-token ids and patch geometry;
nothing downloaded), against a job for 2 DP ranks on the local cluster (docs/operator-guide.md)::

    ./stoker cluster start
    ./stoker flink run -d job/target/stoker-job.jar --stoker.job-name my-job \\
        --stoker.dataset.path ../shared/data/llava-style \\
        --stoker.tokenizer.path ../shared/data/tokenizers/qwen3 --stoker.dp-world-size 2
    .stoker/model-venv/bin/torchrun --nproc-per-node 2 examples/train_qwen_vl.py \\
        --root /dev/shm/stoker/my-job --model tiny --grad-accum 2 \\
        --checkpoint-dir /tmp/my-job-ckpt --checkpoint-every 2

On GPUs (one per rank; the job started with ``--stoker.dp-world-size 8`` and the model's
preset, e.g. ``--stoker.model.preset qwen2.5-vl``)::

    torchrun --nproc-per-node 8 examples/train_qwen_vl.py --root /dev/shm/stoker/sft-run-7 \\
        --model /models/Qwen2.5-VL-3B-Instruct --grad-accum 4 --lr 1e-5 \\
        --checkpoint-dir /ckpt/sft-run-7 --checkpoint-every 500 --gradient-checkpointing

Every rank holds a whole replica in ``--dtype`` (bfloat16 on CUDA by default) with its AdamW
state; a model too large for that needs FSDP, and the data side stays as it is here.

Checkpoints: after every ``--checkpoint-every`` optimizer steps (and at the end) the ranks write
``<checkpoint-dir>/step-<S>/`` (S: the last step trained on, 10 digits): ``trainer.pt`` (rank 0:
model, optimizer, step) and ``data-rank-<r>.pt`` (each rank: ``{"data":
StokerDataset.state_dict()}``), into a temporary directory renamed once all are written; then
rank 0 points ``<checkpoint-dir>/latest`` at it (atomic rename) and removes all but the last
``--keep-checkpoints``. The checkpoint directory must be shared by the ranks' nodes.

Resume after the trainer stopped (crash, preemption, SIGKILL), from its latest checkpoint at
step S::

    flink stop --savepointPath <dir> <job-id>        # the job idles at its prefetch bound: completes
    python -m stoker.resume /ckpt/sft-run-7/step-<S>/data-rank-*.pt --savepoint <savepoint> \\
        --jar job/target/stoker-job.jar -- <the job's options>
    # prints: flink run -s <savepoint> job/target/stoker-job.jar <options> --stoker.resume-step S
    <run that command>; wait until <root>/manifest.json names the new generation
    torchrun ... examples/train_qwen_vl.py <same arguments> --resume

The resumed ranks continue at step S + 1 with the model and optimizer of step S, so they train
on the batches, and in the order, of an uninterrupted run (python/tests/model/test_train_example.py
checks this on a real job). Start them only once the manifest names the new generation: before,
they would read on in the stopped one. If the job kept running and the ranks had not consumed past
step S (``ack.json``), ``--resume`` alone continues in the running generation; otherwise the
reader stops with ``stoker.ResumeError`` naming the ``--stoker.resume-step`` the job needs.

``--record FILE`` appends one JSON line per batch trained on (all ranks, one ``write`` each):
``{"step", "rank", "generation", "rows", "sample_index": [...], "sha256": <hex digest of the
batch's tensors>, "loss", "tokens"}``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from stoker.torch import StokerBatch, StokerDataset, discover_rank

#: ``stoker.model.preset`` -> the transformers ``model_type`` of its models.
PRESET_MODEL_TYPES = {"qwen2-vl": "qwen2_vl", "qwen2.5-vl": "qwen2_5_vl", "qwen3-vl": "qwen3_vl"}
#: The Qwen-VL text vocabulary (>= the tokenizer's 151,669 ids) and special-token ids.
VOCAB_SIZE = 151936
IMAGE_PAD, VISION_START, VISION_END = 151655, 151652, 151653
LATEST = "latest"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", required=True, help="the job directory, /dev/shm/stoker/<job-name>")
    p.add_argument(
        "--model",
        required=True,
        help="'tiny' (a tiny random model of the job's preset) or a Hugging Face model path",
    )
    p.add_argument("--dtype", choices=["float32", "bfloat16"], help="default: bfloat16 on CUDA")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--max-grad-norm", type=float, default=1.0, help="0: no clipping")
    p.add_argument("--grad-accum", type=int, default=1, help="batches per optimizer step")
    p.add_argument("--checkpoint-dir", type=Path, help="where checkpoints go (none without it)")
    p.add_argument("--checkpoint-every", type=int, default=100, help="optimizer steps")
    p.add_argument("--keep-checkpoints", type=int, default=2)
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    p.add_argument("--record", type=Path, help="append a JSON line per batch trained on")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--seed", type=int, default=0, help="initialises the tiny model")
    p.add_argument("--data-timeout-s", type=float, default=600.0, help="wait for a batch")
    args = p.parse_args(argv)
    if args.grad_accum < 1 or args.checkpoint_every < 1 or args.keep_checkpoints < 1:
        p.error("--grad-accum, --checkpoint-every and --keep-checkpoints must be >= 1")
    if args.resume and args.checkpoint_dir is None:
        p.error("--resume needs --checkpoint-dir")
    return args


# ---------------------------------------------------------------------- model


def tiny_model(preset: str) -> torch.nn.Module:
    """A randomly initialised model of ``preset``'s transformers class with 2 text and 2 vision
    layers (hidden size 64, tied embeddings: ~10 M parameters) and the real vocabulary,
    special-token ids and patch geometry (patch 14, Qwen3-VL 16; temporal patch 2; merge 2),
    which is what the job's batches imply."""
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
    )

    ids = {
        "image_token_id": IMAGE_PAD,
        "vision_start_token_id": VISION_START,
        "vision_end_token_id": VISION_END,
        "tie_word_embeddings": True,  # as Qwen2-VL-2B: the lm_head is the embedding
    }
    rope = {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]}
    text = {
        "vocab_size": VOCAB_SIZE,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    vision = {"depth": 2, "num_heads": 4, "temporal_patch_size": 2, "spatial_merge_size": 2}
    if preset == "qwen2-vl":
        return Qwen2VLForConditionalGeneration(
            Qwen2VLConfig(
                text_config={**text, "rope_parameters": rope},
                vision_config={**vision, "embed_dim": 32, "hidden_size": 64, "patch_size": 14},
                **ids,
            )
        )
    if preset == "qwen2.5-vl":
        return Qwen2_5_VLForConditionalGeneration(
            Qwen2_5_VLConfig(
                text_config={**text, "rope_parameters": rope},
                vision_config={
                    **vision,
                    "hidden_size": 32,
                    "intermediate_size": 64,
                    "out_hidden_size": 64,
                    "patch_size": 14,
                    "window_size": 56,
                    "fullatt_block_indexes": [1],
                },
                **ids,
            )
        )
    if preset == "qwen3-vl":
        return Qwen3VLForConditionalGeneration(
            Qwen3VLConfig(
                text_config={
                    **text,
                    "head_dim": 16,
                    "rope_parameters": {**rope, "rope_theta": 5000000.0, "mrope_interleaved": True},
                },
                vision_config={
                    **vision,
                    "hidden_size": 32,
                    "intermediate_size": 64,
                    "out_hidden_size": 64,
                    "patch_size": 16,
                    "num_position_embeddings": 64,
                    "deepstack_visual_indexes": [0],
                },
                **ids,
            )
        )
    raise ValueError(f"no tiny model for preset {preset!r} (known: {sorted(PRESET_MODEL_TYPES)})")


def load_model(args: argparse.Namespace, data: StokerDataset, dtype: torch.dtype) -> Any:
    """The model ``--model`` names, checked against the job's preset and patch size."""
    preset = data.manifest.model_preset or "qwen2-vl"
    if args.model == "tiny":
        torch.manual_seed(args.seed)
        model = tiny_model(preset).to(dtype)
    else:
        from transformers import AutoModelForImageTextToText

        model = AutoModelForImageTextToText.from_pretrained(args.model, dtype=dtype)
    want = PRESET_MODEL_TYPES.get(preset)
    if model.config.model_type != want:
        raise SystemExit(
            f"{args.model}: model_type {model.config.model_type!r}, but job "
            f"{data.manifest.job_name!r} preprocesses for preset {preset!r} ({want}): resubmit "
            "the job with the model's --stoker.model.preset, or train the preset's model"
        )
    v = model.config.vision_config
    patch_dim = 3 * v.temporal_patch_size * v.patch_size**2
    if data.manifest.patch_dim not in (None, patch_dim):
        raise SystemExit(
            f"{args.model}: patches of {patch_dim} values, but the job writes "
            f"{data.manifest.patch_dim} (stoker.image.patch-size / temporal-patch-size)"
        )
    return model


# ---------------------------------------------------------------------- distributed


def all_reduce_gradients(params: list[torch.nn.Parameter], tokens: torch.Tensor) -> None:
    """Sum the gradients and the trained-token count over the ranks (in ~64 MiB buckets), then
    divide the gradients by the total: the gradient of the mean loss over every token of the
    optimizer step, whatever each rank's share (a batch of 0 rows, all its records
    dead-lettered, adds nothing and still joins the reduction, where DDP would hang)."""
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    if dist.is_initialized():
        dist.all_reduce(tokens)
        bucket: list[torch.Tensor] = []
        size = 0
        for i, p in enumerate(params):
            bucket.append(p.grad)
            size += p.grad.numel() * p.grad.element_size()
            if size >= 64 << 20 or i == len(params) - 1:
                flat = torch.cat([g.reshape(-1) for g in bucket])
                dist.all_reduce(flat)
                for g, part in zip(bucket, flat.split([g.numel() for g in bucket]), strict=True):
                    g.copy_(part.view_as(g))
                bucket, size = [], 0
    total = max(int(tokens.item()), 1)
    for p in params:
        p.grad.div_(total)


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


# ---------------------------------------------------------------------- checkpoints


def _save(obj: Any, path: Path) -> None:
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def save_checkpoint(
    ckpt_dir: Path, step: int, model: Any, optimizer: Any, data: StokerDataset, keep: int
) -> Path:
    """Write ``ckpt_dir/step-<step>/`` (every rank its data state, rank 0 the model and the
    optimizer) through a temporary directory, then point ``ckpt_dir/latest`` at it."""
    rank = data.rank
    name = f"step-{step:010d}"
    tmp, final = ckpt_dir / f".{name}.tmp", ckpt_dir / name
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    barrier()
    _save({"data": data.state_dict()}, tmp / f"data-rank-{rank}.pt")
    if rank == 0:
        trainer = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
        _save(trainer, tmp / "trainer.pt")
    barrier()
    if rank == 0:
        shutil.rmtree(final, ignore_errors=True)
        os.rename(tmp, final)
        pointer = ckpt_dir / f".{LATEST}.tmp"
        pointer.write_text(name + "\n")
        os.replace(pointer, ckpt_dir / LATEST)
        for old in sorted(ckpt_dir.glob("step-*"))[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    barrier()
    return final


def load_checkpoint(ckpt_dir: Path, model: Any, optimizer: Any, data: StokerDataset) -> int:
    """Restore the latest checkpoint; returns its step."""
    pointer = ckpt_dir / LATEST
    if not pointer.is_file():
        raise SystemExit(f"--resume: no checkpoint in {ckpt_dir} ({pointer} is missing)")
    step_dir = ckpt_dir / pointer.read_text().strip()
    trainer = torch.load(step_dir / "trainer.pt", map_location="cpu", weights_only=True)
    model.load_state_dict(trainer["model"])
    optimizer.load_state_dict(trainer["optimizer"])
    state = torch.load(step_dir / f"data-rank-{data.rank}.pt", weights_only=True)["data"]
    data.load_state_dict(state)  # checks that the job continues it (stoker.data_state)
    return int(trainer["step"])


# ---------------------------------------------------------------------- the loop


def batch_sha256(batch: StokerBatch) -> str:
    """Hex digest of the batch's tensors (name, shape, dtype and bytes), in key order."""
    h = hashlib.sha256()
    for name in sorted(batch):
        t = batch[name].detach().cpu().contiguous()
        h.update(f"{name}{tuple(t.shape)}{t.dtype}".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ranks = discover_rank()  # torchrun's RANK / WORLD_SIZE / LOCAL_RANK
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(ranks.local_rank)
    if ranks.world_size > 1:
        dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", ranks.local_rank) if cuda else torch.device("cpu")
    dtype = getattr(torch, args.dtype or ("bfloat16" if cuda else "float32"))

    data = StokerDataset(
        args.root,
        device=device,
        pin_memory=cuda,
        mask_backfilled=True,  # each record trains once per epoch, back-filled copies not
        timeout_s=args.data_timeout_s,
    )
    model = load_model(args, data, dtype)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.to(device).train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay)

    if args.resume:
        last = load_checkpoint(args.checkpoint_dir, model, optimizer, data)
        print(f"[rank {data.rank}] resumed from step {last}; next step {data.next_step}")
    elif dist.is_initialized():
        for p in model.parameters():  # one initialisation for every replica, as DDP does
            dist.broadcast(p.data, 0)

    record = os.open(args.record, os.O_WRONLY | os.O_CREAT | os.O_APPEND) if args.record else None
    final_step = data.manifest.num_steps - 1
    tokens = torch.zeros((), dtype=torch.int64, device=device)
    saved_step = data.next_step - 1
    t0 = time.monotonic()
    for batch in DataLoader(data, batch_size=None):  # the batches as StokerDataset hands them
        rows = int(batch["input_ids"].shape[0])
        loss = torch.zeros(())
        n = int((batch["labels"][:, 1:] != -100).sum())  # the tokens the loss averages
        if n:
            out = model(**batch)
            (out.loss * n).backward()  # summed; divided by the step's total tokens below
            loss = out.loss.detach()
            tokens += n
        if record is not None:
            line = {
                "step": batch.step,
                "rank": batch.rank,
                "generation": batch.generation,
                "rows": rows,
                "sample_index": batch.sample_index.tolist(),
                "sha256": batch_sha256(batch),
                "loss": float(loss) if n else None,
                "tokens": n,
            }
            os.write(record, (json.dumps(line) + "\n").encode())
        if (batch.step + 1) % args.grad_accum and batch.step != final_step:
            continue  # accumulate: the optimizer steps on absolute step boundaries
        all_reduce_gradients(params, tokens)
        if args.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        tokens.zero_()
        opt_step = (batch.step + args.grad_accum) // args.grad_accum
        if data.rank == 0:
            wait = data.reader.wait_time_ratio if data.reader is not None else 0.0
            print(
                f"step {batch.step} (optimizer step {opt_step}): loss {float(loss):.4f}, "
                f"{time.monotonic() - t0:.1f} s, data wait {wait:.1%}",
                flush=True,
            )
        if args.checkpoint_dir is not None and (
            opt_step % args.checkpoint_every == 0 or batch.step == final_step
        ):
            path = save_checkpoint(
                args.checkpoint_dir, batch.step, model, optimizer, data, args.keep_checkpoints
            )
            saved_step = batch.step
            if data.rank == 0:
                print(f"checkpoint {path}", flush=True)
    if record is not None:
        os.close(record)
    if data.rank == 0:
        print(f"done: trained on steps up to {final_step}; last checkpoint at step {saved_step}")
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
