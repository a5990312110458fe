"""Java writer -> Python reader on real files in /dev/shm.

Runs the real job (the shaded jar built by ``./stoker test``, on embedded Flink) over the shared
LLaVA-style dataset while one ``BatchReader`` per rank consumes and acknowledges the batches (the
job's prefetch gate waits for those acks), and checks the documented layout, shapes, dtypes,
back-fill, accounting and the seeded row order of ``docs/batch-protocol.md``. A second
submission resumed at a later step (a new generation) must reproduce the first run's batches
from there on.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from harness.jobs import job_command
from harness.paths import DATASET, require_shared

from stoker import Batch, BatchReader
from stoker.dead_letters import read_dead_letters

IMAGE_PAD = 151655
VISION_START = 151652
WORLD_SIZE = 2
MICRO_BATCH = 4
PREFETCH_DEPTH = 3  # stoker.prefetch-depth of the first run, below its number of steps
RESUME_STEP = 2
JOB_TIMEOUT_S = 600


@dataclass
class Seen:
    """What one rank's reader got: per step, copies of the columns the checks need."""

    steps: list[int] = field(default_factory=list)
    rows: dict[int, dict] = field(default_factory=dict)
    generation: str | None = None
    error: BaseException | None = None


def _check_batch(batch: Batch) -> None:
    b, seq_len = batch.input_ids.shape
    assert b == MICRO_BATCH, f"step {batch.step}: {b} rows"  # every slot filled or back-filled
    assert batch.input_ids.dtype == np.int64 and batch.labels.dtype == np.int64
    assert batch.attention_mask.dtype == np.int64
    assert batch.labels.shape == (b, seq_len) and batch.attention_mask.shape == (b, seq_len)
    assert batch.pixel_values.dtype == np.float32 and batch.pixel_values.shape[1] == 1176
    assert batch.image_grid_thw.dtype == np.int64 and batch.image_grid_thw.shape[1] == 3
    assert batch.pixel_values.shape[0] == int(np.prod(batch.image_grid_thw, axis=1).sum())
    # every image becomes <|vision_start|> + t*h*w/4 image pads + <|vision_end|>
    pads = int((batch.input_ids == IMAGE_PAD).sum())
    assert pads == int(np.prod(batch.image_grid_thw, axis=1).sum()) // 4
    assert int((batch.input_ids == VISION_START).sum()) == batch.image_grid_thw.shape[0]
    # labels are ids or -100; nothing is trained on padding or image pads
    trained = batch.labels != -100
    assert np.array_equal(batch.labels[trained], batch.input_ids[trained])
    assert not np.any(trained & (batch.attention_mask == 0))
    assert not np.any(trained & (batch.input_ids == IMAGE_PAD))
    assert np.all(trained.sum(axis=1) > 0)
    # pixel values are normalised with the CLIP mean/std: roughly within [-1.8, 2.2]
    assert batch.pixel_values.min() >= -1.8 and batch.pixel_values.max() <= 2.2
    # a back-filled slot k copies the first filled slot after it, wrapping around
    filled = [k for k in range(b) if k not in batch.backfilled_slots]
    assert filled, f"step {batch.step}: every row back-filled"
    for k in batch.backfilled_slots:
        j = next(x for x in [*range(k + 1, b), *range(k)] if x in filled)
        assert batch.sample_index[k] == batch.sample_index[j]
        assert batch.source[k] == batch.source[j]
        assert batch.location[k] == batch.location[j]
        assert np.array_equal(batch.input_ids[k], batch.input_ids[j])


def _read_rank(
    job_dir: Path,
    rank: int,
    seen: Seen,
    hold_first_s: float = 0.0,
    start_step: int | None = None,
    after_generation: str | None = None,
) -> None:
    try:
        if after_generation is not None:
            # a restarted trainer starts once the resubmitted job has published its manifest
            deadline = time.monotonic() + JOB_TIMEOUT_S
            while time.monotonic() < deadline:
                try:
                    gen = json.loads((job_dir / "manifest.json").read_text())["generation"]
                except (OSError, ValueError, KeyError):
                    gen = None
                if gen not in (None, after_generation):
                    break
                time.sleep(0.05)
        reader = BatchReader(job_dir, rank, timeout_s=JOB_TIMEOUT_S, start_step=start_step)
        first = True
        for batch in reader:
            if first and hold_first_s > 0:
                _check_prefetch_gate(reader, hold_first_s)
            first = False
            _check_batch(batch)
            seen.steps.append(batch.step)
            seen.generation = reader.generation
            seen.rows[batch.step] = {
                "sample_index": batch.sample_index.tolist(),
                "source": list(batch.source),
                "location": list(batch.location),
                "backfilled": batch.backfilled_slots,
                "input_ids": batch.input_ids.copy(),
            }
            del batch
    except BaseException as e:  # reported by the test
        seen.error = e


def _check_prefetch_gate(reader: BatchReader, hold_s: float) -> None:
    """While this rank holds its first step unacknowledged, the job writes at most
    ``PREFETCH_DEPTH`` steps for any rank: steps <= first_step - 1 + depth."""
    first = reader.manifest.first_step
    last_allowed = first - 1 + PREFETCH_DEPTH
    assert last_allowed < reader.num_steps - 1, "the run must have steps beyond the gate"
    gen_dir = reader.rank_dir.parent
    deadline = time.monotonic() + 120
    want = reader.rank_dir / f"step-{last_allowed:010d}.arrow"
    while not want.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(hold_s)  # give the job time to (wrongly) run ahead
    for r in range(WORLD_SIZE):
        written = sorted(p.name for p in (gen_dir / f"rank-{r}").glob("step-*.arrow"))
        beyond = [n for n in written if int(n[5:15]) > last_allowed]
        assert not beyond, f"rank {r}: {beyond} written past the prefetch gate ({written})"


def _run_job(
    out_root: Path,
    log: Path,
    *extra: str,
    hold_first_s: float = 0.0,
    start_step: int | None = None,
    after_generation: str | None = None,
) -> list[Seen]:
    """Run the job to completion while one reader thread per rank consumes its batches."""
    job_dir = out_root / "e2e"
    seen = [Seen() for _ in range(WORLD_SIZE)]
    with log.open("w") as out:
        proc = subprocess.Popen(
            job_command(
                out_root, "e2e", *extra, world_size=WORLD_SIZE, micro_batch_size=MICRO_BATCH
            ),
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threads = [
            threading.Thread(
                target=_read_rank,
                args=(
                    job_dir,
                    r,
                    seen[r],
                    hold_first_s if r == 0 else 0.0,
                    start_step,
                    after_generation,
                ),
                daemon=True,
            )
            for r in range(WORLD_SIZE)
        ]
        for t in threads:
            t.start()
        deadline = time.monotonic() + JOB_TIMEOUT_S
        try:
            while any(t.is_alive() for t in threads) or proc.poll() is None:
                rc = proc.poll()
                if rc not in (None, 0):
                    pytest.fail(f"job failed (exit {rc}):\n{log.read_text()[-6000:]}")
                if rc == 0 and any(t.is_alive() for t in threads):
                    # the job is done: every batch is published; give the readers a moment
                    for t in threads:
                        t.join(timeout=30)
                    if any(t.is_alive() for t in threads):
                        pytest.fail(f"job finished but readers still wait: {seen}")
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"job did not finish in {JOB_TIMEOUT_S}s:\n{log.read_text()[-6000:]}"
                    )
                time.sleep(0.2)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for r, s in enumerate(seen):
        if s.error is not None:
            raise AssertionError(f"rank {r} reader failed: {s.error!r}") from s.error
    return seen


@pytest.fixture(scope="module")
def runs():
    require_shared()
    out_root = Path(tempfile.mkdtemp(prefix="stoker-e2e-", dir="/dev/shm"))
    try:
        first = _run_job(
            out_root,
            out_root / "job-1.log",
            "--stoker.prefetch-depth",
            str(PREFETCH_DEPTH),
            hold_first_s=1.0,
        )
        manifest1 = json.loads((out_root / "e2e" / "manifest.json").read_text())
        # the trainer restarted from its checkpoint at RESUME_STEP; the job is resubmitted
        resumed = _run_job(
            out_root,
            out_root / "job-2.log",
            "--stoker.resume-step",
            str(RESUME_STEP),
            "--stoker.dead-letter.path",
            str(out_root / "dead-letters-2"),
            start_step=RESUME_STEP + 1,
            after_generation=manifest1["generation"],
        )
        manifest2 = json.loads((out_root / "e2e" / "manifest.json").read_text())
        yield {
            "job_dir": out_root / "e2e",
            "first": first,
            "manifest1": manifest1,
            "resumed": resumed,
            "manifest2": manifest2,
        }
    finally:
        shutil.rmtree(out_root, ignore_errors=True)


def _records() -> list[int]:
    """1-based line numbers of the dataset's records (non-blank lines), in listing order."""
    lines = (DATASET / "train.jsonl").read_text().splitlines()
    return [i + 1 for i, line in enumerate(lines) if line.strip()]


_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix(z: int) -> int:
    """The SplitMix64 finaliser (``SeededPermutation.mix``) on unsigned 64-bit integers."""
    z &= _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _permutation(n: int, key: int) -> list[int]:
    """``SeededPermutation(n, key)``: a 6-round Feistel network over 2h bits, cycle walking."""
    half = (max(1, (n - 1).bit_length()) + 1) // 2
    mask = (1 << half) - 1
    round_keys = [_mix(key + (r + 1) * _GOLDEN) for r in range(6)]

    def encrypt(v: int) -> int:
        left, right = v >> half, v & mask
        for rk in round_keys:
            left, right = right, left ^ (_mix(right ^ rk) & mask)
        return (left << half) | right

    out = []
    for p in range(n):
        y = encrypt(p)
        while y >= n:
            y = encrypt(y)
        out.append(y)
    return out


def _key(seed: int, stream: int, index: int) -> int:
    return _mix(_mix((seed & _M64) ^ _mix(stream)) + index)


def _name_key(name: str) -> int:
    h = 0xCBF29CE484222325
    for b in name.encode("utf-8"):
        h = ((h ^ b) * 0x100000001B3) & _M64
    return h


def _mixture_order(n: int, seed: int, epoch: int, source: str = "dataset") -> list[int]:
    """``MixtureOrder`` of a one-source mixture read once per epoch (docs/batch-protocol.md, "Row
    and slot order"), written again from the documentation: position p of the epoch holds the
    source's contribution k = perm_e(p), which is its record perm_(source, e)(k)."""
    interleave = _permutation(n, _key(seed, 0x6D69786564, epoch))
    records = _permutation(n, _key(seed, _name_key(source), epoch))  # cycle e: C = N
    return [records[interleave[p]] for p in range(n)]


def test_manifest_and_layout(runs) -> None:
    m = runs["manifest1"]
    n = len(_records())
    steps = -(-n // (WORLD_SIZE * MICRO_BATCH))
    assert m["format_version"] == 4 and m["job_name"] == "e2e"
    assert (m["world_size"], m["micro_batch_size"]) == (WORLD_SIZE, MICRO_BATCH)
    assert (m["num_records"], m["epochs"], m["steps_per_epoch"], m["num_steps"]) == (
        n,
        1,
        steps,
        steps,
    )
    assert m["first_step"] == 0 and m["shuffle_seed"] == 0 and m["patch_dim"] == 1176
    m2 = runs["manifest2"]
    assert m2["generation"] != m["generation"] and m2["first_step"] == RESUME_STEP + 1
    # the resubmitted job removed the first generation; readers consumed every file
    job_dir = runs["job_dir"]
    assert sorted(p.name for p in job_dir.glob("gen-*")) == [f"gen-{m2['generation']}"]
    for r in range(WORLD_SIZE):
        rank_dir = job_dir / f"gen-{m2['generation']}" / f"rank-{r}"
        assert not list(rank_dir.glob("step-*.arrow"))
        ack = json.loads((rank_dir / "ack.json").read_text())
        assert ack["consumed_step"] == steps - 1


def test_every_rank_reads_every_step_in_order(runs) -> None:
    m = runs["manifest1"]
    for r, seen in enumerate(runs["first"]):
        assert seen.steps == list(range(m["num_steps"])), r
        assert seen.generation == m["generation"]


def test_accounting_and_seeded_order(runs) -> None:
    """Each record is in exactly one filled slot or one dead letter; slot index p holds record
    order[p] of the seeded mixture order (the dataset is the one-source mixture)."""
    lines = _records()
    n = len(lines)
    order = _mixture_order(n, seed=0, epoch=0)
    filled: list[int] = []
    for seen in runs["first"]:
        for step, row in seen.rows.items():
            for k, (index, source, location) in enumerate(
                zip(row["sample_index"], row["source"], row["location"], strict=True)
            ):
                assert index // (WORLD_SIZE * MICRO_BATCH) == step
                assert source == "dataset"  # the one-source mixture of stoker.dataset.path
                if k in row["backfilled"]:
                    continue
                assert index % MICRO_BATCH == k
                filled.append(index)
                assert location.endswith(f"train.jsonl:{lines[order[index]]}"), (index, location)
    dead = read_dead_letters(runs["job_dir"] / "dead-letters")
    dead_index = [d["sample_index"] for d in dead]
    assert len(filled) + len(dead) == n
    assert sorted(filled + dead_index) == list(range(n))
    for d in dead:
        assert d["file"].endswith("train.jsonl") and d["line"] >= 1 and d["reason"] and d["message"]
        assert d["line"] == lines[order[d["sample_index"]]]
    # padding slots (past the epoch's last record) are back-filled
    slots = runs["manifest1"]["num_steps"] * WORLD_SIZE * MICRO_BATCH
    backfilled = sum(len(row["backfilled"]) for s in runs["first"] for row in s.rows.values())
    assert backfilled == slots - len(filled)


def test_resumed_generation_reproduces_the_batches(runs) -> None:
    m2 = runs["manifest2"]
    for r, (first, resumed) in enumerate(zip(runs["first"], runs["resumed"], strict=True)):
        assert resumed.generation == m2["generation"]
        assert resumed.steps == list(range(RESUME_STEP + 1, m2["num_steps"])), r
        for step in resumed.steps:
            a, b = first.rows[step], resumed.rows[step]
            assert a["sample_index"] == b["sample_index"] and a["source"] == b["source"]
            assert a["location"] == b["location"]
            assert a["backfilled"] == b["backfilled"]
            assert np.array_equal(a["input_ids"], b["input_ids"])
