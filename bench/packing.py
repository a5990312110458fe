"""Sequence packing (issue 26): padding, per-rank balance and job throughput, unpacked vs packed.
See bench/README.md, "Sequence packing (packing.sh)".

Two datasets, each generated into ``--work-dir`` (seeded, reused when complete):

* ``shared``: the three datasets of ``../shared/data`` with images (``llava-style``,
  ``qwen-messages``, ``llamafactory-sharegpt``: 63 records) in one dataset root, their image paths
  prefixed with their folder, the images copied (the job rejects symbolic links out of the root);
  ``--shared-epochs`` passes over it (each epoch its own shuffle).
* ``synthetic``: ``--synthetic-records`` LLaVA-style records with a long-tailed length
  distribution: 0, 1 or 2 images (p = 0.2, 0.6, 0.2) drawn from the shared images Pillow and
  Stoker decode alike (``bench.loaders.common.POOL``, 64 px to 4 Mpx, so 4 to 1280 image tokens
  at the max-pixels below), a question of log-normal length (median 20 words, sigma 0.8) and an
  answer of log-normal length (median 120 words, sigma 1.1, at most 2400 words).

For each dataset and round the real job (the jar, embedded Flink, the local dataset) runs once
unpacked and once packed, the order alternating between rounds, with the same settings otherwise
(:data:`COMMON_OPTIONS`). ``stoker.prefetch-depth`` is 0 (no trainer feedback: the job writes as
fast as it can); a consumer thread in this process reads every batch file as it appears (all
columns but ``pixel_values``, with pyarrow) and deletes it, so ``/dev/shm`` holds few files.

Per run, from the batch files: padding fraction (padded token positions over all positions,
``R x L`` per batch, rows padded to the batch's longest row as written), per step the spread over
the ranks of tokens (``attention_mask`` sums) and of image patches (``image_grid_thw``
products): max - min and max/mean - 1, mean and p95 over the steps; rows per batch; tokens over
rows x T (T = ``stoker.packing.max-tokens``: how full rows padded to T would be); samples/s,
both over the whole run (samples / (last batch written - job process start), start-up included)
and steady (the samples of all batches but the first W written / the time from the W-th to the
last). Checks (a failure ends the benchmark with exit 1): the multiset of sample indices
(back-filled copies excluded) is the same unpacked and packed; every rank has every step; a packed
step with samples gives every rank a non-empty batch; no packed row holds more than
``stoker.packing.max-tokens`` tokens; both rounds of a mode give the same batches.

Results: ``--out``/packing.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc
from stoker_tools.demo import accounting_line, job_command

from bench.loaders.common import POOL

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
TOKENIZER = SHARED / "tokenizers" / "qwen3"
SHARED_SETS = ("llava-style", "qwen-messages", "llamafactory-sharegpt")
WORLD_SIZE = 4
MICRO_BATCH = 4
MAX_TOKENS = 4096
#: Options both modes share. max-pixels 1003520 = 1280 image tokens, a common fine-tuning setting
#: (shared/data/README.md); max-seq-len = the packed row size, a usual training context.
COMMON_OPTIONS = {
    "stoker.dp-world-size": str(WORLD_SIZE),
    "stoker.micro-batch-size": str(MICRO_BATCH),
    "stoker.shuffle.seed": "7",
    "stoker.image.max-pixels": "1003520",
    "stoker.max-seq-len": str(MAX_TOKENS),
    "stoker.prefetch-depth": "0",
    "rest.port": "0",
    "restart-strategy.type": "none",
}
PACKED_OPTIONS = {"stoker.packing.enabled": "true", "stoker.packing.max-tokens": str(MAX_TOKENS)}
WORDS = (
    "the a of and to in is that it for on with as was at by an be this from or have are not "
    "picture image shows left right small large red blue green white black color light dark "
    "person people man woman child dog cat bird car street building tree sky water table "
    "window door room wall floor sign text number page line word letter receipt price total "
    "first second third near far above below behind front side corner center top bottom "
    "because however therefore which while where when also only very more most some many "
    "looks appears seems likely possibly clearly probably holding wearing standing sitting"
).split()


def log(msg: str) -> None:
    print(f"[packing] {msg}", file=sys.stderr, flush=True)


# ---- datasets ----


def _prefix_paths(record: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The record with every image path of the three shared formats prefixed with ``prefix/``."""
    if isinstance(record.get("image"), str):
        record["image"] = f"{prefix}/{record['image']}"
    elif isinstance(record.get("image"), list):
        record["image"] = [f"{prefix}/{p}" for p in record["image"]]
    if isinstance(record.get("images"), list):
        record["images"] = [f"{prefix}/{p}" for p in record["images"]]
    for message in record.get("messages", []):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            if part.get("type") == "image" and isinstance(part.get("image"), str):
                part["image"] = f"{prefix}/{part['image']}"
            elif part.get("type") == "image_url":
                part["image_url"]["url"] = f"{prefix}/{part['image_url']['url']}"
    return record


def make_shared(root: Path) -> Path:
    done = root / ".complete"
    if done.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for name in SHARED_SETS:
        shutil.copytree(SHARED / name / "images", root / name / "images")
        lines = (SHARED / name / "train.jsonl").read_text(encoding="utf-8").splitlines()
        with (root / name / "train.jsonl").open("w", encoding="utf-8") as f:
            for line in lines:
                if line.strip():
                    f.write(json.dumps(_prefix_paths(json.loads(line), name)) + "\n")
    done.touch()
    return root


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(max(1, n)))


def make_synthetic(root: Path, records: int, seed: int) -> Path:
    done = root / f".complete-{records}-{seed}"
    if done.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    (root / "images").mkdir(parents=True)
    for path in POOL:
        target = root / "images" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SHARED / path, target)
    rng = random.Random(seed)
    with (root / "train.jsonl").open("w", encoding="utf-8") as f:
        for i in range(records):
            n_images = rng.choices((0, 1, 2), weights=(0.2, 0.6, 0.2))[0]
            images = [f"images/{rng.choice(POOL)}" for _ in range(n_images)]
            question = _words(rng, round(rng.lognormvariate(np.log(20), 0.8)))
            answer = _words(rng, min(2400, round(rng.lognormvariate(np.log(120), 1.1))))
            record: dict[str, Any] = {
                "id": f"syn-{i:05d}",
                "conversations": [
                    {"from": "human", "value": "<image>\n" * n_images + question + "?"},
                    {"from": "gpt", "value": answer + "."},
                ],
            }
            if images:
                record["image"] = images
            f.write(json.dumps(record) + "\n")
    done.touch()
    return root


# ---- reading the batches ----


@dataclass
class BatchStats:
    """What one batch file says (everything but the pixels)."""

    step: int
    rank: int
    mtime: float
    rows: int
    length: int
    tokens: int
    patches: int
    max_row_tokens: int
    samples: list[int]  # sample indices, back-filled copies left out
    copies: int
    packed_max_tokens: int | None


def _flat_ints(column: pa.Array) -> np.ndarray:
    while pa.types.is_list(column.type) or pa.types.is_fixed_size_list(column.type):
        column = column.flatten()
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.int64)


def read_batch(path: Path) -> BatchStats:
    mtime = path.stat().st_mtime
    with pa.memory_map(str(path), "r") as source:
        reader = pa.ipc.open_file(source)
        batch = reader.get_batch(0)
        meta = {k.decode(): v.decode() for k, v in (reader.schema.metadata or {}).items()}
        rows = batch.num_rows
        mask_type = batch.schema.field("attention_mask").type
        length = mask_type.list_size
        mask = _flat_ints(batch.column("attention_mask")).reshape(rows, length)
        thw = _flat_ints(batch.column("image_grid_thw")).reshape(-1, 3)
        index = _flat_ints(batch.column("sample_index"))
    backfilled = {int(x) for x in meta.get("stoker.backfilled_slots", "").split(",") if x}
    row_tokens = mask.sum(axis=1)
    packed = meta.get("stoker.packing_max_tokens")
    return BatchStats(
        step=int(meta["stoker.step"]),
        rank=int(meta["stoker.rank"]),
        mtime=mtime,
        rows=rows,
        length=length,
        tokens=int(row_tokens.sum()),
        patches=int(np.prod(thw, axis=1).sum()) if len(thw) else 0,
        max_row_tokens=int(row_tokens.max()) if rows else 0,
        samples=[int(s) for i, s in enumerate(index) if i not in backfilled],
        copies=len(backfilled),
        packed_max_tokens=int(packed) if packed else None,
    )


class Consumer(threading.Thread):
    """Reads every ``step-*.arrow`` under ``job_dir`` as it appears, then deletes it."""

    def __init__(self, job_dir: Path) -> None:
        super().__init__(name="batch-consumer", daemon=True)
        self.job_dir = job_dir
        self.batches: list[BatchStats] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def sweep(self) -> None:
        for path in sorted(self.job_dir.glob("gen-*/rank-*/step-*.arrow")):
            self.batches.append(read_batch(path))
            path.unlink()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.sweep()
                self.stop.wait(0.05)
            self.sweep()
        except BaseException as e:  # reported by the caller
            self.error = e


# ---- one run ----


@dataclass
class Run:
    dataset: str
    mode: str
    round: int
    launch: float
    batches: list[BatchStats] = field(repr=False)
    accounting: str

    def summary(self) -> dict[str, Any]:
        b = self.batches
        positions = sum(x.rows * x.length for x in b)
        tokens = sum(x.tokens for x in b)
        samples = sum(len(x.samples) for x in b)
        by_step: dict[int, list[BatchStats]] = {}
        for x in b:
            by_step.setdefault(x.step, []).append(x)
        tok_abs, tok_rel, pat_abs, pat_rel = [], [], [], []
        for batches in by_step.values():
            t = np.array([x.tokens for x in batches], dtype=float)
            p = np.array([x.patches for x in batches], dtype=float)
            if t.mean() > 0:
                tok_abs.append(t.max() - t.min())
                tok_rel.append(t.max() / t.mean() - 1)
            if p.mean() > 0:
                pat_abs.append(p.max() - p.min())
                pat_rel.append(p.max() / p.mean() - 1)
        order = sorted(b, key=lambda x: x.mtime)
        last = order[-1].mtime
        first_w = order[WORLD_SIZE - 1].mtime
        later = sum(len(x.samples) for x in order[WORLD_SIZE:])

        def stat(values: list[float]) -> dict[str, float]:
            a = np.array(values or [0.0])
            return {"mean": float(a.mean()), "p95": float(np.percentile(a, 95))}

        return {
            "dataset": self.dataset,
            "mode": self.mode,
            "round": self.round,
            "steps": len(by_step),
            "batches": len(b),
            "samples": samples,
            "backfilled_copies": sum(x.copies for x in b),
            "tokens": tokens,
            "token_positions": positions,
            "padding_fraction": 1 - tokens / positions if positions else 0.0,
            "rows_per_batch": sum(x.rows for x in b) / len(b),
            "fill_of_max_tokens": tokens / (sum(x.rows for x in b) * MAX_TOKENS),
            "longest_row_tokens": max(x.max_row_tokens for x in b),
            "rank_token_spread": stat(tok_abs),
            "rank_token_imbalance": stat(tok_rel),
            "rank_patch_spread": stat(pat_abs),
            "rank_patch_imbalance": stat(pat_rel),
            "wall_s": last - self.launch,
            "samples_per_s_wall": samples / (last - self.launch),
            "samples_per_s_steady": later / (last - first_w) if last > first_w else 0.0,
            "accounting": self.accounting,
        }


def run_job(
    dataset: str, root: Path, mode: str, rnd: int, epochs: int, work: Path, output_root: Path
) -> Run:
    name = f"packbench-{dataset}-{mode}-{rnd}"
    job_dir = output_root / name
    shutil.rmtree(job_dir, ignore_errors=True)
    job_log = work / "logs" / f"{name}.log"
    job_log.parent.mkdir(parents=True, exist_ok=True)
    options = {
        **COMMON_OPTIONS,
        **(PACKED_OPTIONS if mode == "packed" else {}),
        "stoker.epochs": str(epochs),
        "stoker.job-name": name,
        "stoker.output.root": str(output_root),
        "execution.checkpointing.dir": (work / "checkpoints" / name).as_uri(),
    }
    env = dict(os.environ, FLINK_PLUGINS_DIR=str(REPO / "job" / "target" / "plugins"))
    command = job_command(REPO, TOKENIZER, str(root), options, job_log)
    consumer = Consumer(job_dir)
    consumer.start()
    launch = time.time()
    with (work / "logs" / f"{name}.out").open("w") as out:
        rc = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    consumer.stop.set()
    consumer.join()
    if consumer.error is not None:
        raise RuntimeError(f"{name}: reading the batches failed: {consumer.error!r}")
    if rc != 0:
        raise RuntimeError(f"{name}: the job failed (exit {rc}); see {job_log}")
    if not consumer.batches:
        raise RuntimeError(f"{name}: no batch written; see {job_log}")
    shutil.rmtree(job_dir, ignore_errors=True)
    return Run(dataset, mode, rnd, launch, consumer.batches, accounting_line(job_log))


# ---- checks ----


def batch_key(run: Run) -> dict[tuple[int, int], tuple[int, int, int, tuple[int, ...]]]:
    return {(x.step, x.rank): (x.rows, x.length, x.tokens, tuple(x.samples)) for x in run.batches}


def check(runs: list[Run]) -> list[str]:
    """What looks wrong (an empty list when nothing does)."""
    problems: list[str] = []
    for r in runs:
        tag = f"{r.dataset}/{r.mode}/round {r.round}"
        steps: dict[int, set[int]] = {}
        for x in r.batches:
            steps.setdefault(x.step, set()).add(x.rank)
        for step, ranks in sorted(steps.items()):
            if ranks != set(range(WORLD_SIZE)):
                problems.append(f"{tag}: step {step} has ranks {sorted(ranks)}")
        if sorted(steps) != list(range(len(steps))):
            problems.append(f"{tag}: steps are not 0..{len(steps) - 1}")
        if r.mode != "packed":
            continue
        by_step: dict[int, list[BatchStats]] = {}
        for x in r.batches:
            by_step.setdefault(x.step, []).append(x)
            if x.packed_max_tokens != MAX_TOKENS:
                problems.append(f"{tag}: step {x.step} rank {x.rank} not packed to {MAX_TOKENS}")
            if x.max_row_tokens > MAX_TOKENS:
                problems.append(
                    f"{tag}: step {x.step} rank {x.rank} has a row of {x.max_row_tokens} tokens"
                )
        for step, batches in by_step.items():
            if any(x.rows for x in batches) and not all(x.rows for x in batches):
                empty = [x.rank for x in batches if not x.rows]
                problems.append(f"{tag}: step {step} leaves rank(s) {empty} an empty batch")
    for dataset in {r.dataset for r in runs}:
        mine = [r for r in runs if r.dataset == dataset]
        sets = {
            r.mode: Counter(s for x in r.batches for s in x.samples) for r in mine if r.round == 1
        }
        if sets.get("unpacked") != sets.get("packed"):
            u, p = sets.get("unpacked", Counter()), sets.get("packed", Counter())
            problems.append(
                f"{dataset}: sample multisets differ: only unpacked {sorted((u - p).elements())[:20]}, "
                f"only packed {sorted((p - u).elements())[:20]}"
            )
        for mode in ("unpacked", "packed"):
            keys = [batch_key(r) for r in mine if r.mode == mode]
            if any(k != keys[0] for k in keys[1:]):
                problems.append(f"{dataset}/{mode}: the rounds wrote different batches")
    return problems


# ---- report ----


def markdown(summary: dict[str, Any]) -> str:
    lines = [
        "# Sequence packing: unpacked vs packed",
        "",
        f"Command: `{summary['command']}`",
        "",
        f"Settings: W={WORLD_SIZE}, B={MICRO_BATCH}, max-seq-len = packing.max-tokens = {MAX_TOKENS}, "
        f"options {json.dumps(COMMON_OPTIONS)}; shared epochs {summary['shared_epochs']}, "
        f"synthetic records {summary['synthetic_records']} (seed {summary['seed']}); "
        f"rounds {summary['rounds']}, order alternating.",
        "",
        "| dataset | mode | samples | padding fraction | tokens / (rows x T) | rows/batch | token spread mean (p95) "
        "| token max/mean-1 mean (p95) | patch spread mean (p95) | patch max/mean-1 mean (p95) "
        "| samples/s wall | samples/s steady |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d in summary["datasets"]:
        for mode in ("unpacked", "packed"):
            m = d[mode]

            def ms(key: str, fmt: str, m: dict[str, Any] = m) -> str:
                return f"{m[key]['mean']:{fmt}} ({m[key]['p95']:{fmt}})"

            lines.append(
                f"| {d['dataset']} | {mode} | {m['samples']} | {m['padding_fraction']:.3f} "
                f"| {m['fill_of_max_tokens']:.3f} | {m['rows_per_batch']:.2f} | {ms('rank_token_spread', '.0f')} "
                f"| {ms('rank_token_imbalance', '.3f')} | {ms('rank_patch_spread', '.0f')} "
                f"| {ms('rank_patch_imbalance', '.3f')} "
                f"| {m['samples_per_s_wall']:.2f} | {m['samples_per_s_steady']:.2f} |"
            )
    lines += [
        "",
        "samples/s: mean over rounds; per round (wall = samples / (last batch - job start); "
        "steady = samples after the first W batches / their time):",
        "",
        "| dataset | round | unpacked wall | packed wall | packed/unpacked wall "
        "| unpacked steady | packed steady | packed/unpacked steady |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for d in summary["datasets"]:
        for r in d["rounds"]:
            lines.append(
                f"| {d['dataset']} | {r['round']} ({r['order']}) | {r['unpacked_wall']:.2f} "
                f"| {r['packed_wall']:.2f} | {r['packed_wall'] / r['unpacked_wall']:.3f} "
                f"| {r['unpacked_steady']:.2f} | {r['packed_steady']:.2f} "
                f"| {r['packed_steady'] / r['unpacked_steady']:.3f} |"
            )
        lines.append(
            f"| {d['dataset']} | mean | | | **{d['ratio_wall']:.3f}** | | "
            f"| **{d['ratio_steady']:.3f}** |"
        )
    lines += ["", "Checks: " + ("; ".join(summary["problems"]) or "all passed"), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--datasets", default="shared,synthetic")
    parser.add_argument("--shared-epochs", type=int, default=8)
    parser.add_argument("--synthetic-records", type=int, default=960)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--quick", action="store_true", help="1 round, 1 epoch, 64 records")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/stoker-packbench"))
    parser.add_argument("--output-root", type=Path, default=Path("/dev/shm/stoker-packbench"))
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.shared_epochs, args.synthetic_records = 1, 1, 64
    work: Path = args.work_dir
    roots = {
        "shared": (make_shared(work / "data-shared"), args.shared_epochs),
        "synthetic": (
            make_synthetic(work / "data-synthetic", args.synthetic_records, args.seed),
            1,
        ),
    }
    datasets = [d for d in args.datasets.split(",") if d]
    runs: list[Run] = []
    for rnd in range(1, args.rounds + 1):
        order = ("unpacked", "packed") if rnd % 2 else ("packed", "unpacked")
        for dataset in datasets:
            root, epochs = roots[dataset]
            for mode in order:
                run = run_job(dataset, root, mode, rnd, epochs, work, args.output_root)
                s = run.summary()
                log(
                    f"{dataset} {mode} round {rnd}: {s['samples']} samples in {s['batches']} "
                    f"batches, padding {s['padding_fraction']:.3f}, rows/batch "
                    f"{s['rows_per_batch']:.2f}, token imbalance {s['rank_token_imbalance']['mean']:.3f}, "
                    f"{s['samples_per_s_wall']:.2f} samples/s wall, "
                    f"{s['samples_per_s_steady']:.2f} steady; {run.accounting}"
                )
                runs.append(run)
    problems = check(runs)
    summary: dict[str, Any] = {
        "command": "bench/packing.sh " + " ".join(argv if argv is not None else sys.argv[1:]),
        "world_size": WORLD_SIZE,
        "micro_batch_size": MICRO_BATCH,
        "max_tokens": MAX_TOKENS,
        "options": COMMON_OPTIONS,
        "packed_options": PACKED_OPTIONS,
        "shared_epochs": args.shared_epochs,
        "synthetic_records": args.synthetic_records,
        "seed": args.seed,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "problems": problems,
        "runs": [r.summary() for r in runs],
        "datasets": [],
    }
    for dataset in datasets:
        mine = [r.summary() for r in runs if r.dataset == dataset]
        entry: dict[str, Any] = {"dataset": dataset, "rounds": []}
        for mode in ("unpacked", "packed"):
            first = next(s for s in mine if s["mode"] == mode)
            entry[mode] = {
                **first,
                "samples_per_s_wall": float(
                    np.mean([s["samples_per_s_wall"] for s in mine if s["mode"] == mode])
                ),
                "samples_per_s_steady": float(
                    np.mean([s["samples_per_s_steady"] for s in mine if s["mode"] == mode])
                ),
            }
        for rnd in range(1, args.rounds + 1):
            u = next(s for s in mine if s["mode"] == "unpacked" and s["round"] == rnd)
            p = next(s for s in mine if s["mode"] == "packed" and s["round"] == rnd)
            entry["rounds"].append(
                {
                    "round": rnd,
                    "order": "unpacked first" if rnd % 2 else "packed first",
                    "unpacked_wall": u["samples_per_s_wall"],
                    "packed_wall": p["samples_per_s_wall"],
                    "unpacked_steady": u["samples_per_s_steady"],
                    "packed_steady": p["samples_per_s_steady"],
                }
            )
        entry["ratio_wall"] = float(
            np.mean([r["packed_wall"] / r["unpacked_wall"] for r in entry["rounds"]])
        )
        entry["ratio_steady"] = float(
            np.mean([r["packed_steady"] / r["unpacked_steady"] for r in entry["rounds"]])
        )
        summary["datasets"].append(entry)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "packing-quick" if args.quick else "packing"
    (args.out / f"{stem}.json").write_text(json.dumps(summary, indent=1) + "\n")
    (args.out / f"{stem}.md").write_text(markdown(summary))
    print(markdown(summary))
    for p in problems:
        log(f"PROBLEM: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
