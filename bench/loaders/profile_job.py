"""The embedded job of the loaders benchmark under async-profiler (bench/README.md, "Where the
embedded job's CPU goes (`profile.sh`)").

    python -m bench.loaders.profile_job --agent .../libasyncProfiler.so
        [--samples 8000] [--batch-size 8] [--cores C] [--latency-ms 50] [--jitter-ms 20]
        [--cpu 0.35:0.65] [--wall 0.65:0.9] [--cpu-event auto] [--cpu-interval 5ms]
        [--wall-interval 50ms] [--trace CLASS.METHOD --trace-window 0.9:0.98] [--jsonl-local]
        [--raw-dir .stoker/bench-profile] [--out bench/results]

The same dataset, local S3 server (latency on every GET) and stoker-embedded contender as
``loaders.sh`` pass 1 (a trainer that does not sleep), with async-profiler attached to the job's
JVM twice, one session after the other, at fractions of the samples consumed: a CPU profile
(``--cpu FROM:TO``) and then a wall-clock profile (``--wall FROM:TO``), both after the JIT
warm-up, and optionally a count of the calls of one Java method (``--trace``, async-profiler's
method instrumentation, every call with its stack). Meanwhile the CPU of the machine, the S3 server, the trainer's process and the JVM is
sampled every second, so the report can say how much of the cores others took. Raw files
(collapsed stacks, flame graphs, the phases' windows, Flink's metrics, the job's logs) go to
``--raw-dir`` (not committed); the summary to ``<out>/profile.md`` and ``profile.json``
(``bench/profile_breakdown.py`` makes the tables).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import psutil

from bench import profile_breakdown as pb
from bench.loaders.common import (
    BUCKET,
    POOL,
    PREFIX,
    REPO,
    Config,
    make_dataset,
    require_native_jpeg,
)
from bench.loaders.profiling import machine_cpu
from bench.loaders.run import CONTENDERS, STATE, run_contender, start_s3

NAME = "stoker-embedded"


def log(msg: str) -> None:
    print(f"[profile] {msg}", file=sys.stderr, flush=True)


def window(text: str) -> tuple[float, float]:
    a, b = (float(x) for x in text.split(":"))
    if not 0 <= a < b <= 1:
        raise argparse.ArgumentTypeError(f"{text}: want FROM:TO with 0 <= FROM < TO <= 1")
    return a, b


class Sampler:
    """Every ``interval_s``: the machine's CPU (``/proc/stat``) and the CPU seconds of the S3
    server, the job's JVM and the rest of this driver's process tree (the contender's Python
    process, the trainer); ``at(t)`` interpolates them."""

    def __init__(self, s3_pid: int, interval_s: float = 1.0) -> None:
        self.s3_pid = s3_pid
        self.interval_s = interval_s
        self.rows: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> dict[str, float]:
        row = {"unix": time.time(), "s3": 0.0, "jvm": 0.0, "trainer": 0.0}
        row.update({f"machine_{k}": v for k, v in machine_cpu().items()})
        me = psutil.Process()
        for p in me.children(recursive=True):
            try:
                t = p.cpu_times()
                cpu = t.user + t.system
                if p.pid == self.s3_pid:
                    row["s3"] += cpu
                elif "dev.stoker.job.StokerJob" in " ".join(p.cmdline()):
                    row["jvm"] += cpu
                else:
                    row["trainer"] += cpu
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return row

    def _run(self) -> None:
        while not self._stop.is_set():
            self.rows.append(self._sample())
            self._stop.wait(self.interval_s)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def between(self, t0: float, t1: float) -> dict[str, float]:
        """CPU seconds of each column between the samples nearest to ``t0`` and ``t1`` (the JVM's
        column restarts at 0 when the job starts, so it is exact only within one run)."""
        a = min(self.rows, key=lambda r: abs(r["unix"] - t0))
        b = min(self.rows, key=lambda r: abs(r["unix"] - t1))
        return {k: b[k] - a[k] for k in a}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agent", type=Path, required=True, help="libasyncProfiler.so")
    p.add_argument("--samples", type=int, default=8000, help="records in the dataset (8000)")
    p.add_argument("--batch-size", type=int, default=8, help="micro-batch size B (8)")
    p.add_argument("--cores", type=int, default=os.cpu_count(), help="cores for the job")
    p.add_argument("--latency-ms", type=int, default=50, help="time to first byte per GET (50)")
    p.add_argument("--jitter-ms", type=int, default=20, help="uniform jitter of it (20)")
    p.add_argument(
        "--cpu", type=window, default=(0.35, 0.65), help="CPU profile window (0.35:0.65)"
    )
    p.add_argument(
        "--wall", type=window, default=(0.65, 0.9), help="wall-clock profile window (0.65:0.9)"
    )
    p.add_argument(
        "--cpu-event",
        default="auto",
        help="cpu (perf_events), ctimer or itimer; auto: cpu where perf_events may see kernel "
        "code (root, or kernel.perf_event_paranoid <= 1), else ctimer, which counts a thread's "
        "system time too, at the frame that entered the kernel (auto)",
    )
    p.add_argument("--cpu-interval", default="5ms", help="CPU time per sample (5ms)")
    p.add_argument(
        "--wall-interval", default="50ms", help="wall time between two samples of a thread (50ms)"
    )
    p.add_argument(
        "--trace",
        help="count the calls of this Java method (pkg.Class.method, <init> for a constructor)",
    )
    p.add_argument(
        "--trace-window", type=window, default=(0.9, 0.98), help="where to count (0.9:0.98)"
    )
    p.add_argument(
        "--jsonl-local",
        action="store_true",
        help="read the JSONL from the local dataset directory, the images still from S3 "
        "(stoker.dataset.path local, stoker.image.root s3://...): an A/B of the source's reads",
    )
    p.add_argument("--raw-dir", type=Path, default=STATE / "bench-profile")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--command", default="", help="the command line to print in the report")
    args = p.parse_args()
    windows = [args.cpu, args.wall] + ([args.trace_window] if args.trace else [])
    for a, b in zip(sorted(windows), sorted(windows)[1:], strict=False):
        if b[0] < a[1]:
            p.error("the profile windows must not overlap (one profiler session at a time)")
    if args.cpu_event == "auto":
        paranoid = int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())
        args.cpu_event = "cpu" if os.geteuid() == 0 or paranoid <= 1 else "ctimer"
    require_native_jpeg()
    agent = args.agent.resolve()
    if not agent.is_file():
        p.error(f"{agent} not found (bench/profile.sh fetches it)")

    raw = args.raw_dir
    shutil.rmtree(raw, ignore_errors=True)
    raw.mkdir(parents=True)
    workdir = STATE / "bench-loaders"
    workdir.mkdir(parents=True, exist_ok=True)
    (STATE / "logs").mkdir(parents=True, exist_ok=True)
    before = {"unix": time.time(), "loadavg": list(os.getloadavg())}
    log(f"load average before: {before['loadavg']}")
    dataset = make_dataset(STATE / "bench-dataset", args.samples)
    s3, endpoint = start_s3(dataset, args.latency_ms, args.jitter_ms)
    log(f"local S3 server {endpoint}, GET latency {args.latency_ms} +- {args.jitter_ms} ms")
    rest_port = 18082
    profile = {
        "agent": str(agent),
        "out_dir": str(raw),
        "rest_port": rest_port,
        "phases": [
            {
                "name": "cpu",
                "event": args.cpu_event,
                "interval": args.cpu_interval,
                "from": args.cpu[0],
                "to": args.cpu[1],
            },
            {
                "name": "wall",
                "event": "wall",
                "interval": args.wall_interval,
                "from": args.wall[0],
                "to": args.wall[1],
                "flink_metrics": True,
            },
        ]
        + (
            [
                {
                    "name": "trace",
                    "event": args.trace,
                    "interval": "1",
                    "from": args.trace_window[0],
                    "to": args.trace_window[1],
                }
            ]
            if args.trace
            else []
        ),
    }
    cfg = Config(
        name=NAME,
        endpoint=endpoint,
        dataset=str(dataset),
        samples=args.samples,
        batch_size=args.batch_size,
        cores=args.cores,
        step_time_s=0.0,
        parity_lines=list(range(1, min(len(POOL), args.samples) + 1)),
        result=str(workdir / f"profile-{NAME}.result.json"),
        extra={
            **CONTENDERS[NAME][1],
            "rest_port": rest_port,
            "profile": profile,
            "job_options": {
                "stoker.dataset.path": str(dataset),
                "stoker.image.root": f"s3://{BUCKET}/{PREFIX}",
            }
            if args.jsonl_local
            else {},
        },
    )
    sampler = Sampler(s3.pid)
    try:
        log(f"{NAME}: {args.samples} samples, profiles at {args.cpu} (cpu), {args.wall} (wall)")
        summary = run_contender(NAME, cfg, args.cores, workdir, args.cpu[0], stall_s=60.0)
    finally:
        sampler.close()
        s3.terminate()
        s3.wait()
        for log_file in (workdir / "logs").glob(f"profile-{NAME}.result.*"):
            shutil.copy(log_file, raw / log_file.name)
    after = {"unix": time.time(), "loadavg": list(os.getloadavg())}
    log(f"load average after: {after['loadavg']}")
    run = json.loads((raw / "profile-run.json").read_text())
    phases = {ph["name"]: ph for ph in run["phases"]}
    missing = {"cpu", "wall"} - set(phases)
    if missing:
        raise RuntimeError(f"profile phases {sorted(missing)} did not run; see {raw}")
    for ph in phases.values():
        ph["others_cpu_s"] = sampler.between(ph["start"]["unix"], ph["end"]["unix"])
        ph["collapsed"] = Path(ph["collapsed"]).name  # relative to the raw directory
    meta = {
        "command": args.command
        or "python -m bench.loaders.profile_job " + shlex.join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(before["unix"])),
        "host": f"{os.cpu_count()} cores",
        "samples": args.samples,
        "batch_size": args.batch_size,
        "cores": args.cores,
        "latency_ms": args.latency_ms,
        "jitter_ms": args.jitter_ms,
        "cpu_event": args.cpu_event,
        "cpu_interval": args.cpu_interval,
        "wall_interval": args.wall_interval,
        "trace": args.trace,
        "jsonl_local": args.jsonl_local,
        "loadavg_before": before["loadavg"],
        "loadavg_after": after["loadavg"],
        "raw_dir": str(raw.relative_to(REPO) if raw.is_relative_to(REPO) else raw),
        "run": {k: v for k, v in summary.items() if k != "stalls"},
        "config": asdict(cfg),
    }
    # what bench/profile_breakdown.py --raw needs to make the report again
    (raw / "report-input.json").write_text(
        json.dumps({"meta": meta, "phases": phases, "flink_metrics": run["flink_metrics"]})
    )
    report, meta = pb.from_raw(raw)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "profile.md").write_text(report.markdown(meta))
    (args.out / "profile.json").write_text(json.dumps({"meta": meta, **report.data()}, indent=1))
    print((args.out / "profile.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
