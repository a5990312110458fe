"""JobManager failover on a real standalone Flink cluster with ZooKeeper high availability.

``scripts/cluster.sh start --ha`` starts a ZooKeeper server (from Maven Central, bound to
127.0.0.1), a leading JobManager and two TaskManagers; the test adds a standby JobManager with its
own REST port (``add-jobmanager``). An uninterrupted run gives the reference sequence of (step,
rank, sha256 of the batch file). Then the same job runs again with a trainer slower than the
pipeline, and the test

1. waits for a completed checkpoint and the trainer's first acknowledgements,
2. SIGKILLs the leading JobManager (``kill-jobmanager 1``),
3. waits, through the standby's REST API, for the standby to lead and run the same job (same job
   id, recovered from ZooKeeper) restored from its latest checkpoint,

while the trainer reads on. It must read every (step, rank) exactly once, identical to the
reference, and no batch file may be left behind. The failover time (kill to the job RUNNING again
on the standby) and the trainer's longest wait for a batch after the kill are printed (the
operator guide's numbers). Every process the test starts is stopped at the end, also on failure.
"""

from __future__ import annotations

import collections
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cluster import (
    CLUSTER,
    JAR,
    JOB_NAME,
    NUM_STEPS,
    PREFETCH_DEPTH,
    REPO_ROOT,
    SHARED,
    WORLD_SIZE,
    Cluster,
    Phases,
    _consumed,
    _finish,
    _free_port,
    _generation,
    _read_record,
    _submit,
    _trainer,
    _wait,
    cluster_run,
    make_dataset,
    reference_run,
)

# Simulated compute per step: slower than the pipeline, so the job waits at its prefetch bound
# and the trainer has PREFETCH_DEPTH batches in hand when the JobManager dies.
SLOW_STEP_MS = 1000
# The JobManager is killed once the trainer consumed this step; the job then still has to produce
# every step after KILL_AT + PREFETCH_DEPTH.
KILL_AT = 2
# ZooKeeper keeps the dead leader's session, and so its leadership, for the session timeout of
# flink-conf/config.yaml (10 s); then the standby recovers the job and restores its checkpoint.
FAILOVER_LIMIT_S = 60


@pytest.fixture(scope="module")
def ha_dataset() -> Path:
    return make_dataset()


@pytest.fixture(scope="module")
def ha_cluster() -> Iterator[tuple[Cluster, int]]:
    """A cluster with ZooKeeper HA: the leader (``cluster.rest_port``) and the standby's REST port."""
    if not SHARED.is_dir():
        pytest.fail(f"{SHARED} is missing; tests need ../shared beside the repository")
    if not JAR.is_file():
        pytest.fail(f"{JAR} is missing: run ./stoker test (or mvn package)")
    run_dir = Path(tempfile.mkdtemp(prefix="stoker-cluster-ha-"))
    c = Cluster(run_dir, Path(tempfile.mkdtemp(prefix="stoker-e2e-ha-", dir="/dev/shm")))
    c.env["STOKER_ZK_PORT"] = str(_free_port())
    c.env["STOKER_JOBMANAGERS"] = "1"  # the standby gets a free port of its own below
    standby_port = _free_port()
    try:
        c.script("start", "--ha", "-D", "metrics.fetcher.update-interval=1000", timeout_s=300)
        c.script("add-jobmanager", "-D", f"rest.port={standby_port}")
        _wait(
            "the standby JobManager's REST API",
            120,
            lambda: Cluster.rest_on(standby_port, "/overview"),
        )
        leader = c.script("leader").split()
        assert leader == ["1", str(c.rest_port)], leader
        yield c, standby_port
    finally:
        subprocess.run([str(CLUSTER), "stop"], env=c.env, capture_output=True, timeout=120)
        logs = run_dir / "log"
        if logs.is_dir():  # keep the logs of the last run next to the repo for CI
            keep = REPO_ROOT / ".stoker" / "logs" / "e2e-cluster-ha"
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(logs, keep, dirs_exist_ok=True)
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(c.shm, ignore_errors=True)


def test_standby_jobmanager_takes_over_and_the_trainer_reads_every_batch_once(
    ha_cluster: tuple[Cluster, int], ha_dataset: Path
) -> None:
    cluster, standby_port = ha_cluster
    with cluster_run(cluster) as (procs, phases):
        _failover(cluster, standby_port, ha_dataset, procs, phases)


def _failover(
    cluster: Cluster,
    standby_port: int,
    dataset: Path,
    procs: list[subprocess.Popen[str]],
    phases: Phases,
) -> None:
    base = cluster.shm
    # --- the reference: an uninterrupted run -------------------------------------------------
    ref_jid, reference = reference_run(cluster, base, dataset, procs, NUM_STEPS)
    phases("reference run")

    # --- the same job; the leading JobManager dies mid-run -----------------------------------
    out = base / "run"
    job_dir = out / JOB_NAME
    record = base / "run.jsonl"
    jid = _submit(cluster, out, dataset)
    trainer = _trainer(job_dir, record, procs, step_time_ms=SLOW_STEP_MS)
    _wait("the job to run", 60, lambda: cluster.running(jid), explain=lambda: cluster.describe(jid))
    gen = _wait("the job's manifest", 60, lambda: _generation(job_dir))
    rank_dirs = [job_dir / f"gen-{gen}" / f"rank-{r}" for r in range(WORLD_SIZE)]
    _wait(
        f"the trainer at step {KILL_AT} and a completed checkpoint",
        120,
        lambda: (
            min(_consumed(d) for d in rank_dirs) >= KILL_AT
            and cluster.checkpoints(jid)["counts"]["completed"] >= 1
        ),
    )
    consumed_at_kill = min(_consumed(d) for d in rank_dirs)
    assert consumed_at_kill + PREFETCH_DEPTH < NUM_STEPS - 1, (
        f"the trainer consumed step {consumed_at_kill} before the kill: the job may already have "
        "written every step, so the recovery would not be tested"
    )
    assert cluster.state(jid) == "RUNNING", "the job finished before the JobManager was killed"
    phases("interrupted run started")

    killed_at = time.time()
    cluster.script("kill-jobmanager", "1")
    cluster.rest_port = standby_port  # the leader's REST API died with it
    restored = _wait(
        "the standby JobManager to run the job again, restored from its latest checkpoint",
        FAILOVER_LIMIT_S,
        lambda: (
            cluster.running(jid) and (cluster.checkpoints(jid).get("latest") or {}).get("restored")
        ),
        interval_s=0.25,
        explain=lambda: cluster.describe(jid),
    )
    failover_s = time.time() - killed_at
    assert not restored["is_savepoint"], restored
    assert cluster.script("leader").split() == ["2", str(standby_port)]
    phases(f"leader killed (trainer at step {consumed_at_kill}), job running on the standby")

    # the trainer reads on through the failover to the end of the epoch
    _finish(trainer, timeout_s=300)
    _wait(
        "the job to finish on the new leader",
        60,
        lambda: cluster.state(jid) == "FINISHED",
        explain=lambda: cluster.describe(jid),
    )
    phases("run finished")

    run = _read_record(record)
    counts = collections.Counter((r["step"], r["rank"]) for r in run)
    assert [k for k, n in counts.items() if n > 1] == [], "batches read more than once"
    want = {(r["step"], r["rank"]): r["sha256"] for r in reference}
    got = {(r["step"], r["rank"]): r["sha256"] for r in run}
    assert sorted(got) == sorted(want), f"(step, rank) read: missing {sorted(set(want) - set(got))}"
    differ = sorted(k for k in want if got[k] != want[k])
    assert differ == [], f"batches that differ from the uninterrupted run: {differ}"
    # the failover kept the generation (the job graph came back from ZooKeeper as it was)
    assert sorted(p.name for p in job_dir.glob("gen-*")) == [f"gen-{gen}"]
    left = sorted(str(p.relative_to(job_dir)) for p in job_dir.glob(f"gen-{gen}/rank-*/step-*"))
    assert left == [], f"batch files left in the generation: {left}"

    stall_s = max(r["wait_s"] for r in run if r["received_at"] >= killed_at)
    print(
        f"JobManager failover: kill -> job RUNNING on the standby, restored from checkpoint "
        f"{restored['id']}: {failover_s:.1f}s; the trainer's longest wait for a batch after the "
        f"kill: {stall_s:.1f}s (prefetch depth {PREFETCH_DEPTH} x {SLOW_STEP_MS} ms per step)",
        file=sys.stderr,
    )
