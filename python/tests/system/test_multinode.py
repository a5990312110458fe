"""One Flink job feeding 2 GPU nodes x 2 ranks from 2 CPU nodes, every process inside its node.

Issue 21, "Done when" 1 and 2, on simulated nodes (``scripts/nodes.sh``: a network namespace with
its own address, ``tc`` rate and ``/dev/shm`` per node; docs/multi-node.md):

* node ``s3``: the testkit's S3 server (S3Proxy) bound to that node's address, holding a
  three-source mixture (``mixture.yaml`` and one generated dataset with its images per source:
  one down-sampled, one up-sampled, one with its own pixel budget; issue 35); node ``ref``: the
  single-node reference run;
* ``cpu0``: the JobManager and a CPU TaskManager; ``cpu1``: a CPU TaskManager (both declare
  ``stoker-cpu``); ``gpu0``/``gpu1``: one edge TaskManager each (``stoker-node-<n>``, 2 slots) and
  two simulated trainers, one per rank, reading that node's ``/dev/shm``;
* checkpoints and savepoints on the host's file system (every node sees it; only ``/dev/shm`` is
  per node). The test itself runs on the host, which has no address on the nodes' bridge: it
  talks to the REST API and the Flink CLI through ``nodes.sh exec cpu0``.

1. The reference: the job on embedded Flink in node ``ref`` (one machine, today's single-node
   layout) with the same mixture, seed and W = 4, and one trainer reading all 4 ranks there.
2. The multi-node run (``stoker.topology.nodes 2``, ``placement EDGE``, the edge sinks' ack
   addresses), with slow trainers that stop after step ``STOP_AFTER``. The subtask placement is
   read back from the REST API: every sink of node n on the TaskManager at gpu<n>'s address, no
   other subtask on an edge TaskManager.
3. gpu1's trainers are paused (SIGSTOP) while gpu0's go on: every rank comes to the bound (the
   lowest acknowledged step + depth: a step is one split for all ranks) and stays there; the
   checkpoints of the next ``PAUSE_S`` seconds must complete (their durations are printed).
4. The CPU TaskManager of cpu1 is SIGKILLed: the job restores its latest checkpoint on cpu0's
   TaskManager; a new CPU TaskManager joins in cpu1.
5. gpu1's edge TaskManager is SIGKILLed and a new one started in gpu1: its trainers wait (their
   longest wait is printed), then continue.
6. The trainers stop after ``STOP_AFTER``; the job idles at its prefetch bound (checked per rank
   on both GPU nodes) and is stopped with a savepoint, then resumed from it with another
   parallelism for the CPU stages (``-p 3``) and ``--stoker.resume-step STOP_AFTER``; new trainers
   read the rest.

The four trainers together must have read every (step, rank) exactly once, each batch with the
reference's SHA-256, and leave no batch file behind. A sampler checks throughout that no rank ever
has more than ``PREFETCH_DEPTH`` batches written beyond its acknowledged step. Every process and
node is removed in ``finally`` (``nodes.sh down`` under a random prefix), also on failure.

Needs root (network namespaces); as another user it fails, never skips.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.cluster import JAR, Phases, job_id, kill_all, stop_with_savepoint, wait_state
from harness.exactly_once import assert_only_generation_left, assert_read_once_as
from harness.jobs import generate_records
from harness.paths import REPO_ROOT, TOKENIZER_DIR, require_shared
from harness.polling import wait_for
from harness.trainers import (
    consumed,
    finish,
    generation,
    read_record,
    start_trainer,
    steps_on_disk,
)
from stoker_tools.demo import S3_CREDENTIALS, job_command
from stoker_tools.job import flink_run_args
from stoker_tools.nodes import CPU_RESOURCE, NodeCluster, Nodes, S3Server, node_resource

JOB_NAME = "stoker-multinode"
GPU_NODES = 2
RANKS_PER_NODE = 2
WORLD_SIZE = GPU_NODES * RANKS_PER_NODE
MICRO_BATCH = 2
#: the mixture's sources: (name, records generated, the spec's share and settings)
SOURCES = (
    ("chat", 64, "count: 40"),  # down-sampled
    ("ocr", 48, "repeat: 1.5"),  # up-sampled to 72
    ("charts", 32, "max_pixels: 100352"),  # once, with its own pixel budget
)
RECORDS = 40 + 72 + 32  # per epoch
NUM_STEPS = -(-RECORDS // (WORLD_SIZE * MICRO_BATCH))  # 18
PREFETCH_DEPTH = 3
STOP_AFTER = 13
SLOW_STEP_MS = 1000
#: every node's network card; the links are not what this test is about
RATE = "1gbit"
#: output root inside each node (its own /dev/shm)
OUTPUT_ROOT = "/dev/shm/stoker-mn"
REST_PORT = 8081
#: port of the first sink subtask's ack endpoint on each GPU node (subtask k: ACK_PORT + k)
ACK_PORT = 7070
S3_PORT = 9000
BUCKET = "stoker-mn"
DATASET_URI = f"s3://{BUCKET}/dataset"
MIXTURE_URI = f"{DATASET_URI}/mixture.yaml"
SINK_PREFIX = "arrow-shm-sink-node-"
#: states of a subtask that is (or was, FINISHED) on its TaskManager
PLACED = ("DEPLOYING", "INITIALIZING", "RUNNING", "FINISHED")
#: most bytes a node's sinks may receive per byte of sample payload (uint8 pixels, int64 tokens):
#: record framing, the file names of the record references, checkpoint barriers
WIRE_OVERHEAD = 1.02
#: how long gpu1's trainers stay paused (the checkpoints of that window are measured)
PAUSE_S = 10.0


def _require_root() -> None:
    if os.geteuid() != 0:
        pytest.fail(
            "the multi-node test runs every process inside simulated nodes (scripts/nodes.sh: "
            "network namespaces, a bridge, mounts), which needs root: run the tests as root, as "
            "CI does"
        )


def check_placement(cluster: NodeCluster, jid: str, cpu_parallelism: int) -> str:
    """Every sink of node n on the TaskManager at gpu<n>'s address, every other subtask on a CPU
    node's TaskManager; read from the REST API. The placement table, for the log."""
    addresses = cluster.tm_addresses()
    node_of = {a: n for n, a in cluster.nodes.address.items()}
    table = cluster.placement(jid)
    lines, wrong = [], []
    sinks: dict[int, int] = collections.Counter()
    for vertex, subtask, status, tm in table:
        node = node_of.get(addresses.get(tm, ""), "?")
        lines.append(f"  {vertex[:70]:70} #{subtask} {status:9} {tm:15} {node}")
        if status not in PLACED:
            wrong.append(f"{vertex} #{subtask} is {status}")
            continue
        m = re.search(re.escape(SINK_PREFIX) + r"(\d+)", vertex)
        if m:
            sinks[int(m.group(1))] += 1
            if node != f"gpu{m.group(1)}":
                wrong.append(f"{vertex} #{subtask} on {tm} in {node}")
        elif node not in ("cpu0", "cpu1"):
            wrong.append(f"CPU-stage {vertex} #{subtask} on {tm} in {node}")
    text = "\n".join(lines)
    assert wrong == [], f"misplaced subtasks: {wrong}\n{text}"
    assert sinks == {n: RANKS_PER_NODE for n in range(GPU_NODES)}, f"sinks per node {sinks}\n{text}"
    cpu_vertices = {v for v, _, _, _ in table if SINK_PREFIX not in v}
    assert any(
        sum(1 for v2, _, _, _ in table if v2 == v) == cpu_parallelism for v in cpu_vertices
    ), f"no CPU-stage vertex with parallelism {cpu_parallelism}\n{text}"
    return text


def check_wire_bytes(
    cluster: NodeCluster, jid: str, reference: list[dict[str, Any]], last_step: int
) -> str:
    """Each node's sinks received (Flink's task metric ``numBytesIn`` summed over the sink
    vertex's subtasks: what its network stack delivered) the ``sample_bytes`` of steps
    ``0..last_step`` of its ranks in the single-node ``reference`` (the same batches; what the
    trainers read, see ``stoker_tools.simulate``), within ``WIRE_OVERHEAD``: the exchange carries
    resized uint8 pixels and int64 tokens, nothing padded or normalised. For a job that has
    received exactly those steps and no failure yet. The report."""
    lines = []
    steps = last_step + 1
    slots = steps * MICRO_BATCH * RANKS_PER_NODE  # one record per slot of the node's ranks
    for n in range(GPU_NODES):
        (vertex,) = [v for v in cluster.job(jid)["vertices"] if f"{SINK_PREFIX}{n}" in v["name"]]
        ranks = range(n * RANKS_PER_NODE, (n + 1) * RANKS_PER_NODE)
        mine = [b for b in reference if b["rank"] in ranks and b["step"] <= last_step]
        payload = sum(b["sample_bytes"] for b in mine)

        def counts(vertex_id: str = vertex["id"], payload: int = payload) -> tuple[int, int] | None:
            got = cluster.rest(
                f"/jobs/{jid}/vertices/{vertex_id}/subtasks/metrics"
                "?get=numBytesIn,numRecordsIn&agg=sum"
            )
            sums = {m["id"]: float(m["sum"]) for m in got}
            wire, records = int(sums.get("numBytesIn", 0)), int(sums.get("numRecordsIn", 0))
            return (wire, records) if records == slots and wire >= payload else None

        # the JobManager's metric store catches up with the TaskManagers in its fetch interval, and
        # not every counter of a subtask at once: once its records were counted while its bytes
        # still read 336 of 8.1 MB (seen in a CI run on 2026-12-03), so wait for both
        wire, records = wait_for(
            f"gpu{n}'s sinks to report {slots} records and at least the {payload} bytes of their "
            "samples received",
            30,
            counts,
            interval_s=1,
            explain=lambda vertex=vertex: _byte_metrics(cluster, jid, vertex),
        )
        samples = sum(b["rows"] - len(b["backfilled"]) for b in mine)
        lines.append(
            f"gpu{n}: sinks received {wire} bytes in {records} records for steps 0..{last_step} "
            f"({wire / samples / 1024:.1f} KiB per sample, {wire / steps / 2**20:.2f} MiB per "
            f"step into the node); those samples' uint8 pixels and int64 tokens: {payload} bytes "
            f"({wire / payload:.4f}x)"
        )
        if not payload <= wire <= payload * WIRE_OVERHEAD:
            pytest.fail(f"{lines[-1]}\n{_byte_metrics(cluster, jid, vertex)}")
    return "bytes on the wire:\n  " + "\n  ".join(lines)


def _byte_metrics(cluster: NodeCluster, jid: str, vertex: dict[str, Any]) -> str:
    """For a failed wire check: each subtask's byte and record counters (every metric of the
    vertex whose name has ``Bytes`` or ``Records``), as the JobManager's metric store has them."""
    base = f"/jobs/{jid}/vertices/{vertex['id']}/subtasks"
    names = sorted(
        m["id"]
        for m in cluster.rest(f"{base}/metrics")
        if "Bytes" in m["id"] or "Records" in m["id"]
    )
    out = [f"{vertex['name']} byte and record metrics per subtask:"]
    for i in range(int(vertex["parallelism"])):
        got = cluster.rest(f"{base}/{i}/metrics?get={','.join(names)}") if names else []
        out.append(f"  #{i}: " + ", ".join(f"{m['id']}={m['value']}" for m in got))
    return "\n".join(out)


class BoundSampler(threading.Thread):
    """Samples every rank's directory on its GPU node: the highest step written minus the rank's
    acknowledged step (``ack.json`` read after the listing, so a sample never overstates it).
    Before the rank's first acknowledgement in a generation the acknowledged step is the
    generation's ``first_step - 1`` (the trainer resumes after it), as the gate counts."""

    def __init__(self, nodes: Nodes) -> None:
        super().__init__(name="bound-sampler", daemon=True)
        self.nodes = nodes
        self.stop_event = threading.Event()
        self.max_ahead: dict[int, int] = {}
        self.samples = 0

    def run(self) -> None:
        while not self.stop_event.wait(0.2):
            for rank in range(WORLD_SIZE):
                job_dir = _job_dir(self.nodes, f"gpu{rank // RANKS_PER_NODE}")
                try:
                    manifest = json.loads((job_dir / "manifest.json").read_text())
                    rank_dir = job_dir / f"gen-{manifest['generation']}" / f"rank-{rank}"
                    steps = steps_on_disk(rank_dir)
                except (OSError, ValueError, KeyError):
                    continue
                if not steps:
                    continue
                ahead = steps[-1] - max(consumed(rank_dir), int(manifest["first_step"]) - 1)
                self.max_ahead[rank] = max(self.max_ahead.get(rank, ahead), ahead)
                self.samples += 1


def _reached(rank_dirs: Iterable[Path]) -> list[int]:
    """Per rank the highest step written: on disk, or consumed (the reader removed it)."""
    return [max([*steps_on_disk(d), consumed(d)]) for d in rank_dirs]


def _job_dir(nodes: Nodes, node: str) -> Path:
    return nodes.shm(node) / "stoker-mn" / JOB_NAME


def _trainer(
    nodes: Nodes,
    node: str,
    root: str,
    ranks: str,
    record: Path,
    procs: list[subprocess.Popen[str]],
    **options: Any,
) -> subprocess.Popen[str]:
    """:func:`harness.trainers.start_trainer` of ``ranks`` inside ``node`` (its /dev/shm)."""

    def popen(args: list[str], **kwargs: Any) -> subprocess.Popen[str]:
        return nodes.popen(node, *args, env={"PYTHONPATH": str(REPO_ROOT / "python")}, **kwargs)

    return start_trainer(root, record, procs, ranks=ranks, timeout_s=180, popen=popen, **options)


def _job_options(s3_endpoint: str) -> dict[str, str]:
    """The options every run shares: the mixture on S3, the shape, the prefetch depth."""
    return {
        "stoker.mixture.path": MIXTURE_URI,
        "stoker.tokenizer.path": str(TOKENIZER_DIR),
        "stoker.job-name": JOB_NAME,
        "stoker.dp-world-size": str(WORLD_SIZE),
        "stoker.micro-batch-size": str(MICRO_BATCH),
        "stoker.prefetch-depth": str(PREFETCH_DEPTH),
        "stoker.image.max-pixels": "200704",
        "s3.endpoint": s3_endpoint,
        "s3.path.style.access": "true",
    }


def _submit(cluster: NodeCluster, s3_endpoint: str, *extra: str, resume: int | None = None) -> str:
    ack = ";".join(f"{cluster.nodes.address[f'gpu{n}']}:{ACK_PORT}" for n in range(GPU_NODES))
    options = {
        **_job_options(s3_endpoint),
        "stoker.output.root": OUTPUT_ROOT,
        "stoker.topology.nodes": str(GPU_NODES),
        "stoker.topology.placement": "EDGE",
        "stoker.topology.ack-addresses": ack,
        "execution.checkpointing.interval": "1s",
        "execution.checkpointing.min-pause": "0s",
        **({"stoker.resume-step": str(resume)} if resume is not None else {}),
    }
    return job_id(cluster.flink(*flink_run_args(options, "-d", *extra, jar=JAR)))


def reference_run(
    nodes: Nodes, s3_endpoint: str, base: Path, procs: list[subprocess.Popen[str]]
) -> list[dict[str, Any]]:
    """Today's single-node layout in node ``ref``: the job on embedded Flink (the demo's command)
    writing every rank into that node's /dev/shm, one trainer reading all ranks there."""
    record, log, out = (
        base / "reference.jsonl",
        base / "reference-job.log",
        base / "reference-job.out",
    )
    options = {**_job_options(s3_endpoint), "stoker.output.root": "/dev/shm/stoker-ref"}
    cmd = job_command(REPO_ROOT, TOKENIZER_DIR, None, options, log)
    with out.open("w") as f:
        job = nodes.popen(
            "ref",
            *cmd,
            # the S3 plugin (the JSONL) and the image fetch take the keys from the AWS chain
            env={
                **S3_CREDENTIALS,
                "FLINK_PLUGINS_DIR": str(REPO_ROOT / "job" / "target" / "plugins"),
            },
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    procs.append(job)
    trainer = _trainer(
        nodes,
        "ref",
        f"/dev/shm/stoker-ref/{JOB_NAME}",
        ",".join(map(str, range(WORLD_SIZE))),
        record,
        procs,
    )
    while trainer.poll() is None:
        rc = job.poll()
        if rc is not None and rc != 0:
            pytest.fail(f"the reference job failed ({rc}):\n{out.read_text()[-3000:]}")
        time.sleep(0.5)
    finish(trainer, timeout_s=10)
    try:
        rc = job.wait(timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the reference job did not end after its trainer; see {log}")
    assert rc == 0, f"the reference job failed ({rc}):\n{out.read_text()[-3000:]}"
    reference = read_record(record)
    assert sorted((r["step"], r["rank"]) for r in reference) == [
        (s, r) for s in range(NUM_STEPS) for r in range(WORLD_SIZE)
    ]
    return reference


def _restored_since(cluster: NodeCluster, jid: str, t: float) -> bool:
    """The job runs, restored from a checkpoint after Unix time ``t``."""
    if not cluster.running(jid):
        return False
    restored = (cluster.checkpoints(jid).get("latest") or {}).get("restored") or {}
    return (
        bool(restored)
        and restored["restore_timestamp"] >= t * 1000
        and not restored["is_savepoint"]
    )


def _checkpoints_between(cluster: NodeCluster, jid: str, t0_ms: int, t1_ms: int) -> list[dict]:
    history = cluster.checkpoints(jid).get("history", [])
    return sorted(
        (c for c in history if t0_ms <= c["trigger_timestamp"] <= t1_ms), key=lambda c: c["id"]
    )


def write_mixture(dataset: Path) -> None:
    """One generated dataset per source under ``dataset`` and the spec beside them
    (``mixture.yaml``, relative paths: on S3 they resolve under ``DATASET_URI``)."""
    lines = ["sources:"]
    for name, records, share in SOURCES:
        generate_records(dataset / name, records)
        lines += [f"  - name: {name}", f"    path: {name}", f"    {share}"]
    (dataset / "mixture.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def base() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="stoker-multinode-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_multinode_feed_survives_failures_and_rescale(base: Path) -> None:
    _require_root()
    require_shared()
    if not JAR.is_file():
        pytest.fail(f"{JAR} is missing: run ./stoker test (or mvn package)")
    nodes = Nodes()
    phases = Phases()
    procs: list[subprocess.Popen[str]] = []
    cluster: NodeCluster | None = None
    s3: S3Server | None = None
    sampler = BoundSampler(nodes)
    try:
        nodes.up({n: RATE for n in ("cpu0", "cpu1", "gpu0", "gpu1", "s3", "ref")})
        dataset = base / "dataset"
        write_mixture(dataset)
        s3 = S3Server(nodes, dataset, DATASET_URI, base / "s3", base / "s3proxy.err", port=S3_PORT)
        s3_env = {**S3_CREDENTIALS}
        phases("nodes up, dataset on S3")

        reference = reference_run(nodes, s3.endpoint, base, procs)
        phases("reference run (embedded, one node)")

        cluster = NodeCluster(nodes, base / "cluster", s3_env)
        cluster.start(
            "-D",
            f"s3.endpoint={s3.endpoint}",
            "-D",
            "s3.path.style.access=true",
            "-D",
            f"s3.access-key={S3_CREDENTIALS['AWS_ACCESS_KEY_ID']}",
            "-D",
            f"s3.secret-key={S3_CREDENTIALS['AWS_SECRET_ACCESS_KEY']}",
            "-D",
            "metrics.fetcher.update-interval=1000",
        )
        cpu_tm = {n: cluster.add_taskmanager(n, CPU_RESOURCE, 2) for n in ("cpu0", "cpu1")}
        edge_tm = {
            n: cluster.add_taskmanager(f"gpu{n}", node_resource(n), RANKS_PER_NODE)
            for n in range(GPU_NODES)
        }
        phases("cluster up in the nodes")

        # --- the multi-node run ----------------------------------------------------------------
        jid = _submit(cluster, s3.endpoint, "-p", "2")
        node_root = f"{OUTPUT_ROOT}/{JOB_NAME}"
        records1 = {r: base / f"run1-rank{r}.jsonl" for r in range(WORLD_SIZE)}
        trainers = {
            r: _trainer(
                nodes,
                f"gpu{r // RANKS_PER_NODE}",
                node_root,
                str(r),
                records1[r],
                procs,
                step_time_ms=SLOW_STEP_MS,
                stop_after_step=STOP_AFTER,
            )
            for r in range(WORLD_SIZE)
        }
        sampler.start()
        wait_for(
            "the job to run",
            120,
            lambda: cluster.running(jid),
            explain=lambda: cluster.describe(jid),
        )
        print("placement:\n" + check_placement(cluster, jid, 2), file=sys.stderr)
        job_dirs = {n: _job_dir(nodes, f"gpu{n}") for n in range(GPU_NODES)}
        gens = {
            n: wait_for(f"gpu{n}'s manifest", 120, lambda n=n: generation(job_dirs[n]))
            for n in range(GPU_NODES)
        }
        rank_dirs = {
            r: job_dirs[r // RANKS_PER_NODE] / f"gen-{gens[r // RANKS_PER_NODE]}" / f"rank-{r}"
            for r in range(WORLD_SIZE)
        }
        wait_for(
            "every trainer's first acknowledgement and a completed checkpoint",
            180,
            lambda: (
                min(consumed(d) for d in rank_dirs.values()) >= 0
                and cluster.checkpoints(jid)["counts"]["completed"] >= 1
            ),
            explain=lambda: cluster.describe(jid),
        )
        phases("multi-node job running, placement checked")

        # gpu1's trainers pause; gpu0's go on until the job is at its prefetch bound
        paused = [trainers[r] for r in range(WORLD_SIZE) if r // RANKS_PER_NODE == 1]
        for p in paused:
            os.kill(p.pid, signal.SIGSTOP)
        paused_at = time.time()
        # a step is one split for all ranks: the gate's bound is the lowest ack + depth
        wait_for(
            "every rank at the prefetch bound (the job held at the gate by a stopped node)",
            120,
            lambda: (
                _reached(rank_dirs.values())
                == [min(consumed(d) for d in rank_dirs.values()) + PREFETCH_DEPTH] * WORLD_SIZE
            ),
        )
        held_at = time.time()
        time.sleep(PAUSE_S)
        during = _checkpoints_between(cluster, jid, int(held_at * 1000), int(time.time() * 1000))
        lowest = min(consumed(d) for d in rank_dirs.values())
        held = [s - lowest for s in _reached(rank_dirs.values())]
        # bytes on the wire, while the job is still held: it has received steps 0 .. lowest +
        # depth and nothing else (once the trainers go on, so does the job)
        wire_report = check_wire_bytes(cluster, jid, reference, lowest + PREFETCH_DEPTH)
        for p in paused:
            os.kill(p.pid, signal.SIGCONT)
        durations = [(c["id"], c["status"], c.get("end_to_end_duration")) for c in during]
        print(
            f"gpu1's trainers paused; every rank at the bound {held_at - paused_at:.1f}s later; "
            f"checkpoints triggered in the next {PAUSE_S:.0f}s: "
            + ", ".join(f"#{i} {s} {d} ms" for i, s, d in durations),
            file=sys.stderr,
        )
        assert held == [PREFETCH_DEPTH] * WORLD_SIZE, held
        print(wire_report, file=sys.stderr)
        completed = [c for c in during if c["status"] == "COMPLETED"]
        assert len(completed) >= 3 and not [c for c in during if c["status"] == "FAILED"], durations
        phases("gpu1's trainers paused, checkpoints measured")

        # a CPU node fails: SIGKILL cpu1's TaskManager; the job restores on cpu0's (its 2 slots)
        trainers_at = min(consumed(d) for d in rank_dirs.values())
        assert trainers_at + PREFETCH_DEPTH < STOP_AFTER, (
            f"the trainers are at step {trainers_at}: the restore after the kills would not be tested"
        )
        killed_at = time.time()
        cluster.kill_taskmanager(cpu_tm["cpu1"])
        wait_for(
            "the job to restore its latest checkpoint after the CPU TaskManager kill",
            180,
            lambda: _restored_since(cluster, jid, killed_at),
            interval_s=0.5,
            explain=lambda: cluster.describe(jid),
        )
        cpu_recovery_s = time.time() - killed_at
        check_placement(cluster, jid, 2)
        phases(f"CPU TaskManager killed (trainers at step {trainers_at}), job restored on cpu0")

        # a GPU node's edge TaskManager fails and comes back in its node
        trainers_at = min(consumed(d) for d in rank_dirs.values())
        assert trainers_at + PREFETCH_DEPTH < STOP_AFTER, (
            f"the trainers are at step {trainers_at}: the edge restore would not be tested"
        )
        edge_killed_at = time.time()
        cluster.kill_taskmanager(edge_tm[1])
        edge_tm[1] = cluster.add_taskmanager("gpu1", node_resource(1), RANKS_PER_NODE)
        wait_for(
            "the job to restore again with gpu1's new edge TaskManager",
            180,
            lambda: _restored_since(cluster, jid, edge_killed_at),
            interval_s=0.5,
            explain=lambda: cluster.describe(jid),
        )
        edge_recovery_s = time.time() - edge_killed_at
        check_placement(cluster, jid, 2)
        phases(f"edge TaskManager of gpu1 killed (trainers at step {trainers_at}) and restarted")
        # cpu1 back for the resume's 3 CPU slots (cpu0's TaskManager has 2)
        cpu_tm["cpu1"] = cluster.add_taskmanager("cpu1", CPU_RESOURCE, 2)
        phases("a new CPU TaskManager in cpu1")

        for t in trainers.values():
            finish(t, timeout_s=300)
        before = {r: read_record(records1[r]) for r in range(WORLD_SIZE)}
        for r in range(WORLD_SIZE):
            assert [b["step"] for b in before[r]] == list(range(STOP_AFTER + 1)), r
        stall = {
            r: max(
                (b["wait_s"] for b in before[r] if b["received_at"] >= edge_killed_at), default=0
            )
            for r in range(WORLD_SIZE)
        }
        print(
            f"CPU TaskManager kill: job restored after {cpu_recovery_s:.1f}s; edge TaskManager "
            f"kill + restart: job restored after {edge_recovery_s:.1f}s; the trainers' longest "
            f"wait for a batch after the edge kill: "
            + ", ".join(f"rank {r} {s:.1f}s" for r, s in stall.items()),
            file=sys.stderr,
        )
        # gpu1's trainers waited for their node's sinks to come back (a JVM start and a restore
        # take longer than the PREFETCH_DEPTH steps they had in hand), then read on
        assert all(s > 1.0 for r, s in stall.items() if r // RANKS_PER_NODE == 1), stall

        # the trainers are down after STOP_AFTER: every rank's batches up to the bound, no further
        bound = STOP_AFTER + PREFETCH_DEPTH
        wait_for(
            f"every rank's batch {bound} (the prefetch bound) on its node",
            120,
            lambda: all(bound in steps_on_disk(d) for d in rank_dirs.values()),
        )
        time.sleep(3)  # time to overshoot, if the gate let it
        for r, d in rank_dirs.items():
            assert steps_on_disk(d) == list(range(STOP_AFTER + 1, bound + 1)), (r, d)
        phases("trainers stopped, job idle at the prefetch bound on both GPU nodes")

        # stop with a savepoint, resume with another parallelism for the CPU stages
        savepoint = stop_with_savepoint(cluster, jid, timeout_s=120)
        phases("stopped with a savepoint")

        jid2 = _submit(cluster, s3.endpoint, "-s", savepoint, "-p", "3", resume=STOP_AFTER)
        gens2 = {
            n: wait_for(
                f"gpu{n}'s new generation",
                120,
                lambda n=n: (g := generation(job_dirs[n])) != gens[n] and g,
            )
            for n in range(GPU_NODES)
        }
        records2 = {r: base / f"run2-rank{r}.jsonl" for r in range(WORLD_SIZE)}
        trainers2 = [
            _trainer(
                nodes,
                f"gpu{r // RANKS_PER_NODE}",
                node_root,
                str(r),
                records2[r],
                procs,
                start_step=STOP_AFTER + 1,
            )
            for r in range(WORLD_SIZE)
        ]
        wait_for(
            "the resumed job to run",
            120,
            lambda: cluster.running(jid2) or cluster.state(jid2) == "FINISHED",
            explain=lambda: cluster.describe(jid2),
        )
        if cluster.state(jid2) == "RUNNING":
            print(
                "placement after the resume:\n" + check_placement(cluster, jid2, 3), file=sys.stderr
            )
        for t in trainers2:
            finish(t, timeout_s=300)
        wait_state(cluster, jid2, "FINISHED", "the resumed job to finish", 120)
        restored = cluster.checkpoints(jid2)["latest"]["restored"]
        assert restored["is_savepoint"], restored
        phases("resumed with -p 3 to the end")

        # --- the trainers' view: every batch exactly once, identical to the reference -------------
        sampler.stop_event.set()
        sampler.join()
        run = [b for r in range(WORLD_SIZE) for b in before[r] + read_record(records2[r])]
        assert_read_once_as(reference, run, what="single-node reference")
        print(
            f"prefetch bound: most batches written beyond the acknowledged step, per rank "
            f"({sampler.samples} samples): {dict(sorted(sampler.max_ahead.items()))}",
            file=sys.stderr,
        )
        assert sampler.samples > 0
        assert all(a <= PREFETCH_DEPTH for a in sampler.max_ahead.values()), sampler.max_ahead
        for n in range(GPU_NODES):
            assert_only_generation_left(job_dirs[n], gens2[n])
    finally:
        sampler.stop_event.set()
        kill_all(procs)  # also a SIGSTOPped one
        if cluster is not None:
            cluster.stop()
        if s3 is not None:
            s3.stop()
        # keep the logs of the last run next to the repo for CI
        keep = REPO_ROOT / ".stoker" / "logs" / "e2e-multinode"
        shutil.rmtree(keep, ignore_errors=True)
        keep.mkdir(parents=True)
        if cluster is not None and (cluster.run_dir / "log").is_dir():
            shutil.copytree(cluster.run_dir / "log", keep / "cluster")
        for f in [*base.glob("*.log"), *base.glob("*.out"), *base.glob("*.err")]:
            shutil.copy(f, keep)
        nodes.down()
        print(phases.report(), file=sys.stderr)
    left = _processes_of(base)
    assert left == [], f"processes of the test left after nodes.sh down: {left}"


def _processes_of(base: Path) -> list[str]:
    """Command lines of running processes that name the test's directory."""
    out = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if proc.name.isdigit() and str(base) in cmdline:
            out.append(f"{proc.name}: {cmdline[:200]}")
    return out
