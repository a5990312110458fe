"""The operator's workflow on a real standalone Flink cluster (``scripts/cluster.sh``).

A JobManager and two TaskManagers run as separate JVMs; the job jar is submitted with the Flink
CLI (``flink run -d``) and a simulated trainer (``python -m stoker.simulate --record``) reads every
batch. First an uninterrupted run gives the reference sequence of (step, rank, sha256 of the batch
file). Then the same job runs again while the test

1. reads the tuning metrics and the job configuration through the REST API,
2. kills a TaskManager with SIGKILL and starts a new one (the job recovers from a checkpoint),
3. takes a savepoint (``flink savepoint``) and cancels the job (``flink cancel``),
4. resumes it from the savepoint with a different parallelism (``flink run -s ... -p 3``),

and the trainer, which keeps waiting through all of it, must have read every batch exactly once,
identical to the reference. Every process the test starts is stopped at the end, also on failure.
"""

from __future__ import annotations

import collections
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

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED = REPO_ROOT.parent / "shared" / "data"
CLUSTER = REPO_ROOT / "scripts" / "cluster.sh"
JAR = REPO_ROOT / "job" / "target" / "stoker-job.jar"
JOB_NAME = "stoker-e2e"
WORLD_SIZE = 2
MICRO_BATCH = 2
RECORDS = 64
SINK = "arrow-shm-sink__Writer"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, timeout_s: float, check: Callable[[], Any], interval_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(interval_s)


class Cluster:
    """scripts/cluster.sh with its own run directory and ports, and the REST API."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
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
        url = f"http://127.0.0.1:{self.rest_port}{path}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.loads(resp.read().decode("utf-8"))

    def job(self, jid: str) -> dict[str, Any]:
        return dict(self.rest(f"/jobs/{jid}"))

    def state(self, jid: str) -> str:
        return str(self.job(jid)["state"])

    def vertex(self, jid: str, name_part: str) -> dict[str, Any]:
        for v in self.job(jid)["vertices"]:
            if name_part in v["name"]:
                return dict(v)
        raise AssertionError(f"no vertex named like {name_part!r} in job {jid}")

    def metrics(self, jid: str, vertex_id: str, prefix: str) -> dict[str, float]:
        """Sum over subtasks of every metric of the vertex whose name starts with ``prefix``."""
        base = f"/jobs/{jid}/vertices/{vertex_id}/subtasks/metrics"
        names = [m["id"] for m in self.rest(base) if m["id"].startswith(prefix)]
        if not names:
            return {}
        got = self.rest(f"{base}?get={urllib.parse.quote(','.join(names))}&agg=sum,max")
        return {m["id"]: float(m["sum"]) for m in got}

    def running(self, jid: str) -> bool:
        job = self.job(jid)
        return job["state"] == "RUNNING" and all(
            v["status"] in ("RUNNING", "FINISHED") for v in job["vertices"]
        )


def _submit(cluster: Cluster, out_root: Path, dataset: Path, *extra: str) -> str:
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
        "--stoker.image.max-pixels",
        "200704",
        "--execution.checkpointing.interval",
        "1s",
        "--execution.checkpointing.min-pause",
        "0s",
    )
    m = re.search(r"JobID ([0-9a-f]{32})", out)
    assert m, f"`flink run -d` printed no job id:\n{out}"
    return m.group(1)


def _trainer(
    out_root: Path, record: Path, procs: list[subprocess.Popen[str]]
) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stoker.simulate",
            "--root",
            str(out_root / JOB_NAME),
            "--record",
            str(record),
            "--step-time-ms",
            "10",
            "--timeout-s",
            "240",
            "--progress-interval-s",
            "5",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
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
    return out


def _read_record(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def dataset() -> Path:
    """A generated dataset (both record formats, five image formats), cached under .stoker/."""
    d = REPO_ROOT / ".stoker" / f"e2e-cluster-dataset-{RECORDS}"
    if not (d / ".complete").exists():
        shutil.rmtree(d, ignore_errors=True)
        subprocess.run(
            [
                sys.executable,
                str(REPO_ROOT / "scripts" / "make_sample_dataset.py"),
                str(d),
                "--records",
                str(RECORDS),
            ],
            check=True,
            capture_output=True,
        )
        (d / ".complete").touch()
    return d


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if not SHARED.is_dir():
        pytest.fail(f"{SHARED} is missing; tests need ../shared beside the repository")
    if not JAR.is_file():
        pytest.fail(f"{JAR} is missing: run ./stoker test (or mvn package)")
    run_dir = Path(tempfile.mkdtemp(prefix="stoker-cluster-"))
    c = Cluster(run_dir)
    try:
        c.script(
            "start",
            # notice a killed TaskManager within seconds (Flink: 50 s heartbeat timeout)
            "-D",
            "heartbeat.interval=1000",
            "-D",
            "heartbeat.timeout=8000",
            "-D",
            "metrics.fetcher.update-interval=1000",
            timeout_s=240,
        )
        yield c
    finally:
        subprocess.run([str(CLUSTER), "stop"], env=c.env, capture_output=True, timeout=120)
        logs = run_dir / "log"
        if logs.is_dir():  # keep the logs of a failed run next to the repo for CI
            keep = REPO_ROOT / ".stoker" / "logs" / "e2e-cluster"
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(logs, keep, dirs_exist_ok=True)
        shutil.rmtree(run_dir, ignore_errors=True)


def test_kill_savepoint_cancel_resume_rescale_delivers_every_batch_once(
    cluster: Cluster, dataset: Path
) -> None:
    procs: list[subprocess.Popen[str]] = []
    base = Path(tempfile.mkdtemp(prefix="stoker-e2e-cluster-", dir="/dev/shm"))
    try:
        _workflow(cluster, dataset, base, procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(base, ignore_errors=True)


def _workflow(
    cluster: Cluster, dataset: Path, base: Path, procs: list[subprocess.Popen[str]]
) -> None:
    num_steps = -(-RECORDS // (WORLD_SIZE * MICRO_BATCH))

    # --- the reference: an uninterrupted run -------------------------------------------------
    ref_out, ref_record = base / "reference", base / "reference.jsonl"
    ref_jid = _submit(cluster, ref_out, dataset)
    _finish(_trainer(ref_out, ref_record, procs), timeout_s=300)
    _wait("the reference job to finish", 60, lambda: cluster.state(ref_jid) == "FINISHED")
    reference = _read_record(ref_record)
    assert len(reference) == num_steps * WORLD_SIZE

    # --- the same job, interrupted ------------------------------------------------------------
    out, record = base / "run", base / "run.jsonl"
    jid = _submit(cluster, out, dataset)
    trainer = _trainer(out, record, procs)
    _wait("the job to run", 60, lambda: cluster.running(jid))
    sink = cluster.vertex(jid, "arrow-shm-sink")
    _wait(
        "two batches written and a checkpoint completed",
        120,
        lambda: (
            cluster.metrics(jid, sink["id"], SINK).get(f"{SINK}.rank.0.batchesWritten", 0) >= 2
            and cluster.rest(f"/jobs/{jid}/checkpoints")["counts"]["completed"] >= 1
        ),
    )
    _check_metrics(cluster, jid)
    # spread scheduling: the job's subtasks run on both TaskManagers
    hosts = {
        tm["taskmanager-id"]
        for v in cluster.job(jid)["vertices"]
        for tm in cluster.rest(f"/jobs/{jid}/vertices/{v['id']}/taskmanagers")["taskmanagers"]
    }
    assert hosts == {"taskmanager-1", "taskmanager-2"}, hosts

    # a node failure: SIGKILL one TaskManager, start a new one; the job restores its checkpoint
    assert cluster.state(jid) == "RUNNING", "the job finished before the TaskManager was killed"
    cluster.script("kill-taskmanager", "1")
    cluster.script("add-taskmanager")
    _wait(
        "the job to restore its latest checkpoint and run again",
        120,
        lambda: (
            cluster.running(jid)
            and (cluster.rest(f"/jobs/{jid}/checkpoints").get("latest") or {}).get("restored")
        ),
    )

    # a savepoint, then cancel
    savepoint = _savepoint(cluster, jid)
    cluster.flink("cancel", jid)
    _wait("the job to be cancelled", 60, lambda: cluster.state(jid) == "CANCELED")

    # resume from the savepoint with a different parallelism
    jid2 = _submit(cluster, out, dataset, "-s", savepoint, "-p", "3")
    _wait(
        "the resumed job to run",
        60,
        lambda: cluster.running(jid2) or cluster.state(jid2) == "FINISHED",
    )
    restored = _wait(
        "the resumed job to report its restore",
        60,
        lambda: (cluster.rest(f"/jobs/{jid2}/checkpoints").get("latest") or {}).get("restored"),
    )
    assert restored["is_savepoint"], restored
    assert restored["external_path"].rstrip("/").endswith(savepoint.rstrip("/").rsplit("/", 1)[-1])
    assert cluster.vertex(jid2, "arrow-shm-sink")["parallelism"] == 3
    trainer_log = _finish(trainer, timeout_s=300)
    _wait("the resumed job to finish", 60, lambda: cluster.state(jid2) == "FINISHED")

    # --- the trainer's view: every batch exactly once, identical to the reference -------------
    run = _read_record(record)
    counts = collections.Counter((r["step"], r["rank"]) for r in run)
    assert [k for k, n in counts.items() if n > 1] == [], "batches read more than once"
    want = {(r["step"], r["rank"]): r["sha256"] for r in reference}
    got = {(r["step"], r["rank"]): r["sha256"] for r in run}
    assert sorted(got) == sorted(want), f"(step, rank) read: missing {sorted(set(want) - set(got))}"
    differ = sorted(k for k in want if got[k] != want[k])
    assert differ == [], f"batches that differ from the uninterrupted run: {differ}"
    assert "result: OK" in trainer_log
    # Exactly once on the sink's side too: a batch published again after the trainer consumed it
    # (a replay after the failover or the restore) stays behind as a file nobody reads.
    left = sorted(p.name for p in (out / JOB_NAME).glob("rank-*/step-*.arrow"))
    assert left == [], f"batch files published again after the trainer consumed them: {left}"


def _savepoint(cluster: Cluster, jid: str, attempts: int = 10) -> str:
    """``flink savepoint``, tried again when a task declines it (one closing at the end of input)."""
    for _ in range(attempts):
        assert cluster.state(jid) == "RUNNING", "the job finished before the savepoint"
        proc = subprocess.run(
            [str(CLUSTER), "flink", "savepoint", jid],
            env=cluster.env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        m = re.search(r"Savepoint completed\. Path: (\S+)", proc.stdout)
        if proc.returncode == 0 and m:
            return m.group(1)
        assert "declined" in proc.stdout + proc.stderr, f"`flink savepoint` failed:\n{proc.stdout}"
        time.sleep(1)
    pytest.fail(f"every savepoint of {jid} was declined")


def _check_metrics(cluster: Cluster, jid: str) -> None:
    """The tuning metrics of the README's operator guide, through the REST API."""
    sink = cluster.vertex(jid, "arrow-shm-sink")
    sink_metrics = _wait(
        "the trainer's first acknowledgement in the sink's metrics",
        60,
        lambda: (
            (m := cluster.metrics(jid, sink["id"], SINK))
            and m.get(f"{SINK}.rank.0.trainerConsumedStep", -1) >= 0
            and m
        ),
    )
    for rank in range(WORLD_SIZE):
        assert f"{SINK}.rank.{rank}.batchesAhead" in sink_metrics
        assert f"{SINK}.rank.{rank}.trainerWaitTimeRatio" in sink_metrics
    assert 0.0 <= sink_metrics[f"{SINK}.rank.0.trainerWaitTimeRatio"] <= 1.0

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
