"""Repeated resumes on one cluster: six jobs in a row on the same TaskManager JVM.

A standalone cluster (``scripts/cluster.sh``) with ONE TaskManager, so every job runs in the same
JVM. The dataset mixes the demo's generated records (JPEG, PNG, GIF, WebP, BMP) with CMYK JPEGs
from the bad-input corpus, which libjpeg-turbo leaves to ImageIO (TwelveMonkeys' reader): every
job decodes through ImageIO and libwebp, the two libraries that used to register job classes
JVM-wide (ImageIO's plugin registry; a JNI library, one class loader per JVM).

1. Job 0 runs the whole epoch uninterrupted with a recording trainer: the reference.
2. Jobs 1..5: each is submitted (job 1 fresh, the others with ``-s <savepoint>
   --stoker.resume-step S``), a trainer reads steps S+1 .. its stop step and exits, the job idles
   at its prefetch bound and is stopped with ``flink stop --savepointPath`` (it must end
   FINISHED); job 5 runs to the end of the epoch. Every job must reach RUNNING, restart never
   (no exception in its history), decode WebP with libwebp (``webpDecoderNative`` = 1) and end
   FINISHED.
3. The five trainers together read every (step, rank) exactly once, with the reference's SHA-256.
4. After each job the TaskManager's loaded classes and metaspace are measured (``jcmd GC.run``,
   then ``jstat``) and its live user-code class loaders counted (``jcmd VM.classloader_stats``).
   After every job at most one job class loader may be alive (ImageIO's JVM-global registry
   keeps the first job that touched ImageIO, job 0: ``ImageReaders``), and the growth from after
   job 1 to after job 5 must stay within ``GOAL_CLASSES_PER_JOB`` classes and
   ``GOAL_METASPACE_KB_PER_JOB`` KiB of metaspace per job. A leaked job class loader holds ~1,450
   classes and ~9.4 MiB of metaspace: that is what every job left before the job's Jackson mappers
   stopped using Jackson's thread-local buffer pool (``dev.stoker.operators.json.Json``; the
   trainer gauges of the sink read ``ack.json`` on the TaskManager's ``flink-metrics-N``
   threads, which outlive every job).

While job 1 idles, every REST metric id of the operator guide's "Watch" table (but the S3 fetch
ones, which only a job reading S3 has) is read from its REST API, from the vertex the table names
for its operator. The measured numbers are printed
(``-s`` shows them).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import trainers
from harness.cluster import (
    JOB_NAME,
    WORLD_SIZE,
    Cluster,
    kill_all,
    reference_run,
    started_cluster,
    stop_with_savepoint,
    submit,
    wait_state,
)
from harness.exactly_once import assert_read_once_as
from harness.jobs import generate_records
from harness.paths import REPO_ROOT, SHARED
from harness.polling import wait_for

GENERATED_RECORDS = 32
CMYK_RECORDS = 20
RECORDS = GENERATED_RECORDS + CMYK_RECORDS
NUM_STEPS = -(-RECORDS // (WORLD_SIZE * 2))  # micro-batch 2 (harness.cluster.submit): 13
# The trainer of job k stops after STOPS[k-1]; job 5's trainer reads to the end.
STOPS = [1, 3, 5, 7]
# Growth bounds per job once the first job loaded what stays (the cluster's lib/ classes, JIT);
# measured: +22 classes and +323 KiB per job from job 1 to job 5. A leaked job class loader
# holds ~1,450 classes and ~9.4 MiB of metaspace.
GOAL_CLASSES_PER_JOB = 300
GOAL_METASPACE_KB_PER_JOB = 2048


@pytest.fixture(scope="module")
def dataset() -> Iterator[Path]:
    """Generated records plus CMYK JPEG records (images copied from the bad-input corpus)."""
    d = Path(tempfile.mkdtemp(prefix="stoker-reuse-dataset-"))
    try:
        generate_records(d, GENERATED_RECORDS)
        cmyk = SHARED / "bad-inputs" / "cmyk-jpeg"
        shutil.copytree(cmyk / "images", d / "cmyk")
        files = ["cmyk_adobe.jpg", "pil_sample_cmyk.jpg"]
        with (d / "cmyk.jsonl").open("w") as f:
            for i in range(CMYK_RECORDS):
                record = {
                    "id": f"cmyk-{i}",
                    "image": f"cmyk/{files[i % 2]}",
                    "conversations": [
                        {"from": "human", "value": f"<image>\nWhat is in picture {i}?"},
                        {"from": "gpt", "value": f"Picture {i} shows a test pattern."},
                    ],
                }
                f.write(json.dumps(record) + "\n")
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    for tool in ("jcmd", "jstat"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} (the JDK's) is needed to measure the TaskManager's classes")
    with started_cluster(
        "e2e-cluster-reuse",
        "-D",
        "taskmanager.numberOfTaskSlots=4",
        "-D",
        "metrics.fetcher.update-interval=1000",
        # a job that fails must show here, not restart for minutes
        "-D",
        "restart-strategy.type=none",
        env={"STOKER_TASKMANAGERS": "1"},
    ) as c:
        yield c


def _tm_pid(cluster: Cluster) -> int:
    return int((cluster.run_dir / "pid" / "taskmanager-1.pid").read_text().strip())


def _jvm_classes(cluster: Cluster) -> tuple[int, float, int]:
    """(loaded classes, metaspace used in KiB, live user-code class loaders) of the TaskManager.

    Waits until the TaskManager has freed every slot (Flink then releases the finished job's
    class loader), runs ``GC.run`` twice (class unloading happens in a full GC), reads ``jstat
    -class`` (loaded minus unloaded), ``jstat -gc`` (``MU``) and ``jcmd VM.classloader_stats`` (Flink's
    user-code class loaders, ``ChildFirstClassLoader``, still alive).
    """
    wait_for(
        "the TaskManager to free every slot",
        60,
        lambda: all(
            tm["freeSlots"] == tm["slotsNumber"]
            for tm in cluster.rest("/taskmanagers")["taskmanagers"]
        ),
    )
    time.sleep(2)
    pid = str(_tm_pid(cluster))
    for _ in range(2):
        subprocess.run(["jcmd", pid, "GC.run"], check=True, capture_output=True, timeout=60)
    cls = subprocess.run(["jstat", "-class", pid], check=True, capture_output=True, text=True)
    head, row = cls.stdout.split("\n")[:2]
    c = dict(zip(head.split(), row.split(), strict=True))
    gc = subprocess.run(["jstat", "-gc", pid], check=True, capture_output=True, text=True)
    head, row = gc.stdout.split("\n")[:2]
    g = dict(zip(head.split(), row.split(), strict=True))
    stats = subprocess.run(
        ["jcmd", pid, "VM.classloader_stats"], check=True, capture_output=True, text=True
    )
    loaders = sum("ChildFirstClassLoader" in line for line in stats.stdout.splitlines())
    return int(c["Loaded"]) - int(c["Unloaded"]), float(g["MU"]), loaders


def _webp_native(cluster: Cluster, jid: str) -> float | None:
    """The smallest ``webpDecoderNative`` over the preprocess subtasks (None: not reported yet)."""
    v = cluster.vertex(jid, "preprocess-images")
    base = f"/jobs/{jid}/vertices/{v['id']}/subtasks/metrics"
    got = cluster.rest(f"{base}?get=preprocess-images.webpDecoderNative&agg=min")
    return float(got[0]["min"]) if got and "min" in got[0] else None


def _readme_metric_ids() -> tuple[dict[str, list[str]], dict[str, str]]:
    """docs/operator-guide.md "Watch" table: operator -> REST metric ids (``<r>`` -> 0), S3-only
    ones left out, and operator -> the start of the web UI vertex's name it gives (``...``: the
    name goes on)."""
    readme = (REPO_ROOT / "docs" / "operator-guide.md").read_text()
    table = readme[readme.index("| operator | vertex in the web UI | REST metric id |") :]
    ids: dict[str, list[str]] = {}
    vertices: dict[str, str] = {}
    for row in table.split("\n\n", 1)[0].splitlines()[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        operator, rest_ids = cells[0].strip("`"), cells[2].split("S3:", 1)[0]
        vertices[operator] = cells[1].strip("`")
        for metric in re.findall(r"`([^`]+)`", rest_ids):
            ids.setdefault(operator, []).append(
                metric.replace("<r>", "0").replace("<REASON>", "IMAGE_NOT_FOUND")
            )
    return ids, vertices


def _check_readme_metrics(cluster: Cluster, jid: str) -> None:
    """Every REST metric id of the operator guide's table (but S3's) exists on the running job, on
    the vertex the table names."""
    documented, vertices = _readme_metric_ids()
    assert set(documented) == {
        "jsonl-source",
        "arrow-shm-sink",
        "fetch-images",
        "preprocess-images",
        "dead-letter-accounting",
    }, documented
    missing = {}
    for operator, ids in documented.items():
        vertex = cluster.vertex(jid, operator)
        named = vertices[operator]
        assert vertex["name"].startswith(named.removesuffix("...")), (
            f"operator guide: {operator}'s vertex is {named!r}; the job's is {vertex['name']!r}"
        )
        base = f"/jobs/{jid}/vertices/{vertex['id']}/subtasks/metrics"
        have = wait_for(
            f"the metrics of {operator}",
            30,
            lambda b=base, want=ids: (
                (m := {x["id"] for x in cluster.rest(b)}) and set(want) <= m and m
            ),
            explain=lambda b=base, want=ids: (
                f"missing: {sorted(set(want) - {x['id'] for x in cluster.rest(b)})}"
            ),
        )
        missing.update({i: operator for i in ids if i not in have})
    assert missing == {}, f"operator guide metric ids the job does not report: {missing}"


def _no_restarts(cluster: Cluster, jid: str) -> None:
    entries = cluster.rest(f"/jobs/{jid}/exceptions").get("exceptionHistory", {}).get("entries", [])
    assert entries == [], f"job {jid} failed and restarted:\n{cluster.describe(jid)}"


def test_six_jobs_in_a_row_on_one_taskmanager_resume_exactly_once(
    cluster: Cluster, dataset: Path
) -> None:
    procs: list[subprocess.Popen[str]] = []
    try:
        _jobs_in_a_row(cluster, dataset, procs)
    finally:
        kill_all(procs)


def _jobs_in_a_row(cluster: Cluster, dataset: Path, procs: list[subprocess.Popen[str]]) -> None:
    base = cluster.shm
    measured: list[tuple[str, int, float, int]] = []

    def measure(what: str) -> None:
        measured.append((what, *_jvm_classes(cluster)))
        print(f"TaskManager {measured[-1]}", file=sys.stderr)

    measure("cluster started")

    # job 0: the reference, uninterrupted
    ref_jid, reference = reference_run(cluster, base, dataset, procs, NUM_STEPS)
    _no_restarts(cluster, ref_jid)
    measure("after job 0 (reference)")

    # jobs 1..5 on the same TaskManager: stop with a savepoint, resume from it
    out = base / "run"
    job_dir = out / JOB_NAME
    records: list[dict[str, Any]] = []
    savepoint, resume, gen = "", -1, None
    for k, stop in enumerate([*STOPS, None], start=1):
        extra = ("-s", savepoint) if savepoint else ()
        jid = submit(cluster, out, dataset, *extra, resume=str(resume) if resume >= 0 else "")
        gen = wait_for(
            f"job {k}'s new generation in manifest.json",
            120,
            lambda old=gen: (g := trainers.generation(job_dir)) != old and g,
            explain=lambda j=jid: cluster.describe(j),
        )
        assert trainers.manifest(job_dir)["first_step"] == resume + 1
        record = base / f"run-{k}.jsonl"
        trainer = trainers.start_trainer(
            job_dir,
            record,
            procs,
            start_step=resume + 1 if resume >= 0 else None,
            stop_after_step=stop,
        )
        wait_for(
            f"job {k} to run",
            120,
            lambda j=jid: cluster.running(j) or cluster.state(j) == "FINISHED",
            explain=lambda j=jid: cluster.describe(j),
        )
        trainers.finish(trainer, timeout_s=240)
        records += trainers.read_record(record)
        if stop is not None:
            rank_dirs = [job_dir / f"gen-{gen}" / f"rank-{r}" for r in range(WORLD_SIZE)]
            assert [trainers.consumed(d) for d in rank_dirs] == [stop] * WORLD_SIZE
            bound = min(stop + 4, NUM_STEPS - 1)  # prefetch depth 4 (harness.cluster.submit)
            wait_for(
                f"job {k} to reach its prefetch bound {bound}",
                120,
                lambda b=bound, ds=rank_dirs: all(b in trainers.steps_on_disk(d) for d in ds),
                explain=lambda j=jid: cluster.describe(j),
            )
            wait_for(
                f"job {k}'s webpDecoderNative gauge",
                30,
                lambda j=jid: _webp_native(cluster, j) is not None,
            )
            assert _webp_native(cluster, jid) == 1.0, f"job {k} decodes WebP without libwebp"
            if k == 1:
                _check_readme_metrics(cluster, jid)
            _no_restarts(cluster, jid)
            savepoint, resume = stop_with_savepoint(cluster, jid), stop
        else:
            wait_state(cluster, jid, "FINISHED", f"job {k} to finish", 60)
            _no_restarts(cluster, jid)
        measure(f"after job {k}")

    report = "\n".join(
        f"  {what}: {n} classes, metaspace {mu:.0f} KiB, {cl} job class loaders alive"
        for what, n, mu, cl in measured
    )
    (_, c1, m1, _), (_, c5, m5, _) = measured[2], measured[-1]
    per_job_classes, per_job_kb = (c5 - c1) / 4, (m5 - m1) / 4
    print(
        f"TaskManager classes/metaspace:\n{report}\n"
        f"  growth per job (job 1 -> job 5): {per_job_classes:+.0f} classes, "
        f"{per_job_kb:+.0f} KiB metaspace",
        file=sys.stderr,
    )

    # exactly once across the five jobs, identical to the reference
    assert_read_once_as(reference, records)
    left = sorted(str(p.relative_to(job_dir)) for p in job_dir.glob("gen-*/rank-*/step-*"))
    assert left == [], f"batch files left: {left}"

    # no job's class loader stays but the one ImageIO's registry keeps (point 4 of the docstring)
    leaked = [(what, cl) for what, _, _, cl in measured[1:] if cl > 1]
    assert leaked == [], f"job class loaders left in the TaskManager:\n{report}"
    assert per_job_classes <= GOAL_CLASSES_PER_JOB, f"classes grow per job:\n{report}"
    assert per_job_kb <= GOAL_METASPACE_KB_PER_JOB, f"metaspace grows per job:\n{report}"
