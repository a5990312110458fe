"""Train a transformers Qwen-VL model on a Stoker job's batches with the Hugging Face ``Trainer``
(:class:`stoker.hf.StokerTrainer`): what a user of ``Trainer``, TRL's ``SFTTrainer`` or
LLaMA-Factory's trainers changes to read from Stoker. The loop, the optimizer, DDP, checkpoints
and resume are the Trainer's; Stoker gives each rank its own stream and keeps its data position
in each checkpoint folder.

One process per DP rank, launched by ``torchrun`` (the job's ``stoker.dp-world-size``
processes); on CPU the ranks talk over gloo. With a tiny random model of the job's preset (as
``examples/train_qwen_vl.py``; nothing downloaded), against a job for 2 DP ranks::

    .stoker/model-venv/bin/torchrun --nproc-per-node 2 examples/train_qwen_vl_hf.py \\
        --root /dev/shm/stoker/my-job --model tiny --grad-accum 2 \\
        --output-dir /tmp/my-job-hf --save-steps 2

Checkpoints: ``<output-dir>/checkpoint-<N>/`` every ``--save-steps`` optimizer steps (N: the
optimizer step; Stoker step ``N x grad-accum - 1`` is the last trained on), with the Trainer's
files and ``stoker-data-state-rank-<r>.json`` per rank. Resume after the trainer stopped::

    flink stop --savepointPath <dir> <job-id>
    python -m stoker.resume <output-dir>/checkpoint-<N>/stoker-data-state-rank-*.json \\
        --savepoint <savepoint> -- <the job's options>    # prints the flink run command
    <run it>; wait until <root>/manifest.json names the new generation
    torchrun ... examples/train_qwen_vl_hf.py <same arguments> --resume

``--record FILE`` appends one JSON line per batch trained on, as ``examples/train_qwen_vl.py``
does, with each sample's ``location`` and the ``backfilled`` rows besides
(``python/tests/model/test_train_example.py`` kills and resumes both against a real job, and this
one also with another number of ranks).

Another number of ranks after a restart (a node lost): ``python -m stoker.resume ... --
--stoker.dp-world-size <W'> <options>`` prints a command without ``-s`` that goes on at the next
record not trained on; start W' processes with ``--resume``: each restores its own data state, or
rank 0's where the checkpoint has none for it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from train_qwen_vl import batch_sha256, tiny_model  # this directory's plain-loop example
from transformers import TrainingArguments

from stoker.hf import StokerTrainer
from stoker.torch import StokerDataset


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", required=True, help="the job directory, /dev/shm/stoker/<job-name>")
    p.add_argument("--model", required=True, help="'tiny' or a Hugging Face model path")
    p.add_argument("--output-dir", type=Path, required=True, help="the Trainer's checkpoints")
    p.add_argument("--grad-accum", type=int, default=1, help="batches per optimizer step")
    p.add_argument("--save-steps", type=int, default=100, help="optimizer steps per checkpoint")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    p.add_argument("--record", type=Path, help="append a JSON line per batch trained on")
    p.add_argument("--seed", type=int, default=0, help="initialises the tiny model")
    p.add_argument("--data-timeout-s", type=float, default=600.0, help="wait for a batch")
    return p.parse_args(argv)


class RecordingTrainer(StokerTrainer):  # type: ignore[misc]
    """Appends each batch it trains on to ``record`` (one ``write`` per line, all ranks)."""

    def __init__(self, *args: Any, record: Path | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.record = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_APPEND) if record else None

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.record is not None:
            n = int((inputs["labels"][:, 1:] != -100).sum())
            line = {
                "step": inputs.step,
                "rank": inputs.rank,
                "generation": inputs.generation,
                "rows": int(inputs["input_ids"].shape[0]),
                "sample_index": inputs.sample_index.tolist(),
                "location": list(inputs.location),
                "backfilled": list(inputs.backfilled_slots),
                "sha256": batch_sha256(inputs),
                "loss": float(loss) if n else None,
                "tokens": n,
            }
            os.write(self.record, (json.dumps(line) + "\n").encode())
        return loss


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = StokerDataset(args.root, mask_backfilled=True, timeout_s=args.data_timeout_s)
    if args.model == "tiny":
        torch.manual_seed(args.seed)
        model = tiny_model(data.manifest.model_preset or "qwen2-vl")
    else:
        from transformers import AutoModelForImageTextToText

        model = AutoModelForImageTextToText.from_pretrained(args.model)
    training = TrainingArguments(
        output_dir=str(args.output_dir),
        gradient_accumulation_steps=args.grad_accum,
        learning_rate=args.lr,
        save_steps=args.save_steps,
        logging_steps=1,
        report_to="none",
        ddp_find_unused_parameters=True,  # a batch without images leaves the vision tower idle
        use_cpu=not torch.cuda.is_available(),
        seed=args.seed,
    )
    trainer = RecordingTrainer(model=model, args=training, train_dataset=data, record=args.record)
    trainer.train(resume_from_checkpoint=True if args.resume else None)
    if data.rank == 0:
        print(f"done: trained on steps up to {data.next_step - 1}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
