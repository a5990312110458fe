"""The operator's workflow on a real standalone Flink cluster (``scripts/cluster.sh``).

A JobManager and two TaskManagers run as separate JVMs; the job jar is submitted with the Flink
CLI (``flink run -d``) and a simulated trainer (``python -m stoker_tools.simulate --record``) reads the
batches. First an uninterrupted run gives the reference sequence of (step, rank, sha256 of the
batch file). Then the same job runs again, with a trainer slower than the pipeline (the job waits
at its prefetch bound), while the test

1. checks that the job's subtasks are spread over both TaskManagers,
2. kills a TaskManager with SIGKILL and starts a new one (the job restores its latest checkpoint
   and runs again while the trainer keeps reading),
3. lets the trainer stop after step ``STOP_AFTER`` (``--stop-after-step``: a trainer restarted
   from its checkpoint at that step), waits for the job to idle at the prefetch bound and reads
   the tuning metrics and the job configuration through the REST API,
4. takes a savepoint (``flink savepoint``, while the trainer is down) and cancels the job,
5. resumes it from the savepoint with a different parallelism and the trainer's step
   (``flink run -s ... -p 3 ... --stoker.resume-step STOP_AFTER``) and starts a new trainer with
   ``--start-step STOP_AFTER+1``,

and the two trainers together must have read every (step, rank) exactly once, identical to the
reference, leaving no batch file behind. Every process the test starts is stopped at the end,
also on failure.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from stoker_tools.flink_rest import JobRest

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED = REPO_ROOT.parent / "shared" / "data"
CLUSTER = REPO_ROOT / "scripts" / "cluster.sh"
JAR = REPO_ROOT / "job" / "target" / "stoker-job.jar"
JOB_NAME = "stoker-e2e"
WORLD_SIZE = 2
MICRO_BATCH = 2
# RECORDS, PREFETCH_DEPTH, STOP_AFTER and SLOW_STEP_MS can be changed through the environment, and
# STOKER_E2E_KILL_WHEN_PREFETCHED=1 kills the TaskManager only once every rank has PREFETCH_DEPTH
# batches written ahead: the measurement of a prefetch that covers the recovery (docs/operator-guide.md "Failures
# and recovery"), e.g. STOKER_E2E_RECORDS=120 STOKER_E2E_PREFETCH_DEPTH=6 STOKER_E2E_STOP_AFTER=20
# STOKER_E2E_STEP_MS=3000 STOKER_E2E_KILL_WHEN_PREFETCHED=1.
RECORDS = int(os.environ.get("STOKER_E2E_RECORDS", "64"))
NUM_STEPS = -(-RECORDS // (WORLD_SIZE * MICRO_BATCH))  # 16 by default
PREFETCH_DEPTH = int(os.environ.get("STOKER_E2E_PREFETCH_DEPTH", "4"))
# The interrupted trainer stops after this step; the resumed job produces the steps after it.
STOP_AFTER = int(os.environ.get("STOKER_E2E_STOP_AFTER", "9"))
# Simulated compute per step of the interrupted trainer: slower than the pipeline, so the job
# waits at its prefetch bound, and slow enough that the TaskManager is killed long before the
# trainer reaches STOP_AFTER (the restored job has to produce the steps up to it).
SLOW_STEP_MS = int(os.environ.get("STOKER_E2E_STEP_MS", "1000"))
KILL_WHEN_PREFETCHED = os.environ.get("STOKER_E2E_KILL_WHEN_PREFETCHED") == "1"
SINK = "arrow-shm-sink__Writer"
# The recovery settings of flink-conf/config.yaml (a killed TaskManager declared lost after 2
# heartbeats of 1 s, the first restart 3 s after the failure): the cluster must run with them. How
# long the trainer then waits for a batch after the kill is printed, not asserted (a timing on a
# loaded 2-core box is a benchmark's business): 7.7-9.4 s measured with these settings, 26.7 s with
# Flink's defaults (docs/operator-guide.md, "Failures").
RECOVERY_SETTINGS = {
    "heartbeat.interval": "1s",
    "heartbeat.timeout": "10s",
    "restart-strategy.type": "exponential-delay",
    "restart-strategy.exponential-delay.initial-backoff": "3s",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(
    what: str,
    timeout_s: float,
    check: Callable[[], Any],
    interval_s: float = 0.5,
    explain: Callable[[], str] | None = None,
) -> Any:
    """Poll ``check`` until it returns a truthy value; a REST call that fails counts as not yet.

    On timeout the test fails with ``what``, the last REST error and ``explain()`` (the state of
    the job waited for), so a CI log says why.
    """
    deadline = time.monotonic() + timeout_s
    last_error: OSError | None = None
    while True:
        try:
            value = check()
        except OSError as e:  # urllib's URLError/HTTPError: the JobManager is busy, or a 404
            value, last_error = None, e
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f" (last REST error: {last_error})" if last_error else ""
            if explain is not None:
                detail += "\n" + explain()
            pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}{detail}")
        time.sleep(interval_s)


class Cluster(JobRest):
    """scripts/cluster.sh with its own run directory and ports, and the REST API."""

    def __init__(self, run_dir: Path, shm: Path) -> None:
        self.run_dir = run_dir
        #: where the test's jobs write their batches (removed after the cluster stopped)
        self.shm = shm
        self.rest_port = _free_port()
        self.env = dict(
            os.environ,
            STOKER_CLUSTER_DIR=str(run_dir),
            STOKER_REST_PORT=str(self.rest_port),
            STOKER_JM_RPC_PORT=str(_free_port()),
        )

    def script(self, *args: str, timeout_s: float = 180) -> str:
        proc = subprocess.run(
            [str(CLUSTER), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if proc.returncode != 0:
            pytest.fail(
                f"scripts/cluster.sh {' '.join(args[:3])} failed ({proc.returncode}):\n"
                f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return proc.stdout

    def flink(self, *args: str, timeout_s: float = 180) -> str:
        return self.script("flink", *args, timeout_s=timeout_s)

    def rest(self, path: str) -> Any:
        return self.rest_on(self.rest_port, path)

    @staticmethod
    def rest_on(port: int, path: str) -> Any:
        """GET ``path`` from the REST API on 127.0.0.1:``port`` (a JobManager's), parsed JSON."""
        url = f"http://127.0.0.1:{port}{path}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.loads(resp.read().decode("utf-8"))

    def vertex(self, jid: str, name_part: str) -> dict[str, Any]:
        for v in self.job(jid)["vertices"]:
            if name_part in v["name"]:
                return dict(v)
        raise AssertionError(f"no vertex named like {name_part!r} in job {jid}")

    def metrics(self, jid: str, vertex_id: str, prefix: str, agg: str = "sum") -> dict[str, float]:
        """``agg`` (sum or max) over subtasks of every metric of the vertex starting with ``prefix``.

        Subtasks without the metric (a sink subtask that serves no rank) are left out.
        """
        base = f"/jobs/{jid}/vertices/{vertex_id}/subtasks/metrics"
        names = [m["id"] for m in self.rest(base) if m["id"].startswith(prefix)]
        if not names:
            return {}
        got = self.rest(f"{base}?get={urllib.parse.quote(','.join(names))}&agg={agg}")
        return {m["id"]: float(m[agg]) for m in got if agg in m}

    def thread_dumps(self) -> None:
        """``jstack`` of every running process of the cluster into its log directory (kept)."""
        jstack = shutil.which("jstack")
        if jstack is None:
            return
        for pid_file in sorted((self.run_dir / "pid").glob("*.pid")):
            dump = self.run_dir / "log" / f"{pid_file.stem}.jstack.txt"
            try:
                with dump.open("w") as f:
                    subprocess.run(
                        [jstack, pid_file.read_text().strip()],
                        stdout=f,
                        stderr=subprocess.STDOUT,
                        timeout=60,
                    )
            except (OSError, subprocess.TimeoutExpired):
                continue


def _submit(cluster: Cluster, out_root: Path, dataset: Path, *extra: str, resume: str = "") -> str:
    """``flink run -d [extra] stoker-job.jar <options> [--stoker.resume-step resume]``: the job id."""
    out = cluster.flink(
        "run",
        "-d",
        *extra,
        str(JAR),
        "--stoker.dataset.path",
        str(dataset),
        "--stoker.tokenizer.path",
        str(SHARED / "tokenizers" / "qwen3"),
        "--stoker.output.root",
        str(out_root),
        "--stoker.job-name",
        JOB_NAME,
        "--stoker.dp-world-size",
        str(WORLD_SIZE),
        "--stoker.micro-batch-size",
        str(MICRO_BATCH),
        "--stoker.prefetch-depth",
        str(PREFETCH_DEPTH),
        "--stoker.image.max-pixels",
        "200704",
        "--execution.checkpointing.interval",
        "1s",
        "--execution.checkpointing.min-pause",
        "0s",
        *(("--stoker.resume-step", resume) if resume else ()),
    )
    m = re.search(r"JobID ([0-9a-f]{32})", out)
    assert m, f"`flink run -d` printed no job id:\n{out}"
    return m.group(1)


def _trainer(
    job_dir: Path,
    record: Path,
    procs: list[subprocess.Popen[str]],
    *,
    step_time_ms: int = 10,
    start_step: int | None = None,
    stop_after_step: int | None = None,
) -> subprocess.Popen[str]:
    """``python -m stoker_tools.simulate --record`` in the background (stopped by the test's cleanup)."""
    args = [
        sys.executable,
        "-m",
        "stoker_tools.simulate",
        "--root",
        str(job_dir),
        "--record",
        str(record),
        "--step-time-ms",
        str(step_time_ms),
        "--timeout-s",
        "120",
        "--progress-interval-s",
        "5",
    ]
    if start_step is not None:
        args += ["--start-step", str(start_step)]
    if stop_after_step is not None:
        args += ["--stop-after-step", str(stop_after_step)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    procs.append(proc)
    return proc


def _finish(proc: subprocess.Popen[str], timeout_s: float) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"the simulated trainer did not finish within {timeout_s}s:\n{out[-3000:]}")
    assert proc.returncode == 0, f"the simulated trainer failed:\n{out[-3000:]}"
    assert "result: OK" in out, out[-3000:]
    return out


def _read_record(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _generation(job_dir: Path) -> str | None:
    """The generation ``manifest.json`` names, or ``None`` before there is one."""
    try:
        return str(json.loads((job_dir / "manifest.json").read_text())["generation"])
    except (OSError, ValueError, KeyError):
        return None


def _manifest(job_dir: Path) -> dict[str, Any]:
    return dict(json.loads((job_dir / "manifest.json").read_text()))


def _consumed(rank_dir: Path) -> int:
    """``consumed_step`` of the rank's ``ack.json`` (-1 before the first acknowledgement)."""
    try:
        return int(json.loads((rank_dir / "ack.json").read_text())["consumed_step"])
    except (OSError, ValueError, KeyError):
        return -1


def _steps_on_disk(rank_dir: Path) -> list[int]:
    return sorted(int(p.name[5:15]) for p in rank_dir.glob("step-*.arrow"))


class Phases:
    """Wall-clock time of each phase, printed at the end (and on failure)."""

    def __init__(self) -> None:
        self.t0 = self.last = time.monotonic()
        self.done: list[tuple[str, float]] = []

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        self.done.append((name, now - self.last))
        self.last = now

    def report(self) -> str:
        parts = ", ".join(f"{n} {t:.1f}s" for n, t in self.done)
        return f"phases: {parts}; total {time.monotonic() - self.t0:.1f}s"


@pytest.fixture(scope="module")
def dataset() -> Path:
    return make_dataset()


def generate_records(directory: Path, records: int) -> None:
    """``records`` generated records (``scripts/make_sample_dataset.py``) in ``directory``."""
    subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "make_sample_dataset.py"),
            str(directory),
            "--records",
            str(records),
        ],
        check=True,
        capture_output=True,
    )


def make_dataset() -> Path:
    """A generated dataset (both record formats, five image formats), cached under .stoker/."""
    d = REPO_ROOT / ".stoker" / f"e2e-cluster-dataset-{RECORDS}"
    if not (d / ".complete").exists():
        shutil.rmtree(d, ignore_errors=True)
        generate_records(d, RECORDS)
        (d / ".complete").touch()
    return d


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if not SHARED.is_dir():
        pytest.fail(f"{SHARED} is missing; tests need ../shared beside the repository")
    if not JAR.is_file():
        pytest.fail(f"{JAR} is missing: run ./stoker test (or mvn package)")
    run_dir = Path(tempfile.mkdtemp(prefix="stoker-cluster-"))
    c = Cluster(run_dir, Path(tempfile.mkdtemp(prefix="stoker-e2e-cluster-", dir="/dev/shm")))
    try:
        # the production recovery settings of flink-conf/config.yaml (heartbeats, restart delay)
        c.script("start", "-D", "metrics.fetcher.update-interval=1000", timeout_s=240)
        yield c
    finally:
        subprocess.run([str(CLUSTER), "stop"], env=c.env, capture_output=True, timeout=120)
        logs = run_dir / "log"
        if logs.is_dir():  # keep the logs of the last run next to the repo for CI
            keep = REPO_ROOT / ".stoker" / "logs" / "e2e-cluster"
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(logs, keep, dirs_exist_ok=True)
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(c.shm, ignore_errors=True)  # no job writes there any more


def test_kill_savepoint_cancel_resume_rescale_delivers_every_batch_once(
    cluster: Cluster, dataset: Path
) -> None:
    with cluster_run(cluster) as (procs, phases):
        _workflow(cluster, dataset, cluster.shm, procs, phases)


@contextlib.contextmanager
def cluster_run(cluster: Cluster) -> Iterator[tuple[list[subprocess.Popen[str]], Phases]]:
    """The processes a cluster test starts (append them) and its phase timer. On a failure the
    cluster's thread dumps are taken (a job that hangs: where every thread waits); at the end
    every process still running is killed and the phases are printed."""
    procs: list[subprocess.Popen[str]] = []
    phases = Phases()
    try:
        yield procs, phases
    except BaseException:
        cluster.thread_dumps()
        raise
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        print(phases.report(), file=sys.stderr)


def reference_run(
    cluster: Cluster,
    base: Path,
    dataset: Path,
    procs: list[subprocess.Popen[str]],
    num_steps: int,
) -> tuple[str, list[dict[str, Any]]]:
    """The uninterrupted run every cluster test compares against: the job submitted fresh under
    ``base/reference`` and a recording trainer reading every batch; the job must end FINISHED and
    the trainer must have read every (step, rank) of ``num_steps`` steps.

    :returns: the job id and the trainer's record (one dict per batch)
    """
    ref_out, ref_record = base / "reference", base / "reference.jsonl"
    ref_jid = _submit(cluster, ref_out, dataset)
    _finish(_trainer(ref_out / JOB_NAME, ref_record, procs), timeout_s=300)
    _wait(
        "the reference job to finish",
        60,
        lambda: cluster.state(ref_jid) == "FINISHED",
        explain=lambda: cluster.describe(ref_jid),
    )
    reference = _read_record(ref_record)
    assert sorted((r["step"], r["rank"]) for r in reference) == [
        (s, r) for s in range(num_steps) for r in range(WORLD_SIZE)
    ]
    return ref_jid, reference


def _workflow(
    cluster: Cluster,
    dataset: Path,
    base: Path,
    procs: list[subprocess.Popen[str]],
    phases: Phases,
) -> None:
    # --- the reference: an uninterrupted run -------------------------------------------------
    ref_jid, reference = reference_run(cluster, base, dataset, procs, NUM_STEPS)
    phases("reference run")

    # --- the same job, interrupted ------------------------------------------------------------
    out = base / "run"
    job_dir = out / JOB_NAME
    record1, record2 = base / "run-before-restart.jsonl", base / "run-after-restart.jsonl"
    jid = _submit(cluster, out, dataset)
    trainer = _trainer(
        job_dir, record1, procs, step_time_ms=SLOW_STEP_MS, stop_after_step=STOP_AFTER
    )
    _wait("the job to run", 60, lambda: cluster.running(jid), explain=lambda: cluster.describe(jid))
    gen1 = _wait("the job's manifest", 60, lambda: _generation(job_dir))
    rank_dirs = [job_dir / f"gen-{gen1}" / f"rank-{r}" for r in range(WORLD_SIZE)]
    _wait(
        "the trainer's first acknowledgements and a completed checkpoint",
        120,
        lambda: (
            min(_consumed(d) for d in rank_dirs) >= 0
            and cluster.checkpoints(jid)["counts"]["completed"] >= 1
        ),
    )
    # spread scheduling: the job's subtasks run on both TaskManagers
    hosts = {
        tm["taskmanager-id"]
        for v in cluster.job(jid)["vertices"]
        for tm in cluster.rest(f"/jobs/{jid}/vertices/{v['id']}/taskmanagers")["taskmanagers"]
    }
    assert hosts == {"taskmanager-1", "taskmanager-2"}, hosts
    phases("interrupted run started")

    if KILL_WHEN_PREFETCHED:
        _wait(
            f"{PREFETCH_DEPTH} batches written ahead on every rank",
            300,
            lambda: all(len(_steps_on_disk(d)) >= PREFETCH_DEPTH for d in rank_dirs),
        )
    # a node failure: SIGKILL one TaskManager, start a new one; the job restores its checkpoint
    consumed_at_kill = min(_consumed(d) for d in rank_dirs)
    assert consumed_at_kill + PREFETCH_DEPTH < STOP_AFTER, (
        f"the trainer consumed step {consumed_at_kill} before the kill: the job may already have "
        f"written every step up to {STOP_AFTER}, so the restore would not be tested"
    )
    assert cluster.state(jid) == "RUNNING", "the job finished before the TaskManager was killed"
    killed_at = time.time()
    cluster.script("kill-taskmanager", "1")
    # the job restarts on the surviving TaskManager's 2 slots; the new one joins for later
    restored = _wait(
        "the job to restore its latest checkpoint and run again",
        120,
        lambda: (
            cluster.running(jid) and (cluster.checkpoints(jid).get("latest") or {}).get("restored")
        ),
        interval_s=0.25,
        explain=lambda: cluster.describe(jid),
    )
    recovery_s = time.time() - killed_at
    assert not restored["is_savepoint"], restored
    cluster.script("add-taskmanager")
    phases(f"TaskManager killed (trainer at step {consumed_at_kill}), job restored")

    # the trainer reads on through the restore and stops after STOP_AFTER (its "checkpoint")
    _finish(trainer, timeout_s=240)
    before = _read_record(record1)
    assert sorted((r["step"], r["rank"]) for r in before) == [
        (s, r) for s in range(STOP_AFTER + 1) for r in range(WORLD_SIZE)
    ]
    # The trainer's stall: its longest wait for one batch after the kill. The batches it had in
    # hand stayed readable through the restart and covered part of the recovery.
    stall_s = max(r["wait_s"] for r in before if r["received_at"] >= killed_at)
    print(
        f"TaskManager kill: job RUNNING again, restored from checkpoint {restored['id']}, after "
        f"{recovery_s:.1f}s; the trainer's longest wait for a batch after the kill: "
        f"{stall_s:.1f}s (prefetch depth {PREFETCH_DEPTH} x {SLOW_STEP_MS} ms per step)",
        file=sys.stderr,
    )
    config = {e["key"]: e["value"] for e in cluster.rest("/jobmanager/config")}
    assert {k: config.get(k) for k in RECOVERY_SETTINGS} == RECOVERY_SETTINGS
    assert [_consumed(d) for d in rank_dirs] == [STOP_AFTER] * WORLD_SIZE
    # with the trainer down the job runs up to its prefetch bound and no further
    bound = STOP_AFTER + PREFETCH_DEPTH
    _wait(
        f"every rank's batch {bound} (the prefetch bound)",
        120,
        lambda: all(bound in _steps_on_disk(d) for d in rank_dirs),
    )
    _check_metrics(cluster, jid)  # takes a few seconds: the job had time to overshoot
    for d in rank_dirs:
        assert _steps_on_disk(d) == list(range(STOP_AFTER + 1, bound + 1)), d
    assert cluster.state(jid) == "RUNNING"
    phases("trainer stopped, job idle at the prefetch bound, metrics read")

    # a savepoint while the trainer is down (the job idles, so it completes), then cancel
    savepoint = _savepoint(cluster, jid)
    cluster.flink("cancel", jid)
    _wait(
        "the job to be cancelled",
        60,
        lambda: cluster.state(jid) == "CANCELED",
        explain=lambda: cluster.describe(jid),
    )
    phases("savepoint and cancel")

    # resume from the savepoint with another parallelism and the trainer's step
    jid2 = _submit(cluster, out, dataset, "-s", savepoint, "-p", "3", resume=str(STOP_AFTER))
    gen2 = _wait(
        "the resumed job's new generation in manifest.json",
        120,
        lambda: (g := _generation(job_dir)) != gen1 and g,
    )
    assert _manifest(job_dir)["first_step"] == STOP_AFTER + 1
    trainer2 = _trainer(job_dir, record2, procs, start_step=STOP_AFTER + 1)
    # the rest of the epoch is short: a fast run can be over before a poll sees it RUNNING
    _wait(
        "the resumed job to run",
        120,
        lambda: cluster.running(jid2) or cluster.state(jid2) == "FINISHED",
        explain=lambda: cluster.describe(jid2),
    )
    restored = _wait(
        "the resumed job to report its restore",
        60,
        lambda: (cluster.checkpoints(jid2).get("latest") or {}).get("restored"),
    )
    assert restored["is_savepoint"], restored
    assert restored["external_path"].rstrip("/").endswith(savepoint.rstrip("/").rsplit("/", 1)[-1])
    assert cluster.vertex(jid2, "arrow-shm-sink")["parallelism"] == 3
    _finish(trainer2, timeout_s=300)
    _wait(
        "the resumed job to finish",
        60,
        lambda: cluster.state(jid2) == "FINISHED",
        explain=lambda: cluster.describe(jid2),
    )
    phases("resumed run")

    # --- the trainers' view: every batch exactly once, identical to the reference -------------
    run = before + _read_record(record2)
    counts = collections.Counter((r["step"], r["rank"]) for r in run)
    assert [k for k, n in counts.items() if n > 1] == [], "batches read more than once"
    want = {(r["step"], r["rank"]): r["sha256"] for r in reference}
    got = {(r["step"], r["rank"]): r["sha256"] for r in run}
    assert sorted(got) == sorted(want), f"(step, rank) read: missing {sorted(set(want) - set(got))}"
    differ = sorted(k for k in want if got[k] != want[k])
    assert differ == [], f"batches that differ from the uninterrupted run: {differ}"
    # Exactly once on the sink's side too: a batch published again after the trainer consumed it
    # would stay behind as a file nobody reads. Older generations are gone.
    assert sorted(p.name for p in job_dir.glob("gen-*")) == [f"gen-{gen2}"]
    left = sorted(str(p.relative_to(job_dir)) for p in job_dir.glob(f"gen-{gen2}/rank-*/step-*"))
    assert left == [], f"batch files left in the final generation: {left}"


def _savepoint(cluster: Cluster, jid: str) -> str:
    """``flink savepoint``: the path it printed. It must complete at the first try."""
    assert cluster.state(jid) == "RUNNING", "the job is not running"
    proc = subprocess.run(
        [str(CLUSTER), "flink", "savepoint", jid],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    m = re.search(r"Savepoint completed\. Path: (\S+)", proc.stdout)
    assert proc.returncode == 0 and m, (
        f"`flink savepoint` failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return m.group(1)


def _check_metrics(cluster: Cluster, jid: str) -> None:
    """The tuning metrics of the operator guide (docs/operator-guide.md), through the REST API.

    Called while the trainer is down after ``STOP_AFTER`` and the job idles at its prefetch
    bound, so the per-rank gauges have known values.
    """
    sink = cluster.vertex(jid, "arrow-shm-sink")
    want = {
        **{f"{SINK}.rank.{r}.trainerConsumedStep": float(STOP_AFTER) for r in range(WORLD_SIZE)},
        **{f"{SINK}.rank.{r}.batchesAhead": float(PREFETCH_DEPTH) for r in range(WORLD_SIZE)},
    }
    sink_metrics = _wait(
        f"the sink's per-rank gauges to show the trainer at step {STOP_AFTER} and "
        f"{PREFETCH_DEPTH} batches ahead",
        60,
        lambda: (
            (m := cluster.metrics(jid, sink["id"], SINK, agg="max"))
            and all(m.get(k) == v for k, v in want.items())
            and m
        ),
    )
    for rank in range(WORLD_SIZE):
        ratio = sink_metrics[f"{SINK}.rank.{rank}.trainerWaitTimeRatio"]
        assert 0.0 <= ratio <= 1.0, sink_metrics
        assert sink_metrics[f"{SINK}.rank.{rank}.batchesWritten"] > 0, sink_metrics

    source = cluster.vertex(jid, "preprocess-images")
    pre = _wait(
        "preprocess metrics",
        30,
        lambda: cluster.metrics(jid, source["id"], "preprocess-images."),
    )
    assert pre.get("preprocess-images.imagesPreprocessed", 0) > 0, pre
    assert pre["preprocess-images.preprocessMsPerMegapixel"] > 0, pre
    fetch = cluster.metrics(jid, source["id"], "fetch-images.fs.readLatencyMs")
    assert any(k.endswith("_p99") or k.endswith("_max") for k in fetch), fetch
    dead = cluster.vertex(jid, "dead-letter-accounting")
    by_reason = cluster.metrics(jid, dead["id"], "dead-letter-accounting.deadLettersByReason.")
    assert "dead-letter-accounting.deadLettersByReason.IMAGE_NOT_FOUND" in by_reason, by_reason

    user_config = cluster.rest(f"/jobs/{jid}/config")["execution-config"]["user-config"]
    assert user_config["stoker.job-name"] == JOB_NAME
    assert user_config["stoker.micro-batch-size"] == str(MICRO_BATCH)
    assert user_config["stoker.prefetch-depth"] == str(PREFETCH_DEPTH)
