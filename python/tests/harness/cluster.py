"""A standalone Flink cluster (``scripts/cluster.sh``) for the cluster tests, the job submitted to
it with ``flink run`` (:func:`stoker_tools.job.flink_run_args`) in the shape every cluster test
shares, and the uninterrupted reference run they compare against.

The shape: job :data:`JOB_NAME`, :data:`WORLD_SIZE` ranks of :data:`MICRO_BATCH` samples,
prefetch depth :data:`PREFETCH_DEPTH`, over :data:`RECORDS` generated records
(:func:`make_dataset`), :data:`NUM_STEPS` steps. ``RECORDS`` and
``PREFETCH_DEPTH`` can be changed through the environment (``STOKER_E2E_RECORDS``,
``STOKER_E2E_PREFETCH_DEPTH``: docs/operator-guide.md "Failures and recovery").
"""

from __future__ import annotations

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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from stoker_tools.flink_rest import JobRest
from stoker_tools.job import JobBuild, flink_run_args

from harness.jobs import generate_records
from harness.paths import REPO_ROOT, TOKENIZER_DIR, require_shared
from harness.polling import wait_for
from harness.trainers import consumed, finish, generation, read_record, start_trainer

CLUSTER = REPO_ROOT / "scripts" / "cluster.sh"
#: the jar ``flink run`` submits (``$STOKER_JAR``, by default the build's)
JAR = JobBuild.from_env(REPO_ROOT).jar
JOB_NAME = "stoker-e2e"
WORLD_SIZE = 2
MICRO_BATCH = 2
RECORDS = int(os.environ.get("STOKER_E2E_RECORDS", "64"))
NUM_STEPS = -(-RECORDS // (WORLD_SIZE * MICRO_BATCH))  # 16 by default
PREFETCH_DEPTH = int(os.environ.get("STOKER_E2E_PREFETCH_DEPTH", "4"))


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster(JobRest):
    """scripts/cluster.sh with its own run directory and ports, and the REST API."""

    def __init__(self, run_dir: Path, shm: Path) -> None:
        self.run_dir = run_dir
        #: where the test's jobs write their batches (removed after the cluster stopped)
        self.shm = shm
        self.rest_port = free_port()
        self.env = dict(
            os.environ,
            STOKER_CLUSTER_DIR=str(run_dir),
            STOKER_REST_PORT=str(self.rest_port),
            STOKER_JM_RPC_PORT=str(free_port()),
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


@contextlib.contextmanager
def started_cluster(
    name: str,
    *start_args: str,
    env: dict[str, str] | None = None,
    timeout_s: float = 240,
) -> Iterator[Cluster]:
    """A :class:`Cluster` in fresh run and ``/dev/shm`` directories named after ``name``, started
    with ``scripts/cluster.sh start start_args`` (``env``: more of the script's variables), for a
    module fixture. At the end it is stopped, its logs kept in ``.stoker/logs/<name>`` for CI
    and both directories removed. Fails the test when ``../shared`` or the jar is missing."""
    require_shared()
    if not JAR.is_file():
        pytest.fail(f"{JAR} is missing: run ./stoker test (or mvn package)")
    run_dir = Path(tempfile.mkdtemp(prefix=f"stoker-{name}-"))
    c = Cluster(run_dir, Path(tempfile.mkdtemp(prefix=f"stoker-{name}-shm-", dir="/dev/shm")))
    c.env.update(env or {})
    try:
        c.script("start", *start_args, timeout_s=timeout_s)
        yield c
    finally:
        subprocess.run([str(CLUSTER), "stop"], env=c.env, capture_output=True, timeout=120)
        logs = run_dir / "log"
        if logs.is_dir():  # keep the logs of the last run next to the repo for CI
            keep = REPO_ROOT / ".stoker" / "logs" / name
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(logs, keep, dirs_exist_ok=True)
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(c.shm, ignore_errors=True)  # no job writes there any more


def submit(cluster: Cluster, out_root: Path, dataset: Path, *extra: str, resume: str = "") -> str:
    """``flink run -d [extra] stoker-job.jar <the cluster tests' options> [--stoker.resume-step
    resume]``: the job id."""
    options = {
        "stoker.dataset.path": str(dataset),
        "stoker.tokenizer.path": str(TOKENIZER_DIR),
        "stoker.output.root": str(out_root),
        "stoker.job-name": JOB_NAME,
        "stoker.dp-world-size": str(WORLD_SIZE),
        "stoker.micro-batch-size": str(MICRO_BATCH),
        "stoker.prefetch-depth": str(PREFETCH_DEPTH),
        "stoker.image.max-pixels": "200704",
        "execution.checkpointing.interval": "1s",
        "execution.checkpointing.min-pause": "0s",
        **({"stoker.resume-step": resume} if resume else {}),
    }
    return job_id(cluster.flink(*flink_run_args(options, "-d", *extra, jar=JAR)))


def job_id(flink_run_output: str) -> str:
    """The job id ``flink run -d`` printed."""
    m = re.search(r"JobID ([0-9a-f]{32})", flink_run_output)
    assert m, f"`flink run -d` printed no job id:\n{flink_run_output}"
    return m.group(1)


def wait_state(cluster: Any, jid: str, state: str, what: str, timeout_s: float) -> None:
    """Wait until job ``jid`` is in ``state`` (``FINISHED``, ``CANCELED``, ...; ``what``: what
    the test waits for); on timeout the failure gives the job's state and exceptions
    (``cluster``: a :class:`Cluster` or a ``stoker_tools.nodes.NodeCluster``)."""
    wait_for(
        what,
        timeout_s,
        lambda: cluster.state(jid) == state,
        explain=lambda: cluster.describe(jid),
    )


def stop_with_savepoint(cluster: Any, jid: str, timeout_s: float = 60) -> str:
    """``flink stop --savepointPath <run dir>/savepoints``: the savepoint path; the job must end
    FINISHED (``cluster``: a :class:`Cluster` or a ``stoker_tools.nodes.NodeCluster``)."""
    out = cluster.flink("stop", "--savepointPath", str(cluster.run_dir / "savepoints"), jid)
    m = re.search(r"Savepoint completed\. Path: (\S+)", out)
    assert m, f"`flink stop` printed no savepoint path:\n{out[-3000:]}"
    wait_state(
        cluster, jid, "FINISHED", f"job {jid} to finish after stop-with-savepoint", timeout_s
    )
    return m.group(1)


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


def kill_all(procs: list[subprocess.Popen[str]]) -> None:
    """Kill every process of ``procs`` still running (also a SIGSTOPped one) and reap it."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


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
        kill_all(procs)
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
    ref_jid = submit(cluster, ref_out, dataset)
    finish(start_trainer(ref_out / JOB_NAME, ref_record, procs), timeout_s=300)
    wait_state(cluster, ref_jid, "FINISHED", "the reference job to finish", 60)
    reference = read_record(ref_record)
    assert sorted((r["step"], r["rank"]) for r in reference) == [
        (s, r) for s in range(num_steps) for r in range(WORLD_SIZE)
    ]
    return ref_jid, reference


def make_dataset() -> Path:
    """:data:`RECORDS` generated records (both record formats, five image formats), cached under
    ``.stoker/``."""
    d = REPO_ROOT / ".stoker" / f"e2e-cluster-dataset-{RECORDS}"
    if not (d / ".complete").exists():
        shutil.rmtree(d, ignore_errors=True)
        generate_records(d, RECORDS)
        (d / ".complete").touch()
    return d


@dataclass
class TrainedRun:
    """A job submitted by :func:`run_with_trainer` and the trainer reading it."""

    jid: str
    job_dir: Path
    generation: str
    rank_dirs: list[Path]
    trainer: subprocess.Popen[str]


def run_with_trainer(
    cluster: Cluster,
    out: Path,
    dataset: Path,
    record: Path,
    procs: list[subprocess.Popen[str]],
    *,
    step_time_ms: int,
    stop_after_step: int | None = None,
    acked_step: int = 0,
) -> TrainedRun:
    """Submit the job fresh under ``out`` and start a recording trainer on it (``step_time_ms``
    per step, stopping after ``stop_after_step``); return once the job runs, its manifest names a
    generation, every rank acknowledged step ``acked_step`` and a checkpoint completed."""
    job_dir = out / JOB_NAME
    jid = submit(cluster, out, dataset)
    trainer = start_trainer(
        job_dir, record, procs, step_time_ms=step_time_ms, stop_after_step=stop_after_step
    )
    wait_for(
        "the job to run", 60, lambda: cluster.running(jid), explain=lambda: cluster.describe(jid)
    )
    gen = wait_for("the job's manifest", 60, lambda: generation(job_dir))
    rank_dirs = [job_dir / f"gen-{gen}" / f"rank-{r}" for r in range(WORLD_SIZE)]
    wait_for(
        f"the trainer's acknowledgement of step {acked_step} and a completed checkpoint",
        120,
        lambda: (
            min(consumed(d) for d in rank_dirs) >= acked_step
            and cluster.checkpoints(jid)["counts"]["completed"] >= 1
        ),
    )
    return TrainedRun(jid, job_dir, gen, rank_dirs, trainer)


def wait_restored(cluster: Any, jid: str, what: str, timeout_s: float) -> dict[str, Any]:
    """Wait until job ``jid`` runs restored from a checkpoint or savepoint (``what``: what the
    test waits for); the REST API's ``latest.restored`` entry."""
    return dict(
        wait_for(
            what,
            timeout_s,
            lambda: (
                cluster.running(jid)
                and (cluster.checkpoints(jid).get("latest") or {}).get("restored")
            ),
            interval_s=0.25,
            explain=lambda: cluster.describe(jid),
        )
    )


def report_recovery(
    what: str,
    restored: dict[str, Any],
    recovery_s: float,
    records: list[dict[str, Any]],
    killed_at: float,
    step_time_ms: int,
) -> None:
    """Print (not assert: a timing on a loaded box is a benchmark's business) how long the job
    took to run again after a kill at Unix time ``killed_at`` (``what``: the kill), restored from
    checkpoint ``restored``, and the trainer's stall: its longest wait for one batch after the
    kill, from its ``records`` (the batches it had in hand stay readable through a restart)."""
    stall_s = max(r["wait_s"] for r in records if r["received_at"] >= killed_at)
    print(
        f"{what}: job RUNNING again, restored from checkpoint {restored['id']}, after "
        f"{recovery_s:.1f}s; the trainer's longest wait for a batch after the kill: "
        f"{stall_s:.1f}s (prefetch depth {PREFETCH_DEPTH} x {step_time_ms} ms per step)",
        file=sys.stderr,
    )
