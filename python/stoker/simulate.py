"""Simulated trainer: one thread per DP rank reads batches and "trains" by sleeping.

    python -m stoker.simulate --root /dev/shm/stoker/<job> [--ranks 0,1 | --world-size W]
        [--step-time-ms 20] [--flink-rest http://127.0.0.1:8081] [--timeout-s 600]
        [--record batches.jsonl]

Each rank runs a :class:`~stoker.reader.BatchReader`, touches the arrays of every batch (so a
broken mapping would fail loudly), then sleeps ``--step-time-ms`` (no CPU use). A progress line
is printed about once a second; a summary at the end. Exit code 0 only if every rank received
``num_steps`` batches. ``--record`` appends one JSON line per batch read,
``{"step", "rank", "sha256", "samples"}`` (SHA-256 of the batch file), so two runs can be compared
batch by batch.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .reader import BatchReader, Manifest

__all__ = ["main", "RankResult", "run_rank", "flink_job_status"]


@dataclass
class RankResult:
    """Progress of one simulated rank (updated by its thread)."""

    rank: int
    steps: int = 0
    samples: int = 0
    images: int = 0
    tokens: int = 0
    checksum: int = 0
    wait_s: float = 0.0
    elapsed_s: float = 0.0
    error: str | None = None
    done: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def wait_time_ratio(self) -> float:
        return self.wait_s / self.elapsed_s if self.elapsed_s > 0 else 0.0


class BatchLog:
    """Appends ``{"step", "rank", "sha256", "samples"}`` per batch to a JSONL file (thread-safe)."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self._lock = threading.Lock()

    def add(self, step: int, rank: int, path: str, samples: int) -> None:
        # The file is still there: the reader unlinks it only when the next step is requested.
        with open(path, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        line = json.dumps({"step": step, "rank": rank, "sha256": digest, "samples": samples})
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        self._file.close()


def run_rank(
    reader: BatchReader, result: RankResult, step_time_s: float, log: BatchLog | None = None
) -> None:
    """Consume every batch of ``reader``; records counts and errors in ``result``."""
    try:
        for batch in reader:
            if log is not None:
                log.add(batch.step, batch.rank, batch.path, batch.num_samples)
            # Touch the mapped memory: token count, one pixel column, and the image grids.
            tokens = int(batch.attention_mask.sum())
            touched = int(batch.input_ids.sum()) + int(batch.image_grid_thw.sum())
            if batch.pixel_values.size:
                touched += int(np.isfinite(batch.pixel_values[:, 0]).sum())
            with result.lock:
                result.steps += 1
                result.samples += batch.num_samples
                result.images += batch.num_images
                result.tokens += tokens
                result.checksum = (result.checksum + touched) & 0xFFFFFFFF
                result.wait_s = reader.data_wait_s
                result.elapsed_s = reader.elapsed_s
            del batch
            if step_time_s > 0:
                time.sleep(step_time_s)
        with result.lock:
            result.wait_s = reader.data_wait_s
            result.elapsed_s = reader.elapsed_s
    except Exception as e:  # reported in the summary; the exit code reflects it
        with result.lock:
            result.error = f"{type(e).__name__}: {e}"
    finally:
        with result.lock:
            result.done = True


def _get_json(url: str, timeout_s: float) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        return json.loads(resp.read().decode("utf-8"))


def flink_job_status(rest: str, job_name: str | None = None, timeout_s: float = 2.0) -> str:
    """One-line job status from the Flink REST API (best effort; never raises).

    Uses ``GET /jobs/overview`` to find the job (by name if given, else the first running
    one), then ``GET /jobs/<jid>``. Records read is the sum over subtasks of the JSONL source
    operator's ``numRecordsOut`` (``GET /jobs/<jid>/vertices/<vid>/subtasks/metrics``), falling
    back to the first vertex's ``write-records``.
    """
    rest = rest.rstrip("/")
    try:
        jobs = _get_json(f"{rest}/jobs/overview", timeout_s).get("jobs", [])
        if not jobs:
            return "flink: no jobs"
        cands = (
            [j for j in jobs if job_name and j.get("name") == job_name]
            or [j for j in jobs if j.get("state") == "RUNNING"]
            or jobs
        )
        job = cands[0]
        detail = _get_json(f"{rest}/jobs/{job['jid']}", timeout_s)
        vertices = detail.get("vertices") or []
        records = vertices[0].get("metrics", {}).get("write-records") if vertices else None
        if vertices:
            records = (
                _source_records_read(rest, job["jid"], vertices[0]["id"], timeout_s) or records
            )
        return f"flink: {detail.get('name', job.get('name'))} {detail.get('state', job.get('state'))} records_read={records}"
    except (
        urllib.error.URLError,
        OSError,
        ValueError,
        KeyError,
        IndexError,
        AttributeError,
        TypeError,
    ) as e:
        return f"flink: unavailable at {rest} ({type(e).__name__}: {e})"


def _source_records_read(rest: str, jid: str, vid: str, timeout_s: float) -> int | None:
    base = f"{rest}/jobs/{jid}/vertices/{vid}/subtasks/metrics"
    names = [m["id"] for m in _get_json(base, timeout_s)]
    wanted = [n for n in names if "jsonl-source" in n and n.endswith(".numRecordsOut")]
    if not wanted:
        return None
    values = _get_json(f"{base}?get={urllib.parse.quote(wanted[0])}&agg=sum", timeout_s)
    return int(float(values[0]["sum"])) if values else None


def _batches_written(root: str, rank: int, consumed: int) -> int:
    """Batches the sink has published for ``rank``: consumed ones plus files waiting (step >= consumed)."""
    waiting = 0
    for path in Path(root, f"rank-{rank}").glob("step-*.arrow"):
        try:
            waiting += int(path.name[5:15]) >= consumed
        except ValueError:
            continue
    return consumed + waiting


def _parse_ranks(text: str) -> list[int]:
    try:
        ranks = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--ranks wants comma-separated integers, got {text!r}"
        ) from None
    if not ranks or ranks[0] < 0:
        raise argparse.ArgumentTypeError(f"--ranks wants non-negative integers, got {text!r}")
    return ranks


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m stoker.simulate", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--root", required=True, help="job directory holding manifest.json and rank-*/")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--ranks", type=_parse_ranks, help="comma-separated ranks to simulate, e.g. 0,1")
    g.add_argument(
        "--world-size", type=int, help="simulate ranks 0..W-1 (default: manifest world_size)"
    )
    p.add_argument(
        "--step-time-ms", type=float, default=20.0, help="simulated compute per step (ms)"
    )
    p.add_argument("--flink-rest", help="Flink REST base URL, e.g. http://127.0.0.1:8081")
    p.add_argument(
        "--timeout-s",
        type=float,
        default=None,
        help="give up if the manifest or any batch takes longer than this (s)",
    )
    p.add_argument("--poll-interval-ms", type=float, default=5.0, help="file polling interval (ms)")
    p.add_argument(
        "--progress-interval-s", type=float, default=1.0, help="seconds between progress lines"
    )
    p.add_argument(
        "--record",
        metavar="PATH",
        help="append one JSON line per batch read: step, rank, sha256 of the batch file, samples",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    probe = BatchReader(
        args.root, 0, poll_interval_s=args.poll_interval_ms / 1000, timeout_s=args.timeout_s
    )
    try:
        manifest: Manifest = probe.manifest
    except (TimeoutError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.ranks is not None:
        ranks = args.ranks
    elif args.world_size is not None:
        ranks = list(range(args.world_size))
    else:
        ranks = list(range(manifest.world_size))
    bad = [r for r in ranks if r >= manifest.world_size]
    if bad:
        print(
            f"error: ranks {bad} outside manifest world_size {manifest.world_size}", file=sys.stderr
        )
        return 2
    print(
        f"job={manifest.job_name!r} world_size={manifest.world_size} num_steps={manifest.num_steps} "
        f"micro_batch_size={manifest.micro_batch_size} ranks={ranks}",
        flush=True,
    )

    results = {r: RankResult(r) for r in ranks}
    batch_log = BatchLog(args.record) if args.record else None
    readers = {
        r: BatchReader(
            args.root, r, poll_interval_s=args.poll_interval_ms / 1000, timeout_s=args.timeout_s
        )
        for r in ranks
    }
    threads = [
        threading.Thread(
            target=run_rank,
            args=(readers[r], results[r], args.step_time_ms / 1000, batch_log),
            name=f"stoker-rank-{r}",
            daemon=True,
        )
        for r in ranks
    ]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    next_progress = t0 + args.progress_interval_s
    while any(t.is_alive() for t in threads):
        time.sleep(0.02)
        now = time.monotonic()
        if now < next_progress or not any(t.is_alive() for t in threads):
            continue
        next_progress = now + args.progress_interval_s
        el = now - t0
        parts = []
        total = 0
        for r in ranks:
            res = results[r]
            with res.lock:
                total += res.samples
                written = _batches_written(args.root, r, res.steps)
                parts.append(
                    f"r{r}={res.steps}/{manifest.num_steps} (written {written}) "
                    f"wait={res.wait_time_ratio:.0%}"
                )
        line = f"[{el:6.1f}s] " + " ".join(parts) + f" samples/s={total / el:.1f}"
        if args.flink_rest:
            line += " | " + flink_job_status(args.flink_rest, manifest.job_name)
        print(line, flush=True)
    elapsed = time.monotonic() - t0
    if batch_log is not None:
        batch_log.close()

    ok = True
    total_samples = total_images = 0
    total_wait = total_el = 0.0
    print("summary:")
    for r in ranks:
        res = results[r]
        total_samples += res.samples
        total_images += res.images
        total_wait += res.wait_s
        total_el += res.elapsed_s
        complete = res.steps == manifest.num_steps and res.error is None
        ok &= complete
        status = "ok" if complete else f"INCOMPLETE ({res.error or 'fewer steps than num_steps'})"
        print(
            f"  rank {r}: steps={res.steps}/{manifest.num_steps} samples={res.samples} images={res.images} "
            f"tokens={res.tokens} wait_time_ratio={res.wait_time_ratio:.3f} {status}"
        )
    overall_ratio = total_wait / total_el if total_el > 0 else 0.0
    print(
        f"  total: samples={total_samples} images={total_images} elapsed_s={elapsed:.2f} "
        f"samples/s={total_samples / elapsed if elapsed > 0 else 0.0:.1f} wait_time_ratio={overall_ratio:.3f}"
    )
    if args.flink_rest:
        print("  " + flink_job_status(args.flink_rest, manifest.job_name))
    print("result: " + ("OK" if ok else "FAILED"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
