"""Side-by-side benchmark of multimodal SFT loaders (bench/README.md, "Loaders side by side").

    python -m bench.loaders.run [--samples N] [--quick] [--batch-size B] [--cores C]
        [--contenders naive,dataloader,...] [--latency-ms 50] [--jitter-ms 20] [--rounds 1]
        [--steady-from 0.5] [--stall-s 20] [--s3-pause AT:SECONDS] [--s3-unanswered RATE:SECONDS]
        [--job-option KEY=VALUE ...]

Builds the dataset (N records, one image each, every image its own S3 object), starts the local
S3 server (S3Proxy, LocalS3Server) with latency on every GET, and the standalone Flink cluster if
``stoker-cluster`` runs. Pass 1 runs every contender with a trainer that does not sleep
(capacity), in ``--rounds`` rounds of alternating order (forward, reversed, ...) so that a box
that speeds up or slows down during the run favours no one, and reports the mean; pass 2 runs
them again with a trainer that sleeps B / (0.8 x the best capacity) per batch, i.e. demand at 80%
of the best contender's capacity, and reports the trainer's wait-time ratio. Rates and ratios are
taken in the steady state: the last half of each pass by default (``--steady-from``), so that a
JVM's JIT warm-up (tens of seconds of compilation on two cores) is not counted as its rate; the
rate from the first batch is reported beside it. Each contender is its
own process, sampled with psutil (whole process tree). A few records' outputs are compared across
contenders. Writes bench/results/loaders.{md,csv,png,json}.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from bench.loaders.common import (
    BUCKET,
    MAX_PIXELS,
    PAUSE_SETTLE_S,
    PAUSE_WINDOW_S,
    POOL,
    PREFIX,
    REPO,
    SHARED,
    STALL_IDLE_BELOW,
    Config,
    find_stalls,
    make_dataset,
    pause_recovery,
    require_native_jpeg,
)

#: name -> (module, settings). bench/README.md gives each one's settings and why.
CONTENDERS = {
    "naive": ("naive", {}),
    "dataloader-slow": ("dataloader", {"prefetch_factor": 4}),
    "dataloader": (
        "dataloader",
        {"fast": True, "fetch_threads": 8, "prefetch_factor": 4, "persistent_workers": True},
    ),
    # not in the default list: the A/B of the DataLoader's worker count (bench/README.md)
    "dataloader-2x-workers": (
        "dataloader",
        {
            "fast": True,
            "fetch_threads": 8,
            "prefetch_factor": 4,
            "persistent_workers": True,
            "workers_per_core": 2,
        },
    ),
    "ray-actors": (
        "ray_actors",
        {"fast": True, "fetch_concurrency": 32, "prefetch_batches": 4},
    ),
    "ray-data": ("ray_data", {"fast": True, "fetch_threads": 8}),
    "stoker-embedded": ("stoker_contender", {"mode": "embedded"}),
    "stoker-cluster": ("stoker_contender", {"mode": "cluster"}),
}
STATE = REPO / ".stoker"
SHM = Path("/dev/shm/stoker-bench")
CLUSTER_DIR = STATE / "bench-cluster"
CLUSTER_ENV = {
    "STOKER_CLUSTER_DIR": str(CLUSTER_DIR),
    "STOKER_REST_PORT": "18081",
    "STOKER_JM_RPC_PORT": "16123",
    "STOKER_TASKMANAGERS": "1",
    "AWS_ACCESS_KEY_ID": "stoker-local",
    "AWS_SECRET_ACCESS_KEY": "stoker-local-secret",
    "AWS_EC2_METADATA_DISABLED": "true",
}
DEFAULT_CONTENDERS = [n for n in CONTENDERS if n != "dataloader-2x-workers"]
#: The peers tuned as a careful engineer would (bench/README.md); the naive loop is the baseline
#: and dataloader-slow a reference, neither counts as the best peer.
FAIR_PEERS = ("dataloader", "ray-actors", "ray-data")
PEAKS = ("peak_memory_gib", "peak_rss_gib", "peak_pss_gib", "peak_shm_gib")
#: docs/parity.md, "Tolerance reached": on the pool's images (all decoded as Pillow decodes them)
#: Stoker's pixels equal the slow processor's (0.0), and the fast processor's differ from them by
#: a mean <= 0.00007 per image and at most two uint8 levels (0.030 in normalised units, 2/255 over
#: the smallest CLIP std). Per image, mean / max absolute difference from the naive loop (slow).
PIXEL_TOL = {"slow": (0.0, 0.0), "fast": (0.00007, 2 / 255 / 0.26130258)}


def log(msg: str) -> None:
    print(f"[loaders] {msg}", file=sys.stderr, flush=True)


def start_s3(
    dataset: Path, latency_ms: int, jitter_ms: int, unanswered: tuple[float, float] | None = None
) -> tuple[subprocess.Popen, str]:
    """LocalS3Server on a free port with the dataset uploaded to s3://bench/data; ``unanswered``
    ``(rate, seconds)``: that share of GETs, drawn per GET, gets its first byte that many seconds
    late (a server that leaves some requests unanswered)."""
    classpath = ":".join(
        [
            str(REPO / "testkit" / "target" / "stoker-testkit.jar"),
            (REPO / "testkit" / "target" / "runtime-classpath.txt").read_text().strip(),
        ]
    )
    basedir = STATE / "bench-s3"
    subprocess.run(["rm", "-rf", str(basedir)], check=True)
    out = open(STATE / "logs" / "bench-s3proxy.out", "w+")  # the server's output
    cmd = [
        "java",
        f"-Dlog.file={STATE / 'logs' / 'bench-s3proxy.log'}",
        f"-Dlog4j.configurationFile=file:{REPO / 'flink-conf' / 'log4j-s3proxy.properties'}",
        "-cp",
        classpath,
        "dev.stoker.testkit.LocalS3Server",
        "--port",
        "0",
        "--basedir",
        str(basedir),
        "--upload",
        str(dataset),
        f"s3://{BUCKET}/{PREFIX}",
        "--get-latency-ms",
        str(latency_ms),
        "--get-jitter-ms",
        str(jitter_ms),
    ]
    if unanswered:
        rate, seconds = unanswered
        cmd += ["--get-straggler-rate", str(rate), "--get-straggler-ms", str(round(seconds * 1000))]
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.time() + 600
    while time.time() < deadline:
        out.seek(0)
        for line in out.read().splitlines():
            if line.startswith("endpoint="):
                return proc, line.removeprefix("endpoint=")
        if proc.poll() is not None:
            out.seek(0)
            raise RuntimeError("the local S3 server did not start:\n" + out.read())
        time.sleep(0.2)
    raise RuntimeError("the local S3 server did not start within 600 s")


def cluster(cmd: str, *args: str) -> None:
    env = dict(os.environ, **CLUSTER_ENV)
    subprocess.run([str(REPO / "scripts" / "cluster.sh"), cmd, *args], env=env, check=True)


def cluster_pids() -> list[int]:
    return [int(p.read_text()) for p in (CLUSTER_DIR / "pid").glob("*.pid")]


class TreeSampler:
    """Memory and CPU of a process tree (plus extra processes), sampled every ``interval_s``.

    Memory, each a peak over the samples: ``peak_rss_bytes``, the sum of the processes' RSS
    (shared pages counted once per process that maps them); ``peak_pss_bytes``, the sum of their
    PSS (a shared page split among the processes that map it, so Ray's object store or a mapped
    batch file counts once); ``peak_shm_bytes``, the bytes of the files under /dev/shm/stoker-bench
    (Stoker's batch files, in RAM whether mapped or not); ``peak_bytes``, PSS + those files (a
    batch file the reader has mapped is in both). CPU is the sum over the processes of their CPU time at their last sample (a process that lives
    less than one interval is missed); ``history`` keeps (Unix time, CPU seconds so far) per
    sample, for the utilization within a time window."""

    def __init__(self, root: int, extra: list[int], interval_s: float = 0.5) -> None:
        self.root = root
        self.extra = extra
        self.interval_s = interval_s
        self.peak_bytes = 0
        self.peak_rss_bytes = 0
        self.peak_pss_bytes = 0
        self.peak_shm_bytes = 0
        self.cpu: dict[int, float] = {}
        self.start: dict[int, float] = {}
        self.history: list[tuple[float, float]] = []

    def processes(self) -> list[psutil.Process]:
        procs = []
        for pid in [self.root, *self.extra]:
            try:
                p = psutil.Process(pid)
                procs += [p, *p.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
        return procs

    def sample(self) -> None:
        shm = sum(f.stat().st_size for f in SHM.rglob("*") if f.is_file()) if SHM.exists() else 0
        rss = pss = 0
        for p in self.processes():
            try:
                with p.oneshot():
                    t = p.cpu_times()
                    mem = p.memory_full_info()
                    rss += mem.rss
                    pss += mem.pss
                    # CPU before the first sample of an extra (long-running) process is not counted
                    self.start.setdefault(p.pid, t.user + t.system if p.pid in self.extra else 0)
                    self.cpu[p.pid] = t.user + t.system
            except (psutil.NoSuchProcess, psutil.AccessDenied, FileNotFoundError):
                pass
        self.peak_bytes = max(self.peak_bytes, pss + shm)
        self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
        self.peak_pss_bytes = max(self.peak_pss_bytes, pss)
        self.peak_shm_bytes = max(self.peak_shm_bytes, shm)
        self.history.append((time.time(), self.cpu_s))

    def utilization(self, t0: float, t1: float, cores: int) -> float:
        """CPU seconds / (seconds x cores) between the first and the last sample in [t0, t1]."""
        inside = [(t, c) for t, c in self.history if t0 <= t <= t1]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return float("nan")
        (ta, ca), (tb, cb) = inside[0], inside[-1]
        return (cb - ca) / ((tb - ta) * cores)

    @property
    def cpu_s(self) -> float:
        return sum(v - self.start.get(pid, 0) for pid, v in self.cpu.items())


def keep_logs(cfg: Config, logs_dir: Path) -> list[str]:
    """Copies the run's job and Flink logs (``<result>.job.log``, ``<result>.flink.log``: Stoker
    writes them, the Python contenders none) into ``logs_dir``; their names there."""
    logs_dir.mkdir(parents=True, exist_ok=True)
    kept = []
    for suffix in (".job.log", ".flink.log"):
        log_file = Path(cfg.result).with_suffix(suffix)
        if log_file.exists():
            shutil.copy(log_file, logs_dir / log_file.name)
            kept.append(log_file.name)
    return kept


def dump_threads(pids: list[int], logs_dir: Path, label: str) -> list[str]:
    """A thread dump (``jcmd <pid> Thread.print -l``) of each Java process among ``pids`` into
    ``logs_dir/<label>.<pid>.threads.txt``; the names written. Python processes are skipped (no
    dump tool in the bench venv)."""
    logs_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for pid in pids:
        try:
            if psutil.Process(pid).name() != "java":
                continue
        except psutil.NoSuchProcess:
            continue
        out = logs_dir / f"{label}.{pid}.threads.txt"
        try:
            done = subprocess.run(
                ["jcmd", str(pid), "Thread.print", "-l"], capture_output=True, text=True, timeout=60
            )
            out.write_text(done.stdout + done.stderr)
        except subprocess.TimeoutExpired:  # e.g. a stopped process: the run goes on
            out.write_text(f"jcmd {pid} Thread.print did not answer within 60 s\n")
        written.append(out.name)
    return written


def run_contender(
    name: str,
    cfg: Config,
    cores: int,
    workdir: Path,
    steady_from: float,
    stall_s: float,
    s3_pid: int | None = None,
    s3_pause: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """Runs one contender to its end, sampling its process tree; its result row. While it runs,
    a window of ``stall_s`` seconds with its CPU below ``STALL_IDLE_BELOW`` of the cores (a stall
    in the making: a pass never idles that long) has every Java process of the tree and the S3
    server (``s3_pid``) thread-dumped into ``workdir/logs``, once per run (not for an idle window
    that an injected pause explains), so that a stall comes with what its threads waited on. With
    ``s3_pause`` ``(at_s, for_s)`` the S3 server is stopped (SIGSTOP) ``at_s`` seconds after the
    launch for ``for_s`` seconds (SIGCONT), and the row gets ``s3_pause`` (:func:`pause_recovery`;
    a gap the pause explains is not a stall). Interrupted, it kills the contender's process tree
    (and resumes a paused S3 server)."""
    module, _ = CONTENDERS[name]
    path = workdir / f"{name}.config.json"
    path.write_text(json.dumps(asdict(cfg)))
    env = dict(os.environ, PYTHONPATH=f"{REPO}:{REPO / 'python'}", **CLUSTER_ENV)
    cmd = [sys.executable, "-m", f"bench.loaders.{module}", str(path)]
    if cores < (os.cpu_count() or cores):
        cmd = ["taskset", "-c", f"0-{cores - 1}", *cmd]
    extra = cluster_pids() if name == "stoker-cluster" else []
    launch = time.time()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env)
    sampler = TreeSampler(proc.pid, extra)
    dumps: list[str] = []
    paused = resumed = None
    try:
        while proc.poll() is None:
            sampler.sample()
            now = time.time()
            if s3_pause and s3_pid and paused is None and now - launch >= s3_pause[0]:
                os.kill(s3_pid, signal.SIGSTOP)
                paused = time.time()
                log(f"  S3 server stopped (SIGSTOP) for {s3_pause[1]:.0f} s")
            if paused is not None and resumed is None and now - paused >= s3_pause[1]:
                os.kill(s3_pid, signal.SIGCONT)
                resumed = time.time()
                log("  S3 server resumed (SIGCONT)")
            pausing = paused is not None and (resumed is None or now - resumed < stall_s)
            if (
                not dumps
                and not pausing  # idle because the server is stopped: nothing to learn
                and now - launch > stall_s
                and sampler.utilization(now - stall_s, now, cores) < STALL_IDLE_BELOW
            ):
                tree = [p.pid for p in sampler.processes()] + ([s3_pid] if s3_pid else [])
                label = Path(cfg.result).name.removesuffix(".result.json")
                dumps = dump_threads(tree, workdir / "logs", label) or ["(no Java process)"]
                log(
                    f"  {name} idled {stall_s:.0f} s (CPU below {STALL_IDLE_BELOW:.0%}); dumps: {dumps}"
                )
            time.sleep(sampler.interval_s)
    finally:  # interrupted (Ctrl-C, SIGTERM): no contender outlives the run, e.g. a reader
        if paused is not None and resumed is None:  # the run ended (or failed) during the pause
            os.kill(s3_pid, signal.SIGCONT)
            resumed = time.time()
        if proc.poll() is None:  # left waiting that would read the next run's batches
            for child in psutil.Process(proc.pid).children(recursive=True):
                try:
                    child.kill()
                except psutil.NoSuchProcess:
                    pass
            proc.kill()
            proc.wait()
    wall = time.time() - launch
    logs = keep_logs(cfg, workdir / "logs") + [d for d in dumps if d.endswith(".txt")]
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed (exit {proc.returncode}); logs: {logs}")
    result = json.loads(Path(cfg.result).read_text())
    summary = summarize(result, launch, steady_from)
    window_from, window_to = summary.pop("steady_window_unix")
    stalls = find_stalls(
        result["arrivals_unix"], lambda t0, t1: sampler.utilization(t0, t1, cores), stall_s
    )
    pause = None
    if paused is not None:
        pause = pause_recovery(
            result["arrivals_unix"], result["batch_sizes"], paused, resumed, stalls, stall_s
        )
        stalls = pause.pop("stalls")
        log(
            f"  S3 pause: {pause['rate_before']:.2f} samples/s in the {PAUSE_WINDOW_S:.0f} s "
            f"before, {pause['rate_after']:.2f} from {PAUSE_SETTLE_S:.0f} s after the resume "
            f"({pause['recovered']:.2f}x); longest gap between batches over the pause "
            f"{pause['longest_gap_s']:.1f} s"
        )
    for st in stalls:
        log(
            f"  STALL: {name} delivered no batch for {st['gap_s']:.1f} s from "
            f"{time.strftime('%H:%M:%S', time.gmtime(st['from_unix']))} UTC with its CPU at "
            f"{100 * st['cpu_utilization']:.0f}%; logs: {logs}"
        )
    return dict(
        summary,
        stalls=stalls,
        s3_pause=pause,
        logs=logs,
        peak_memory_gib=sampler.peak_bytes / 2**30,
        peak_rss_gib=sampler.peak_rss_bytes / 2**30,
        peak_pss_gib=sampler.peak_pss_bytes / 2**30,
        peak_shm_gib=sampler.peak_shm_bytes / 2**30,
        cpu_utilization=sampler.cpu_s / (wall * cores),
        cpu_utilization_steady=sampler.utilization(window_from, window_to, cores),
        wall_s=wall,
    )


def mean_of_rounds(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One contender's pass-1 row from its rounds: the mean of each float measurement, the
    maximum of each peak memory, each round's samples/s in ``samples_per_s_rounds``, and every
    round's stalls and log files."""
    row = {
        k: float(np.mean([r[k] for r in results])) if isinstance(v, float) else v
        for k, v in results[0].items()
    }
    for k in PEAKS:
        row[k] = max(r[k] for r in results)
    row["samples_per_s_rounds"] = [r["samples_per_s"] for r in results]
    row["samples_rounds"] = [r["samples"] for r in results]
    row["stalls"] = [
        dict(st, run=f"pass1 round {k + 1}") for k, r in enumerate(results) for st in r["stalls"]
    ]
    row["logs"] = [name for r in results for name in r["logs"]]
    row["s3_pause"] = [r["s3_pause"] for r in results]
    return row


def compute_ceiling(cores: int) -> float:
    """Images/s that ``cores`` fully used cores reach with Stoker's image stage alone (decode
    with the decoder the job uses, resize, normalize, patchify; no I/O, no Flink, no tokenizer):
    TransformCeilingBench on ``cores`` threads in a tight loop over the dataset's image pool
    (which the dataset cycles through uniformly); cores x 1000 / (median CPU ms per image, GC and
    JIT included), so that whatever else runs on the box does not lower it."""
    pool = STATE / "bench-pool"
    subprocess.run(["rm", "-rf", str(pool)], check=True)
    pool.mkdir(parents=True)
    for i, rel in enumerate(POOL):
        (pool / f"{i:02d}-{Path(rel).name}").write_bytes((SHARED / rel).read_bytes())
    classpath = ":".join(
        [
            str(REPO / "operators" / "target" / "test-classes"),
            str(REPO / "operators" / "target" / "classes"),
            (REPO / "operators" / "target" / "test-classpath.txt").read_text().strip(),
        ]
    )
    cmd = ["java", "-Xms2g", "-Xmx2g", "-XX:+UseParallelGC", "-cp", classpath]
    cmd += ["dev.stoker.operators.image.TransformCeilingBench", "pool", str(pool)]
    cmd += [str(MAX_PIXELS), "3", "1", "5", str(cores), "tj"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result = next(line for line in out.splitlines() if line.startswith("RESULT"))
    fields = dict(kv.split("=", 1) for kv in result.split()[1:])
    return cores * 1000.0 / float(fields["ms_per_img"])


def summarize(result: dict[str, Any], launch: float, steady_from: float) -> dict[str, Any]:
    """Steady-state rates (from the batch that completes the first ``steady_from`` of the
    samples to the last batch) and, for comparison, the rate from the first batch to the last;
    time to first batch (from the process launch); and the trainer's wait-time ratio (data-wait
    time / elapsed time) in the same steady-state window and from the first batch to the end."""
    arrivals = np.asarray(result["arrivals_unix"])
    sizes = np.asarray(result["batch_sizes"])
    per_image = result["images"] / max(result["samples"], 1)
    k = int(np.searchsorted(np.cumsum(sizes), steady_from * sizes.sum()))
    k = min(k, len(arrivals) - 2)
    span = arrivals[-1] - arrivals[k]
    samples_per_s = sizes[k + 1 :].sum() / span if span > 0 else float("nan")
    whole = arrivals[-1] - arrivals[0]
    waits = np.asarray(result["waits_s"])
    return {
        "samples": int(result["samples"]),
        "samples_per_s": float(samples_per_s),
        "samples_per_s_from_first_batch": float(sizes[1:].sum() / whole)
        if whole > 0
        else float("nan"),
        "images_per_s": float(samples_per_s * per_image),
        "time_to_first_batch_s": float(arrivals[0] - launch),
        "wait_time_ratio": float(waits[k + 1 :].sum() / (result["end_unix"] - arrivals[k])),
        "wait_time_ratio_from_first_batch": float(
            waits[1:].sum() / (result["end_unix"] - arrivals[0])
        ),
        "steady_window_unix": (float(arrivals[k]), float(arrivals[-1])),
    }


def processor(name: str) -> str:
    """``fast`` for the contenders with the fast (torchvision) image processor, else ``slow``
    (the Pillow processor, and Stoker, which matches it)."""
    return "fast" if CONTENDERS[name][1].get("fast") else "slow"


def reference(names: list[str]) -> str:
    """The contender the others are compared with: the naive loop, else the first one with the
    slow processor, else the first one."""
    if "naive" in names:
        return "naive"
    return next((n for n in names if processor(n) == "slow"), names[0])


def parity(names: list[str], workdir: Path) -> list[dict[str, Any]]:
    """Each contender's parity samples against the naive loop's (the HF processor with the slow
    image processor, called directly): ids, labels and grids exactly, pixels within the
    tolerance docs/parity.md states for the contender's processor (:data:`PIXEL_TOL`)."""
    ref_name = reference(names)
    ref = np.load(workdir / f"pass1-round1-{ref_name}.result.json.parity.npz")
    lines = sorted({k.split("/")[0] for k in ref.files}, key=int)
    rows = []
    for name in names:
        other = np.load(workdir / f"pass1-round1-{name}.result.json.parity.npz")
        exact, mean_px, max_px, missing = True, 0.0, 0.0, 0
        for line in lines:
            if f"{line}/pixel_values" not in other.files:
                missing += 1
                continue
            for key in ("input_ids", "labels", "image_grid_thw"):
                exact &= np.array_equal(ref[f"{line}/{key}"], other[f"{line}/{key}"])
            a, b = ref[f"{line}/pixel_values"], other[f"{line}/pixel_values"]
            if a.shape != b.shape:
                exact = False
                continue
            d = np.abs(a.astype(np.float64) - b)
            mean_px, max_px = max(mean_px, float(d.mean())), max(max_px, float(d.max()))
        # one fast and one slow processor: the fast one's tolerance; the same processor: equal
        kind = "fast" if processor(name) != processor(ref_name) else "slow"
        mean_tol, max_tol = PIXEL_TOL[kind]
        ok = exact and missing == 0 and mean_px <= mean_tol and max_px <= max_tol
        rows.append(
            {
                "contender": name,
                "reference": ref_name,
                "image_processor": processor(name),
                "pixel_mean_tolerance": mean_tol,
                "pixel_max_tolerance": max_tol,
                "records": len(lines) - missing,
                "ids_labels_grids_identical": exact,
                "pixel_max_mean_abs": mean_px,
                "pixel_max_abs": max_px,
                "ok": ok,
            }
        )
    return rows


def ratio_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Each Stoker row over the best fair peer (:data:`FAIR_PEERS`, by steady samples/s), at
    steady state and from the first batch; none when either is missing."""
    peers = [r for r in rows if r["contender"] in FAIR_PEERS]
    if not peers:
        return []
    best = max(peers, key=lambda r: r["samples_per_s"])
    out = [""]
    for r in rows:
        if r["contender"].startswith("stoker"):
            out.append(
                f"{r['contender']} / best fair peer ({best['contender']}): "
                f"{r['samples_per_s'] / best['samples_per_s']:.2f}x at steady state, "
                f"{r['samples_per_s_from_first_batch'] / best['samples_per_s_from_first_batch']:.2f}x "
                f"from the first batch; peak PSS {r['peak_pss_gib'] / best['peak_pss_gib']:.2f}x."
            )
    return out


def stall_lines(rows: list[dict[str, Any]], meta: dict[str, Any]) -> list[str]:
    """The results' "Stalls" paragraph: each stall (run, when, how long, CPU) or that there was
    none, and where the runs' logs are."""
    lines = [
        "",
        f"Stalls (a gap of more than {meta['stall_s']:.0f} s between two batches with the "
        f"contender's CPU below {STALL_IDLE_BELOW:.0%}; any stall fails the benchmark): ",
    ]
    stalls = [(r["contender"], st) for r in rows for st in r["stalls"]]
    if not stalls:
        lines[-1] += "none."
    for name, st in stalls:
        lines.append(
            f"* **{name}**, {st['run']}: no batch for {st['gap_s']:.1f} s from "
            f"{time.strftime('%H:%M:%S', time.gmtime(st['from_unix']))} UTC, CPU "
            f"{100 * st['cpu_utilization']:.0f}%"
        )
    lines += [
        "",
        "Each Stoker run's job and Flink logs (and the standalone cluster's) are kept in "
        "`bench/results/loaders-logs/` (not committed), named after the run "
        "(`pass1-round<k>-<contender>`, `pass2-<contender>`).",
    ]
    return lines


def delivery_lines(rows: list[dict[str, Any]], meta: dict[str, Any]) -> list[str]:
    """The results' paragraph on the injected unanswered GETs (``--s3-unanswered``) and the job
    options given (``--job-option``), if any, and on every pass-1 round that delivered fewer
    samples than the dataset has records (a back-filled row: its record was dead-lettered)."""
    lines = []
    if meta.get("s3_unanswered"):
        rate, seconds = meta["s3_unanswered"]
        lines += [
            "",
            f"S3 server leaving {rate:.0%} of the GETs (drawn per GET; the JSONL's included, which "
            f"only Stoker reads from it) without a first byte for {seconds:g} s.",
        ]
    if meta.get("job_options"):
        given = ", ".join(f"`{k}={v}`" for k, v in meta["job_options"].items())
        lines += ["", f"Stoker's job options given: {given}."]
    short = [
        (r["contender"], k, n)
        for r in rows
        for k, n in enumerate(r.get("samples_rounds", []))
        if n < meta["samples"]
    ]
    if short:
        lines += [
            "",
            "Samples not delivered (their records dead-lettered, their rows back-filled):",
        ]
        lines += [f"* **{name}**, round {k + 1}: {n} of {meta['samples']}" for name, k, n in short]
    return lines


def pause_lines(rows: list[dict[str, Any]], meta: dict[str, Any]) -> list[str]:
    """The results' paragraph on the injected S3 pause (``--s3-pause``), if there was one: per
    contender and round, the rate before the pause and after the resume, and the longest gap
    between batches over it."""
    if not meta.get("s3_pause"):
        return []
    at, length = meta["s3_pause"]
    lines = [
        "",
        f"S3 server paused (SIGSTOP) {at:.0f} s after each pass-1 launch for {length:.0f} s: "
        f"samples/s in the {PAUSE_WINDOW_S:.0f} s before the pause and in {PAUSE_WINDOW_S:.0f} s "
        f"from {PAUSE_SETTLE_S:.0f} s after the resume, and the longest time between two batches "
        "over the pause (not counted as a stall unless it went on for the stall threshold after "
        "the resume):",
    ]
    for r in rows:
        for k, pause in enumerate(r["s3_pause"]):
            if pause is None:
                lines.append(f"* **{r['contender']}**, round {k + 1}: ended before the pause")
                continue
            lines.append(
                f"* **{r['contender']}**, round {k + 1}: {pause['rate_before']:.2f} before, "
                f"{pause['rate_after']:.2f} after ({pause['recovered']:.2f}x), longest gap "
                f"{pause['longest_gap_s']:.1f} s"
            )
    return lines


def write_results(out: Path, rows: list[dict[str, Any]], checks: list[dict[str, Any]], meta: dict):
    out.mkdir(parents=True, exist_ok=True)
    cols = [
        "contender",
        "samples_per_s",
        "samples_per_s_from_first_batch",
        "images_per_s",
        "time_to_first_batch_s",
        "peak_rss_gib",
        "peak_pss_gib",
        "peak_shm_gib",
        "peak_memory_gib",
        "cpu_utilization",
        "cpu_utilization_steady",
        "wait_time_ratio_at_80pct",
        "wait_time_ratio_at_80pct_from_first_batch",
        "samples",
        "pass2_samples",
    ]
    with (out / "loaders.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()})
    (out / "loaders.json").write_text(json.dumps({"meta": meta, "rows": rows, "parity": checks}))
    best = max(r["samples_per_s"] for r in rows)
    lines = [
        f"Measured {meta['date']} on {meta['host']}: {meta['samples']} samples (pass 2: "
        f"{meta['pass2_samples']}), pass 1 in {meta['pass1_rounds']} rounds of alternating "
        f"order (samples/s: mean, and each round in brackets), micro-batch "
        f"{meta['batch_size']}, {meta['cores']} cores, steady state = the last "
        f"{100 * (1 - meta['steady_from']):.0f}% of each pass's samples, "
        f"GET latency {meta['latency_ms']} +- {meta['jitter_ms']} ms, max_pixels "
        f"{meta['max_pixels']}; pass-2 step time {meta['step_time_s'] * 1000:.0f} ms "
        f"(demand = 80% of the best capacity, {best:.2f} samples/s).",
        "",
        f"Compute ceiling: {meta['compute_ceiling_images_per_s']:.2f} images/s (Stoker's image stage "
        f"alone on {meta['cores']} fully used cores, from CPU time: libjpeg-turbo/ImageIO decode, "
        "resize, normalize, patchify; no I/O, no Flink, no tokenizer).",
        "",
        "| contender | samples/s: steady state | samples/s: from the first batch | images/s "
        "| x naive | x compute ceiling | time to first batch "
        "| peak RSS | peak PSS | peak PSS + batch files "
        "| CPU utilization: whole run (steady state) "
        "| wait-time ratio at 80% demand: steady state (from the first batch) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    naive = next((r["samples_per_s"] for r in rows if r["contender"] == "naive"), float("nan"))
    for r in rows:
        lines.append(
            f"| {r['contender']} | {r['samples_per_s']:.2f} "
            f"({', '.join(f'{x:.2f}' for x in r['samples_per_s_rounds'])}) "
            f"| {r['samples_per_s_from_first_batch']:.2f} "
            f"| {r['images_per_s']:.2f} "
            f"| {r['samples_per_s'] / naive:.1f}x "
            f"| {r['images_per_s'] / meta['compute_ceiling_images_per_s']:.2f}x "
            f"| {r['time_to_first_batch_s']:.1f} s "
            f"| {r['peak_rss_gib']:.2f} GiB | {r['peak_pss_gib']:.2f} GiB "
            f"| {r['peak_memory_gib']:.2f} GiB | {100 * r['cpu_utilization']:.0f}% "
            f"({100 * r['cpu_utilization_steady']:.0f}%) "
            f"| {100 * r['wait_time_ratio_at_80pct']:.1f}% "
            f"({100 * r['wait_time_ratio_at_80pct_from_first_batch']:.1f}%) |"
        )
    lines += ratio_lines(rows)
    lines += stall_lines(rows, meta)
    lines += pause_lines(rows, meta)
    lines += delivery_lines(rows, meta)
    lines += [
        "",
        "Peak RSS: the highest sum of the RSS of the contender's processes (shared pages counted "
        "in every process that maps them); peak PSS: the same with PSS (a shared page split among "
        "its processes); peak PSS + batch files: PSS plus Stoker's batch files in /dev/shm "
        "(the memory measure of the runs before; a mapped batch file counts in both). Sampled "
        "every 0.5 s with psutil over the whole process tree.",
        "",
        "| contender | image processor | records compared with "
        + checks[0]["reference"]
        + " | ids, labels, grids | pixels: worst per-image mean abs / max abs "
        "| tolerance (docs/parity.md): mean / max | within it |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in checks:
        tol = (
            "identical"
            if c["pixel_max_tolerance"] == 0
            else f"{c['pixel_mean_tolerance']:.2g} / {c['pixel_max_tolerance']:.3f}"
        )
        lines.append(
            f"| {c['contender']} | {c['image_processor']} | {c['records']} | "
            f"{'identical' if c['ids_labels_grids_identical'] else 'DIFFER'} | "
            f"{c['pixel_max_mean_abs']:.2g} / {c['pixel_max_abs']:.2g} | {tol} | "
            f"{'yes' if c['ok'] else 'NO'} |"
        )
    (out / "loaders.md").write_text("\n".join(lines) + "\n")
    plot(out / "loaders.png", rows, meta)


def plot(path: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["contender"] for r in rows]
    panels = [
        ("samples_per_s", "samples/s (steady state)", 1),
        ("time_to_first_batch_s", "time to first batch (s)", 1),
        ("peak_pss_gib", "peak PSS, process tree (GiB)", 1),
        ("wait_time_ratio_at_80pct", "trainer wait-time ratio at 80% demand (%)", 100),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(18, 4.5))
    for ax, (key, title, scale) in zip(axes, panels, strict=True):
        values = [r[key] * scale for r in rows]
        bars = ax.bar(names, values, color=["#888" if "stoker" not in n else "#d62" for n in names])
        ax.bar_label(bars, fmt="%.2f" if scale == 1 else "%.0f")
        ax.set_title(title)
        ax.tick_params(axis="x", rotation=45)
    fig.suptitle(
        f"Loaders side by side: {meta['samples']} samples, B={meta['batch_size']}, "
        f"{meta['cores']} cores, S3 GET {meta['latency_ms']} +- {meta['jitter_ms']} ms"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=6000, help="records in the dataset (6000)")
    p.add_argument("--pass2-samples", type=int, help="records read in pass 2 (default: half)")
    p.add_argument("--quick", action="store_true", help="96 samples, a smoke test")
    p.add_argument("--batch-size", type=int, default=8, help="micro-batch size B (8)")
    p.add_argument("--cores", type=int, default=os.cpu_count(), help="cores for each contender")
    p.add_argument(
        "--contenders",
        default=",".join(DEFAULT_CONTENDERS),
        help=f"comma-separated names ({','.join(DEFAULT_CONTENDERS)}); also: "
        + ",".join(sorted(set(CONTENDERS) - set(DEFAULT_CONTENDERS))),
    )
    p.add_argument("--latency-ms", type=int, default=50, help="time to first byte per GET (50)")
    p.add_argument("--jitter-ms", type=int, default=20, help="uniform jitter of it (20)")
    p.add_argument("--rounds", type=int, default=1, help="pass-1 rounds, alternating order (1)")
    p.add_argument(
        "--steady-from",
        type=float,
        default=0.5,
        help="the steady state starts at the batch that completes this fraction of a pass (0.5)",
    )
    p.add_argument(
        "--stall-s",
        type=float,
        default=20.0,
        help="a gap of more than this many seconds between batches with the contender's CPU "
        f"below {STALL_IDLE_BELOW:.0%} fails the benchmark as a stall (20)",
    )
    p.add_argument(
        "--s3-pause",
        metavar="AT:SECONDS",
        help="stop the S3 server (SIGSTOP) AT seconds after each pass-1 contender's launch for "
        "SECONDS, then resume it; each row then gives the rate in the "
        f"{PAUSE_WINDOW_S:.0f} s before the pause and after the resume (a server stalled "
        "mid-run: does the loader come back to its rate?)",
    )
    p.add_argument(
        "--s3-unanswered",
        metavar="RATE:SECONDS",
        help="the S3 server leaves a share RATE (0..1) of the GETs, drawn per GET, without a "
        "first byte for SECONDS (a server that leaves some requests unanswered; the collapse of "
        "issue 37)",
    )
    p.add_argument(
        "--job-option",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="a Flink or stoker.* option for the Stoker contenders' job (repeatable), e.g. "
        "stoker.s3.read-timeout=30s",
    )
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    # SIGTERM unwinds like Ctrl-C: the contender and the S3 server are stopped on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    if not 0 <= args.steady_from < 1:
        p.error("--steady-from must be in [0, 1)")
    if args.quick:
        args.samples = 96
    s3_pause = None
    if args.s3_pause:
        try:
            at, length = (float(x) for x in args.s3_pause.split(":"))
        except ValueError:
            p.error(f"--s3-pause wants AT:SECONDS, got {args.s3_pause!r}")
        if at < 0 or length <= 0:
            p.error("--s3-pause wants AT >= 0 and SECONDS > 0")
        s3_pause = (at, length)
    unanswered = None
    if args.s3_unanswered:
        try:
            rate, seconds = (float(x) for x in args.s3_unanswered.split(":"))
        except ValueError:
            p.error(f"--s3-unanswered wants RATE:SECONDS, got {args.s3_unanswered!r}")
        if not 0 < rate <= 1 or seconds <= 0:
            p.error("--s3-unanswered wants 0 < RATE <= 1 and SECONDS > 0")
        unanswered = (rate, seconds)
    job_options = {}
    for option in args.job_option:
        key, sep, value = option.partition("=")
        if not sep or not key:
            p.error(f"--job-option wants KEY=VALUE, got {option!r}")
        job_options[key] = value
    names = args.contenders.split(",")
    if any(name.startswith("stoker") for name in names):
        require_native_jpeg()
    unknown = set(names) - set(CONTENDERS)
    if unknown:
        p.error(f"unknown contenders {sorted(unknown)}; known: {', '.join(CONTENDERS)}")
    pass2 = args.pass2_samples or args.samples // 2
    workdir = STATE / "bench-loaders"
    shutil.rmtree(workdir / "logs", ignore_errors=True)  # the logs of this run only
    workdir.mkdir(parents=True, exist_ok=True)
    (STATE / "logs").mkdir(parents=True, exist_ok=True)
    log(f"dataset: {args.samples} records, one image object each")
    dataset = make_dataset(STATE / "bench-dataset", args.samples)
    s3, endpoint = start_s3(dataset, args.latency_ms, args.jitter_ms, unanswered)
    log(f"local S3 server {endpoint}, GET latency {args.latency_ms} +- {args.jitter_ms} ms")
    if unanswered:
        log(f"  {unanswered[0]:.0%} of GETs unanswered for {unanswered[1]:g} s")
    try:
        if "stoker-cluster" in names:
            cluster(
                "start",
                "-D",
                f"s3.endpoint={endpoint}",
                "-D",
                "s3.path.style.access=true",
                "-D",
                f"taskmanager.numberOfTaskSlots={args.cores}",
            )

        def config(name: str, samples: int, step_time_s: float, tag: str) -> Config:
            return Config(
                name=name,
                endpoint=endpoint,
                dataset=str(dataset),
                samples=samples,
                batch_size=args.batch_size,
                cores=args.cores,
                step_time_s=step_time_s,
                parity_lines=list(range(1, min(len(POOL), samples) + 1)),
                result=str(workdir / f"{tag}-{name}.result.json"),
                extra=(
                    {**CONTENDERS[name][1], "job_options": job_options}
                    if name.startswith("stoker") and job_options
                    else CONTENDERS[name][1]
                ),
            )

        rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        for k in range(args.rounds):
            for name in names if k % 2 == 0 else names[::-1]:
                log(f"pass 1 (capacity), round {k + 1} of {args.rounds}: {name}")
                cfg = config(name, args.samples, 0.0, f"pass1-round{k + 1}")
                rounds[name].append(
                    run_contender(
                        name,
                        cfg,
                        args.cores,
                        workdir,
                        args.steady_from,
                        args.stall_s,
                        s3.pid,
                        s3_pause,
                    )
                )
                log(f"  {json.dumps(rounds[name][-1])}")
        rows = {name: dict(contender=name, **mean_of_rounds(rs)) for name, rs in rounds.items()}
        best = max(r["samples_per_s"] for r in rows.values())
        step_time = args.batch_size / (0.8 * best)
        for name in names:
            log(f"pass 2 (demand 80% of {best:.2f} samples/s, step {step_time:.3f} s): {name}")
            r = run_contender(
                name,
                config(name, pass2, step_time, "pass2"),
                args.cores,
                workdir,
                args.steady_from,
                args.stall_s,
                s3.pid,
            )
            rows[name]["stalls"] = rows[name]["stalls"] + [
                dict(st, run="pass2") for st in r["stalls"]
            ]
            rows[name]["logs"] = rows[name]["logs"] + r["logs"]
            rows[name]["wait_time_ratio_at_80pct"] = r["wait_time_ratio"]
            rows[name]["wait_time_ratio_at_80pct_from_first_batch"] = r[
                "wait_time_ratio_from_first_batch"
            ]
            rows[name]["pass2_samples"] = r["samples"]
            log(
                f"  wait-time ratio {r['wait_time_ratio']:.3f} (steady state), "
                f"{r['wait_time_ratio_from_first_batch']:.3f} (from the first batch)"
            )
    finally:
        if "stoker-cluster" in names:
            cluster("stop")
            if (CLUSTER_DIR / "log").exists():
                shutil.copytree(
                    CLUSTER_DIR / "log", workdir / "logs" / "cluster", dirs_exist_ok=True
                )
        s3.terminate()
        s3.wait()
        for name in ("bench-s3proxy.log", "bench-s3proxy.out"):  # the S3 server's own logs
            if (STATE / "logs" / name).exists():
                (workdir / "logs").mkdir(parents=True, exist_ok=True)
                shutil.copy(STATE / "logs" / name, workdir / "logs" / name)
        kept = args.out / "loaders-logs"
        shutil.rmtree(kept, ignore_errors=True)
        if (workdir / "logs").exists():
            shutil.copytree(workdir / "logs", kept)
            log(f"every contender's job and Flink logs: {kept}")
    checks = parity(names, workdir)
    log(f"compute ceiling (image stage alone, {args.cores} threads)")
    ceiling = compute_ceiling(args.cores)
    log(f"  {ceiling:.2f} images/s")
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "host": f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}",
        "samples": args.samples,
        "pass2_samples": pass2,
        "pass1_rounds": args.rounds,
        "steady_from": args.steady_from,
        "batch_size": args.batch_size,
        "cores": args.cores,
        "latency_ms": args.latency_ms,
        "jitter_ms": args.jitter_ms,
        "stall_s": args.stall_s,
        "s3_pause": s3_pause,
        "s3_unanswered": unanswered,
        "job_options": job_options,
        "max_pixels": MAX_PIXELS,
        "step_time_s": step_time,
        "compute_ceiling_images_per_s": ceiling,
    }
    write_results(args.out, list(rows.values()), checks, meta)
    print((args.out / "loaders.md").read_text())
    stalled = [r["contender"] for r in rows.values() if r["stalls"]]
    if stalled:
        log(f"FAILED: stalls in {', '.join(stalled)} (bench/results/loaders.md, 'Stalls')")
    return 0 if all(c["ok"] for c in checks) and not stalled else 1


if __name__ == "__main__":
    sys.exit(main())
