"""Simulated trainer: one thread per DP rank reads batches and "trains" by sleeping.

    python -m stoker_tools.simulate --root /dev/shm/stoker/<job> [--ranks 0,1 | --world-size W]
        [--step-time-ms 20] [--flink-rest http://127.0.0.1:8081] [--timeout-s 600]
        [--start-step S] [--stop-after-step S] [--record batches.jsonl] [--summary-json FILE]

Each rank runs a :class:`stoker.BatchReader` (from ``--start-step``, default the
manifest's ``first_step``), touches the arrays of every batch (so a broken mapping would fail
loudly), then sleeps ``--step-time-ms`` (no CPU use). A progress line is printed about once a
second; a summary at the end, per rank and in total: ``wait_time_ratio`` (data-wait time / time
since the first request) over the whole run, ``first_batch_s`` (time to the first batch: the
start-up) and ``steady_wait_time_ratio`` (the ratio after the first batch); with
``--summary-json FILE`` the totals are also written to FILE as JSON (:func:`summarize`, which
:mod:`stoker_tools.naive_loader` shares, so both loaders of ``./stoker demo`` are measured alike).
With ``--record FILE``,
one JSON line per batch is appended to FILE: ``{"step", "rank", "sha256", "rows", "backfilled",
"sample_bytes", "wait_s", "received_at"}`` (``sha256``: hex digest of the batch file's bytes, read
from the mapping before the step is acknowledged; ``rows``: B; ``backfilled``: list of back-filled
rows; ``sample_bytes``: the size of the batch's samples as they cross the job's exchange, see
:class:`BatchRecorder`; ``wait_s``: seconds the rank waited for this batch; ``received_at``: Unix
time of its arrival, so a stall can be placed against a failure). With ``--stop-after-step S`` every rank stops after
consuming (and acknowledging) step S, as a trainer that is then restarted from its checkpoint at
step S; the job idles at its prefetch bound meanwhile, and a resubmission with
``--stoker.resume-step S`` plus a new trainer with ``--start-step S+1`` continue the run. Exit
code 0 only if every rank received every step from its start step to its last step
(``num_steps - 1``, or S), in order; 1 otherwise; 2 on a bad manifest or arguments. Text from the
job (its name, error messages naming its files) is printed escaped
(:func:`stoker.printable.printable`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from stoker import Batch, BatchReader, Manifest
from stoker.printable import escape_unencodable_stdout, printable

from .flink_rest import flink_job_status

#: How :func:`~stoker_tools.flink_rest.flink_job_status` begins when the REST API does not answer.
FLINK_UNAVAILABLE = "flink: unavailable at "

__all__ = [
    "main",
    "RankResult",
    "BatchRecorder",
    "run_rank",
    "startup_and_steady",
    "summarize",
    "total_line",
]


@dataclass
class RankResult:
    """Progress of one simulated rank (updated by its thread)."""

    rank: int
    #: First step the rank reads and one past its last (``num_steps``, or the stop step + 1;
    #: known once its reader started).
    start_step: int | None = None
    end_step: int | None = None
    #: Directory the rank's reader reads (``gen-<generation>/rank-<r>``), once started.
    rank_dir: Path | None = None
    steps: int = 0
    samples: int = 0
    backfilled: int = 0
    images: int = 0
    tokens: int = 0
    checksum: int = 0
    wait_s: float = 0.0
    elapsed_s: float = 0.0
    #: ``wait_s`` and ``elapsed_s`` when the first batch arrived: the start-up (the job's start,
    #: its first images); ``None`` before it arrived.
    first_batch_wait_s: float | None = None
    first_batch_elapsed_s: float | None = None
    error: str | None = None
    done: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def wait_time_ratio(self) -> float:
        return self.wait_s / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def steady_wait_time_ratio(self) -> float | None:
        """Wait-time ratio after the first batch (the start-up left out); ``None`` before the
        second batch arrived."""
        if self.first_batch_wait_s is None or self.first_batch_elapsed_s is None:
            return None
        elapsed = self.elapsed_s - self.first_batch_elapsed_s
        return (self.wait_s - self.first_batch_wait_s) / elapsed if elapsed > 0 else None

    @property
    def expected_steps(self) -> int | None:
        """Steps the rank must receive, ``end_step - start_step``; ``None`` before it started."""
        if self.start_step is None or self.end_step is None:
            return None
        return max(0, self.end_step - self.start_step)

    @property
    def complete(self) -> bool:
        """Every step from the start step to the last one arrived and nothing failed."""
        return self.error is None and self.steps == self.expected_steps


class BatchRecorder:
    """Appends one JSON line per batch to a file; safe to share between rank threads.

    Line: ``{"step": int, "rank": int, "sha256": str (hex digest of the batch file's bytes),
    "rows": int (samples S: unpacked the B rows), "backfilled": list[int] (back-filled samples),
    "sample_bytes": int, "wait_s":
    float (seconds the rank waited for this batch: its reader's data wait since the previous
    batch), "received_at": float (Unix time in seconds when the batch was handed over)}``.

    ``sample_bytes`` is what the batch's samples weigh before the sink pads and normalises them,
    i.e. the payload that crosses the job's exchange to the sink: per sample that is not
    back-filled, its ``input_ids`` and ``labels`` as int64 (16 bytes per token of its
    ``sample_spans`` span, unpacked its ``attention_mask``) and its images' resized RGB as uint8
    (``merge_size^2 * patch_size^2 * 3`` bytes per image token, from the manifest). Back-filled
    samples are copies the sink makes, so they do not count.
    """

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._lock = threading.Lock()

    def record(self, batch: Batch, manifest: Manifest, wait_s: float = 0.0) -> None:
        """Hash ``batch``'s file from its mapping and append its line (flushed at once).

        ``manifest``: the generation's (for the image geometry); ``wait_s``: the time the rank
        waited for this batch (seconds).
        """
        received_at = time.time()
        backfilled = set(batch.backfilled_slots)
        spans = [s for k, s in enumerate(batch.sample_spans.tolist()) if k not in backfilled]
        v = manifest.vision
        image_token_bytes = v.merge_size**2 * v.patch_size**2 * len(v.image_mean)
        sample_bytes = sum(
            16 * (end - start)
            + image_token_bytes
            * int((batch.input_ids[row, start:end] == batch.image_token_id).sum())
            for row, start, end in spans
        )
        line = json.dumps(
            {
                "step": batch.step,
                "rank": batch.rank,
                "sha256": hashlib.sha256(batch.file_bytes()).hexdigest(),
                "rows": batch.num_samples,
                "backfilled": list(batch.backfilled_slots),
                "sample_bytes": sample_bytes,
                "wait_s": round(wait_s, 4),
                "received_at": round(received_at, 4),
            }
        )
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


def run_rank(
    reader: BatchReader,
    result: RankResult,
    step_time_s: float,
    recorder: BatchRecorder | None = None,
) -> None:
    """Consume every batch of ``reader``; records counts and errors in ``result``.

    Each batch is recorded with ``recorder`` (if given) before the next one is requested, i.e.
    before it is acknowledged. A batch out of order ends the rank with an error.
    """
    try:
        start = reader.start_step
        with result.lock:
            result.start_step = start
            result.end_step = reader.end_step
            result.rank_dir = reader.rank_dir
        waited_s = 0.0  # the reader's data wait up to the previous batch
        for batch in reader:
            if batch.step != start + result.steps:
                raise RuntimeError(
                    f"rank {result.rank} got step {batch.step}, expected {start + result.steps}"
                )
            if recorder is not None:
                recorder.record(batch, reader.manifest, wait_s=reader.data_wait_s - waited_s)
            waited_s = reader.data_wait_s
            # Touch the mapped memory: token count, one pixel column, and the image grids.
            tokens = int(batch.attention_mask.sum())
            touched = int(batch.input_ids.sum()) + int(batch.image_grid_thw.sum())
            if batch.pixel_values.size:
                touched += int(np.isfinite(batch.pixel_values[:, 0]).sum())
            with result.lock:
                result.end_step = reader.end_step  # a new generation may change it
                result.rank_dir = reader.rank_dir
                result.steps += 1
                result.samples += batch.num_samples
                result.backfilled += len(batch.backfilled_slots)
                result.images += batch.num_images
                result.tokens += tokens
                result.checksum = (result.checksum + touched) & 0xFFFFFFFF
                result.wait_s = reader.data_wait_s
                result.elapsed_s = reader.elapsed_s
                if result.first_batch_wait_s is None:
                    result.first_batch_wait_s = result.wait_s
                    result.first_batch_elapsed_s = result.elapsed_s
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


def _batches_written(rank_dir: Path | None, received: int, next_step: int) -> int:
    """Batches published for a rank since its start: ``received`` plus files of steps >= ``next_step``.

    ``rank_dir`` is the generation's ``rank-<r>`` directory (``None``: not known yet).
    """
    if rank_dir is None:
        return received
    waiting = 0
    for path in rank_dir.glob("step-*.arrow"):
        try:
            waiting += int(path.name[5:15]) >= next_step
        except ValueError:
            continue
    return received + waiting


def startup_and_steady(res: RankResult) -> str:
    """``first_batch_s=<s> steady_wait_time_ratio=<ratio>`` of a rank's summary line."""
    first = "n/a" if res.first_batch_elapsed_s is None else f"{res.first_batch_elapsed_s:.2f}"
    steady = res.steady_wait_time_ratio
    return f"first_batch_s={first} steady_wait_time_ratio={'n/a' if steady is None else f'{steady:.3f}'}"


def summarize(results: Sequence[RankResult], elapsed_s: float) -> dict[str, Any]:
    """The totals of a run over its ranks, as the ``total:`` line and ``--summary-json`` give them.

    Args:
        results: every rank's result.
        elapsed_s: the run's wall time (seconds, from starting the ranks to the last one's end).

    Returns:
        ``{"samples": int, "images": int, "elapsed_s": float, "samples_per_s": float,
        "wait_time_ratio": float, "steady_wait_time_ratio": float | None,
        "first_batch_s": float | None}``: ``wait_time_ratio`` is the ranks' data-wait time over
        their time since the first request, summed over ranks (0..1); ``steady_wait_time_ratio``
        the same after each rank's first batch (``None``: no rank got a second batch);
        ``first_batch_s`` the longest time a rank waited for its first batch (the start-up;
        ``None``: no batch arrived).
    """
    total_wait = sum(r.wait_s for r in results)
    total_el = sum(r.elapsed_s for r in results)
    started = [
        r
        for r in results
        if r.first_batch_wait_s is not None and r.first_batch_elapsed_s is not None
    ]
    first_wait = sum(r.first_batch_wait_s or 0.0 for r in started)
    first_el = sum(r.first_batch_elapsed_s or 0.0 for r in started)
    steady_el = total_el - first_el
    samples = sum(r.samples for r in results)
    return {
        "samples": samples,
        "images": sum(r.images for r in results),
        "elapsed_s": elapsed_s,
        "samples_per_s": samples / elapsed_s if elapsed_s > 0 else 0.0,
        "wait_time_ratio": total_wait / total_el if total_el > 0 else 0.0,
        "steady_wait_time_ratio": (total_wait - first_wait) / steady_el if steady_el > 0 else None,
        "first_batch_s": max((r.first_batch_elapsed_s or 0.0 for r in started), default=None),
    }


def total_line(totals: dict[str, Any]) -> str:
    """The summary's ``total: ...`` line of :func:`summarize`'s totals."""
    steady = totals["steady_wait_time_ratio"]
    return (
        f"total: samples={totals['samples']} images={totals['images']} "
        f"elapsed_s={totals['elapsed_s']:.2f} samples/s={totals['samples_per_s']:.1f} "
        f"wait_time_ratio={totals['wait_time_ratio']:.3f} "
        f"steady_wait_time_ratio={'n/a' if steady is None else f'{steady:.3f}'}"
    )


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
        prog="python -m stoker_tools.simulate", description=__doc__.split("\n\n")[0]
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
        "--start-step",
        type=int,
        default=None,
        help="first step to read (the trainer checkpoint's step + 1); default: manifest first_step",
    )
    p.add_argument(
        "--stop-after-step",
        type=int,
        default=None,
        metavar="S",
        help="stop every rank after it consumed and acknowledged step S (a trainer stopping "
        "at its checkpoint); default: read to the last step",
    )
    p.add_argument(
        "--summary-json",
        metavar="FILE",
        help="write the totals of the summary's total: line to FILE as JSON (see summarize())",
    )
    p.add_argument(
        "--record",
        metavar="FILE",
        help='append one JSON line per batch to FILE: {"step", "rank", "sha256", "rows", "backfilled"}',
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    escape_unencodable_stdout()
    if args.start_step is not None and args.start_step < 0:
        print(f"error: --start-step must be >= 0, got {args.start_step}", file=sys.stderr)
        return 2
    if args.stop_after_step is not None and args.stop_after_step < 0:
        print(f"error: --stop-after-step must be >= 0, got {args.stop_after_step}", file=sys.stderr)
        return 2
    probe = BatchReader(
        args.root, 0, poll_interval_s=args.poll_interval_ms / 1000, timeout_s=args.timeout_s
    )
    try:
        manifest: Manifest = probe.manifest
    except (TimeoutError, ValueError) as e:
        print(f"error: {printable(e)}", file=sys.stderr)
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
    start = manifest.first_step if args.start_step is None else args.start_step
    if start < manifest.first_step:
        print(
            f"error: --start-step {start} is before first_step {manifest.first_step} of the job's "
            f"generation {printable(manifest.generation)}: resubmit the job (from its savepoint) with "
            f"--stoker.resume-step {start - 1}",
            file=sys.stderr,
        )
        return 2
    if args.stop_after_step is not None and args.stop_after_step < start:
        print(
            f"error: --stop-after-step {args.stop_after_step} is before the start step {start}",
            file=sys.stderr,
        )
        return 2
    stop = "" if args.stop_after_step is None else f" stop_after_step={args.stop_after_step}"
    print(
        f"job='{printable(manifest.job_name)}' generation={printable(manifest.generation)} "
        f"world_size={manifest.world_size} num_steps={manifest.num_steps} start_step={start}"
        f"{stop} micro_batch_size={manifest.micro_batch_size} ranks={ranks}",
        flush=True,
    )

    if args.record is None:
        return _run(args, manifest, ranks, None)
    with open(args.record, "a", encoding="utf-8") as record_file:
        return _run(args, manifest, ranks, record_file)


def _run(
    args: argparse.Namespace, manifest: Manifest, ranks: list[int], record_file: TextIO | None
) -> int:
    recorder = BatchRecorder(record_file) if record_file is not None else None
    results = {r: RankResult(r) for r in ranks}
    readers = {
        r: BatchReader(
            args.root,
            r,
            poll_interval_s=args.poll_interval_ms / 1000,
            timeout_s=args.timeout_s,
            start_step=args.start_step,
            stop_after_step=args.stop_after_step,
        )
        for r in ranks
    }
    threads = [
        threading.Thread(
            target=run_rank,
            args=(readers[r], results[r], args.step_time_ms / 1000, recorder),
            name=f"stoker-rank-{r}",
            daemon=True,
        )
        for r in ranks
    ]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    next_progress = t0 + args.progress_interval_s
    last_status: str | None = None  # the job's last status line from its REST API
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
                expected = res.expected_steps
                next_step = (res.start_step or 0) + res.steps
                written = _batches_written(res.rank_dir, res.steps, next_step)
                parts.append(
                    f"r{r}={res.steps}/{'?' if expected is None else expected} "
                    f"(written {written}) wait={res.wait_time_ratio:.0%}"
                )
        line = f"[{el:6.1f}s] " + " ".join(parts) + f" samples/s={total / el:.1f}"
        if args.flink_rest:
            status = flink_job_status(args.flink_rest, manifest.job_name)
            line += " | " + status
            if not status.startswith(FLINK_UNAVAILABLE):
                last_status = status
        print(line, flush=True)
    elapsed = time.monotonic() - t0

    ok = True
    print("summary:")
    for r in ranks:
        res = results[r]
        complete = res.complete
        ok &= complete
        status = (
            "ok"
            if complete
            else f"INCOMPLETE ({printable(res.error or 'fewer steps than expected')})"
        )
        expected = res.expected_steps
        span = (
            ""
            if res.start_step is None
            else f" (steps {res.start_step}..{(res.end_step or 0) - 1})"
        )
        print(
            f"  rank {r}: steps={res.steps}/{'?' if expected is None else expected}{span} "
            f"samples={res.samples} backfilled={res.backfilled} images={res.images} "
            f"tokens={res.tokens} wait_time_ratio={res.wait_time_ratio:.3f} "
            f"{startup_and_steady(res)} {status}"
        )
    totals = summarize(list(results.values()), elapsed)
    print(f"  {total_line(totals)}")
    if args.summary_json is not None:
        Path(args.summary_json).write_text(json.dumps(totals))
    if args.flink_rest:
        status = flink_job_status(args.flink_rest, manifest.job_name)
        if status.startswith(FLINK_UNAVAILABLE) and last_status is not None:
            # the job ends by itself once every batch is acknowledged, often before this line
            status = f"{last_status} (its last answer; it no longer answers)"
        print("  " + status)
    print("result: " + ("OK" if ok else "FAILED"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
