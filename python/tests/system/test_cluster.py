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

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.cluster import (
    CLUSTER,
    JOB_NAME,
    MICRO_BATCH,
    NUM_STEPS,
    PREFETCH_DEPTH,
    WORLD_SIZE,
    Cluster,
    Phases,
    cluster_run,
    make_dataset,
    reference_run,
    report_recovery,
    run_with_trainer,
    started_cluster,
    submit,
    wait_restored,
    wait_state,
)
from harness.exactly_once import assert_only_generation_left, assert_read_once_as
from harness.polling import wait_for
from harness.trainers import (
    consumed,
    finish,
    generation,
    manifest,
    read_record,
    start_trainer,
    steps_on_disk,
)

# The job's shape is the cluster tests' (harness.cluster). RECORDS (STOKER_E2E_RECORDS),
# PREFETCH_DEPTH (STOKER_E2E_PREFETCH_DEPTH), STOP_AFTER and SLOW_STEP_MS can be changed through
# the environment, and STOKER_E2E_KILL_WHEN_PREFETCHED=1 kills the TaskManager only once every
# rank has PREFETCH_DEPTH batches written ahead: the measurement of a prefetch that covers the
# recovery (docs/operator-guide.md "Failures and recovery"), e.g. STOKER_E2E_RECORDS=120
# STOKER_E2E_PREFETCH_DEPTH=6 STOKER_E2E_STOP_AFTER=20 STOKER_E2E_STEP_MS=3000
# STOKER_E2E_KILL_WHEN_PREFETCHED=1.
# The interrupted trainer stops after this step; the resumed job produces the steps after it.
STOP_AFTER = int(os.environ.get("STOKER_E2E_STOP_AFTER", "9"))
# Simulated compute per step of the interrupted trainer: slower than the pipeline, so the job
# waits at its prefetch bound, and slow enough that the TaskManager is killed long before the
# trainer reaches STOP_AFTER (the restored job has to produce the steps up to it).
SLOW_STEP_MS = int(os.environ.get("STOKER_E2E_STEP_MS", "1000"))
KILL_WHEN_PREFETCHED = os.environ.get("STOKER_E2E_KILL_WHEN_PREFETCHED") == "1"
SINK = "arrow-shm-sink__Writer"
# The recovery settings of flink-conf/config.yaml (a killed TaskManager declared lost after 2
# heartbeats of 1 s, a restart 3 s after each failure, the pause never growing, a TaskManager cut
# off from the ResourceManager trying again after 1 s; bench/faults.sh measures them on simulated
# nodes): the cluster must run with them. How long the trainer then waits for a batch after the
# kill is printed, not asserted (a timing on a loaded 2-core box is a benchmark's business):
# 7.7-9.4 s measured with the first two, 26.7 s with Flink's defaults (docs/operator-guide.md,
# "Failures").
RECOVERY_SETTINGS = {
    "heartbeat.interval": "1s",
    "heartbeat.timeout": "10s",
    "restart-strategy.type": "exponential-delay",
    "restart-strategy.exponential-delay.initial-backoff": "3s",
    "restart-strategy.exponential-delay.max-backoff": "3s",
    "restart-strategy.exponential-delay.reset-backoff-threshold": "1min",
    "cluster.registration.error-delay": "1s",
}


@pytest.fixture(scope="module")
def dataset() -> Path:
    return make_dataset()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # the production recovery settings of flink-conf/config.yaml (heartbeats, restart delay)
    with started_cluster("e2e-cluster", "-D", "metrics.fetcher.update-interval=1000") as c:
        yield c


def test_kill_savepoint_cancel_resume_rescale_delivers_every_batch_once(
    cluster: Cluster, dataset: Path
) -> None:
    with cluster_run(cluster) as (procs, phases):
        _workflow(cluster, dataset, cluster.shm, procs, phases)


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
    run = run_with_trainer(
        cluster,
        out,
        dataset,
        record1,
        procs,
        step_time_ms=SLOW_STEP_MS,
        stop_after_step=STOP_AFTER,
    )
    jid, gen1, rank_dirs, trainer = run.jid, run.generation, run.rank_dirs, run.trainer
    # spread scheduling: the job's subtasks run on both TaskManagers
    hosts = {
        tm["taskmanager-id"]
        for v in cluster.job(jid)["vertices"]
        for tm in cluster.rest(f"/jobs/{jid}/vertices/{v['id']}/taskmanagers")["taskmanagers"]
    }
    assert hosts == {"taskmanager-1", "taskmanager-2"}, hosts
    phases("interrupted run started")

    if KILL_WHEN_PREFETCHED:
        wait_for(
            f"{PREFETCH_DEPTH} batches written ahead on every rank",
            300,
            lambda: all(len(steps_on_disk(d)) >= PREFETCH_DEPTH for d in rank_dirs),
        )
    # a node failure: SIGKILL one TaskManager, start a new one; the job restores its checkpoint
    consumed_at_kill = min(consumed(d) for d in rank_dirs)
    assert consumed_at_kill + PREFETCH_DEPTH < STOP_AFTER, (
        f"the trainer consumed step {consumed_at_kill} before the kill: the job may already have "
        f"written every step up to {STOP_AFTER}, so the restore would not be tested"
    )
    assert cluster.state(jid) == "RUNNING", "the job finished before the TaskManager was killed"
    killed_at = time.time()
    cluster.script("kill-taskmanager", "1")
    # the job restarts on the surviving TaskManager's 2 slots; the new one joins for later
    restored = wait_restored(
        cluster, jid, "the job to restore its latest checkpoint and run again", 120
    )
    recovery_s = time.time() - killed_at
    assert not restored["is_savepoint"], restored
    cluster.script("add-taskmanager")
    phases(f"TaskManager killed (trainer at step {consumed_at_kill}), job restored")

    # the trainer reads on through the restore and stops after STOP_AFTER (its "checkpoint")
    finish(trainer, timeout_s=240)
    before = read_record(record1)
    assert sorted((r["step"], r["rank"]) for r in before) == [
        (s, r) for s in range(STOP_AFTER + 1) for r in range(WORLD_SIZE)
    ]
    report_recovery("TaskManager kill", restored, recovery_s, before, killed_at, SLOW_STEP_MS)
    config = {e["key"]: e["value"] for e in cluster.rest("/jobmanager/config")}
    assert {k: config.get(k) for k in RECOVERY_SETTINGS} == RECOVERY_SETTINGS
    assert [consumed(d) for d in rank_dirs] == [STOP_AFTER] * WORLD_SIZE
    # with the trainer down the job runs up to its prefetch bound and no further
    bound = STOP_AFTER + PREFETCH_DEPTH
    wait_for(
        f"every rank's batch {bound} (the prefetch bound)",
        120,
        lambda: all(bound in steps_on_disk(d) for d in rank_dirs),
    )
    _check_metrics(cluster, jid)  # takes a few seconds: the job had time to overshoot
    for d in rank_dirs:
        assert steps_on_disk(d) == list(range(STOP_AFTER + 1, bound + 1)), d
    assert cluster.state(jid) == "RUNNING"
    phases("trainer stopped, job idle at the prefetch bound, metrics read")

    # a savepoint while the trainer is down (the job idles, so it completes), then cancel
    savepoint = _savepoint(cluster, jid)
    cluster.flink("cancel", jid)
    wait_state(cluster, jid, "CANCELED", "the job to be cancelled", 60)
    phases("savepoint and cancel")

    # resume from the savepoint with another parallelism and the trainer's step
    jid2 = submit(cluster, out, dataset, "-s", savepoint, "-p", "3", resume=str(STOP_AFTER))
    gen2 = wait_for(
        "the resumed job's new generation in manifest.json",
        120,
        lambda: (g := generation(job_dir)) != gen1 and g,
    )
    assert manifest(job_dir)["first_step"] == STOP_AFTER + 1
    trainer2 = start_trainer(job_dir, record2, procs, start_step=STOP_AFTER + 1)
    # the rest of the epoch is short: a fast run can be over before a poll sees it RUNNING
    wait_for(
        "the resumed job to run",
        120,
        lambda: cluster.running(jid2) or cluster.state(jid2) == "FINISHED",
        explain=lambda: cluster.describe(jid2),
    )
    restored = wait_for(
        "the resumed job to report its restore",
        60,
        lambda: (cluster.checkpoints(jid2).get("latest") or {}).get("restored"),
    )
    assert restored["is_savepoint"], restored
    assert restored["external_path"].rstrip("/").endswith(savepoint.rstrip("/").rsplit("/", 1)[-1])
    assert cluster.vertex(jid2, "arrow-shm-sink")["parallelism"] == 3
    finish(trainer2, timeout_s=300)
    wait_state(cluster, jid2, "FINISHED", "the resumed job to finish", 60)
    phases("resumed run")

    # --- the trainers' view: every batch exactly once, identical to the reference -------------
    assert_read_once_as(reference, before + read_record(record2), what="uninterrupted run")
    # Exactly once on the sink's side too: a batch published again after the trainer consumed it
    # would stay behind as a file nobody reads. Older generations are gone.
    assert_only_generation_left(job_dir, gen2)


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
    sink_metrics = wait_for(
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
    pre = wait_for(
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
