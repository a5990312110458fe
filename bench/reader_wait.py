"""How long the trainer's ``next()`` takes when the batch is already there (the reader's own cost).

    .venv/bin/python bench/reader_wait.py [PYTHON_DIR ...] [--rounds 2] [--steps 60] [--step-ms 135]

A producer process publishes batch files per docs/batch-protocol.md with the tests' writer
(``python/tests/harness/batches.py``; B = 8 rows of 1000 patches of D = 1176 float32, ~38 MB per file,
at most 8 steps ahead of the last ack, as the job's prefetch gate allows), and a trainer reads them with ``BatchReader`` and sleeps ``--step-ms`` per
step, so every file is mapped before it is asked for. Prints the time per ``next()`` (the first
10 steps left out) for each ``PYTHON_DIR`` holding a ``stoker`` package (default: this
checkout's ``python/``), alternating them ``--rounds`` times, so that two versions of the reader
are compared side by side (e.g. a ``git worktree`` of an older commit).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
B, P, D, DEPTH = 8, 1000, 1176, 8


def produce(root: Path, steps: int) -> None:
    """Publish steps 0 .. steps-1 of rank 0, each at most DEPTH steps ahead of ack.json."""
    import numpy as np
    from harness.batches import build_record_batch, rank_dir, write_batch, write_manifest

    patches = np.random.default_rng(0).standard_normal((P, D), dtype=np.float32)
    write_manifest(root, world_size=1, num_steps=steps, micro_batch_size=B, patch_dim=D)
    ack = rank_dir(root, 0) / "ack.json"
    for step in range(steps):
        while step > DEPTH + _consumed(ack):
            time.sleep(0.002)
        samples = [
            {
                "index": step * B + i,
                "source": "dataset",
                "location": f"s3://bench/a.jsonl:{step * B + i + 1}",
                "ids": list(range(600)),
                "grids": [[1, 20, 50]],
                "patches": patches,
            }
            for i in range(B)
        ]
        write_batch(root, step, 0, build_record_batch(samples, patch_dim=D), slots=B)


def _consumed(ack: Path) -> int:
    """The acked step, or -1 before the first ack."""
    from stoker.protocol import read_consumed_step

    consumed = read_consumed_step(ack)
    return -1 if consumed is None else consumed


def consume(root: Path, step_s: float) -> dict[str, float]:
    """Read every step as a trainer does; returns the statistics of ``next()`` in ms."""
    import numpy as np

    from stoker import BatchReader

    reader = BatchReader(root, 0, timeout_s=60)
    times = []
    while True:
        t = time.monotonic()
        try:
            batch = next(reader)
        except StopIteration:
            break
        times.append(time.monotonic() - t)
        del batch
        time.sleep(step_s)
    ms = np.asarray(times[10:]) * 1000
    return {
        "median": float(np.median(ms)),
        "p90": float(np.percentile(ms, 90)),
        "p99": float(np.percentile(ms, 99)),
        "mean": float(ms.mean()),
        "wait_ratio": float(ms.sum() / (ms.sum() + step_s * 1000 * len(ms))),
        "read_ahead": reader.batches_read_ahead / max(reader.batches_read, 1),
    }


def run_one(python_dir: Path, steps: int, step_ms: float) -> dict[str, float]:
    """One measurement in fresh processes: the producer and a trainer importing ``python_dir``."""
    root = Path(tempfile.mkdtemp(prefix="stoker-reader-wait-", dir="/dev/shm")) / "job"
    me = [sys.executable, str(Path(__file__).resolve()), "--root", str(root), "--steps", str(steps)]
    tests = REPO / "python" / "tests"
    producer = subprocess.Popen(
        [*me, "--role", "producer"],
        env=dict(os.environ, PYTHONPATH=f"{REPO / 'python'}:{tests}"),
    )
    try:
        out = subprocess.run(
            [*me, "--role", "trainer", "--step-ms", str(step_ms)],
            env=dict(os.environ, PYTHONPATH=str(python_dir)),
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return dict(json.loads(out))
    finally:
        producer.kill()
        producer.wait()
        shutil.rmtree(root.parent, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("python_dirs", nargs="*", type=Path, default=[REPO / "python"])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--step-ms", type=float, default=135.0)
    p.add_argument("--role", choices=["producer", "trainer"], help=argparse.SUPPRESS)
    p.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.role == "producer":
        produce(args.root, args.steps)
        return
    if args.role == "trainer":
        print(json.dumps(consume(args.root, args.step_ms / 1000)))
        return
    for r in range(args.rounds):
        for d in args.python_dirs:
            s = run_one(d.resolve(), args.steps, args.step_ms)
            print(
                f"round {r + 1} {d}: next() median {s['median']:.3f} ms, p90 {s['p90']:.3f}, "
                f"p99 {s['p99']:.3f}, mean {s['mean']:.3f}; wait ratio "
                f"{100 * s['wait_ratio']:.2f}%; mapped ahead {100 * s['read_ahead']:.0f}%",
                flush=True,
            )


if __name__ == "__main__":
    main()
