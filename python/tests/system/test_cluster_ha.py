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

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.cluster import (
    JOB_NAME,
    NUM_STEPS,
    PREFETCH_DEPTH,
    Cluster,
    Phases,
    cluster_run,
    free_port,
    make_dataset,
    reference_run,
    report_recovery,
    run_with_trainer,
    started_cluster,
    wait_restored,
    wait_state,
)
from harness.exactly_once import assert_only_generation_left, assert_read_once_as
from harness.polling import wait_for
from harness.trainers import consumed, finish, read_record

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
    standby_port = free_port()
    env = {
        "STOKER_ZK_PORT": str(free_port()),
        "STOKER_JOBMANAGERS": "1",  # the standby gets a free port of its own below
    }
    with started_cluster(
        "e2e-cluster-ha",
        "--ha",
        "-D",
        "metrics.fetcher.update-interval=1000",
        env=env,
        timeout_s=300,
    ) as c:
        c.script("add-jobmanager", "-D", f"rest.port={standby_port}")
        wait_for(
            "the standby JobManager's REST API",
            120,
            lambda: Cluster.rest_on(standby_port, "/overview"),
        )
        leader = c.script("leader").split()
        assert leader == ["1", str(c.rest_port)], leader
        yield c, standby_port


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
    run = run_with_trainer(
        cluster, out, dataset, record, procs, step_time_ms=SLOW_STEP_MS, acked_step=KILL_AT
    )
    jid, gen, rank_dirs, trainer = run.jid, run.generation, run.rank_dirs, run.trainer
    consumed_at_kill = min(consumed(d) for d in rank_dirs)
    assert consumed_at_kill + PREFETCH_DEPTH < NUM_STEPS - 1, (
        f"the trainer consumed step {consumed_at_kill} before the kill: the job may already have "
        "written every step, so the recovery would not be tested"
    )
    assert cluster.state(jid) == "RUNNING", "the job finished before the JobManager was killed"
    phases("interrupted run started")

    killed_at = time.time()
    cluster.script("kill-jobmanager", "1")
    cluster.rest_port = standby_port  # the leader's REST API died with it
    restored = wait_restored(
        cluster,
        jid,
        "the standby JobManager to run the job again, restored from its latest checkpoint",
        FAILOVER_LIMIT_S,
    )
    failover_s = time.time() - killed_at
    assert not restored["is_savepoint"], restored
    assert cluster.script("leader").split() == ["2", str(standby_port)]
    phases(f"leader killed (trainer at step {consumed_at_kill}), job running on the standby")

    # the trainer reads on through the failover to the end of the epoch
    finish(trainer, timeout_s=300)
    wait_state(cluster, jid, "FINISHED", "the job to finish on the new leader", 60)
    phases("run finished")

    records = read_record(record)
    assert_read_once_as(reference, records, what="uninterrupted run")
    # the failover kept the generation (the job graph came back from ZooKeeper as it was)
    assert_only_generation_left(job_dir, gen)

    report_recovery(
        "JobManager failover (on the standby)",
        restored,
        failover_s,
        records,
        killed_at,
        SLOW_STEP_MS,
    )
