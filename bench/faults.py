"""Faults hidden by the prefetch (issue 40, point 5): how long each kind of fault stops the job,
and whether the trainers notice. See bench/README.md, "Faults and the prefetch".

Every process runs inside its simulated node (``scripts/nodes.sh``): the JobManager in ``jm``, the
S3 server in ``s3``, a CPU TaskManager in ``cpu0`` and in ``cpu1`` (``--cpu-slots`` slots each,
resource ``stoker-cpu``), an edge TaskManager in ``gpu0`` and ``gpu1`` (``stoker-node-<n>``, one
slot per rank) and one simulated trainer per GPU node (``stoker_tools.simulate``, 2 ranks,
``--step-time-ms`` per step, ``--micro-batch`` rows per rank). The cluster runs
``flink-conf/config.yaml`` (``scripts/cluster.sh``) plus ``--conf`` overrides; the job the
production options plus ``--set``.

Each fault (``--faults``, ``NODE:SECONDS`` in order) is a network partition: ``nodes.sh cut``
drops every frame to and from the node for that long, silently (no reset, as a pulled cable or a
dead switch), then ``nodes.sh heal``. Before each fault the bench waits until the job runs and every
rank holds the full prefetch (``--prefetch-depth`` - 1 steps after its acknowledged one, all
written: a trainer reads in order, so a step still held up in the job ends its prefetch).
The REST API is polled every 0.5 s from the ``jm`` node, which is never cut. Per fault:

* ``detected_s``: cut -> the first poll that sees the job (or a subtask) not RUNNING;
* ``running_s``: cut -> every subtask RUNNING again; ``after_heal_s`` the same from the heal;
* ``flowing_s``: cut -> every rank has a batch beyond its highest at the cut (checked every 0.25 s
  in the GPU nodes' /dev/shm): the job delivers to every rank again;
* ``failures``: the job's exception history in the window (each a restart), with their causes;
* ``max_wait_s``: each rank's longest wait for a batch received from the cut to the window's end
  (the trainer's own clock, ``stoker_tools.simulate --record``), and ``waited_s`` the sum;
* ``backfilled``: rows the sink back-filled in that window (dead letters, e.g. a fetch that gave up).

At the end every (step, rank) received must be there exactly once, without a gap. Results in
``--out``/faults-<label>.{md,json}; the cluster's logs in ``.stoker/logs/faults-<label>/``. Needs
root.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stoker_tools.nodes import CPU_RESOURCE, NodeCluster, node_resource

from bench.simulated import (
    JAR,
    REPO,
    Testbed,
    edge_job_options,
    start_cluster,
    start_trainer,
    submit,
    wait_for,
)

BUCKET = "faults"
DATASET_URI = f"s3://{BUCKET}/data"
OUTPUT_ROOT = "/dev/shm/stoker-faults"
JOB_NAME = "faults"
ACK_PORT = 7070
GPU_NODES = 2
RANKS_PER_NODE = 2
WORLD_SIZE = GPU_NODES * RANKS_PER_NODE
POLL_S = 0.5


def log(msg: str) -> None:
    print(f"[faults] {msg}", file=sys.stderr, flush=True)


@dataclass
class Fault:
    node: str
    duration_s: float
    prefetch_at_cut: dict[int, int] = field(default_factory=dict)
    detected_s: float | None = None
    running_s: float | None = None
    flowing_s: float | None = None
    after_heal_s: float | None = None
    failures: list[str] = field(default_factory=list)
    max_wait_s: dict[int, float] = field(default_factory=dict)
    waited_s: float = 0.0
    backfilled: int = 0

    def line(self) -> str:
        def s(v: float | None) -> str:
            return "-" if v is None else f"{v:.1f}"

        return (
            f"cut {self.node} {self.duration_s:.0f}s: prefetch at cut {self.prefetch_at_cut} "
            f"detected {s(self.detected_s)}s running {s(self.running_s)}s "
            f"({s(self.after_heal_s)}s after heal) new batches {s(self.flowing_s)}s "
            f"failures {len(self.failures)} "
            f"max wait {max(self.max_wait_s.values(), default=0):.1f}s "
            f"(per rank {self.max_wait_s}) backfilled {self.backfilled}"
        )


class Poller(threading.Thread):
    """(Unix time, job state, every subtask RUNNING) every ``POLL_S``; a failed call is skipped."""

    def __init__(self, cluster: NodeCluster, jid: str) -> None:
        super().__init__(name="poller", daemon=True)
        self.cluster, self.jid = cluster, jid
        self.timeline: list[tuple[float, str, bool]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(POLL_S):
            t = time.time()
            try:
                job = self.cluster.job(self.jid)
            except (OSError, ValueError):
                continue
            running = job["state"] == "RUNNING" and all(
                v["status"] == "RUNNING" for v in job["vertices"]
            )
            self.timeline.append((t, str(job["state"]), running))

    def first(self, since: float, running: bool) -> float | None:
        return next((t for t, _, r in list(self.timeline) if t >= since and r == running), None)


class Bench(Testbed):
    def __init__(self, args: argparse.Namespace, base: Path) -> None:
        super().__init__("f", base)
        self.args = args
        self.records = [base / f"trainer-gpu{n}.jsonl" for n in range(GPU_NODES)]

    def up(self) -> None:
        a = self.args
        names = ["jm", "s3", "cpu0", "cpu1", *(f"gpu{n}" for n in range(GPU_NODES))]
        dataset = REPO / ".stoker" / "faults-dataset"
        s3 = self.bring_up(dict.fromkeys(names, a.rate), dataset, a.records, DATASET_URI)
        log(f"nodes up ({', '.join(names)}), {a.records} records on S3 at {s3.endpoint}")

    def cluster(self) -> NodeCluster:
        assert self.s3 is not None
        a = self.args
        conf = [x for kv in a.conf for x in ("-D", kv)]
        cluster = start_cluster(
            self.nodes,
            self.base / "cluster",
            self.s3.endpoint,
            "jm",
            # the REST API's job details are cached this long (Flink: 3 s); the poller reads them
            ("-D", f"web.refresh-interval={int(POLL_S * 1000)}", *conf),
        )
        for n in ("cpu0", "cpu1"):
            cluster.add_taskmanager(n, CPU_RESOURCE, a.cpu_slots, conf)
        for n in range(GPU_NODES):
            cluster.add_taskmanager(f"gpu{n}", node_resource(n), RANKS_PER_NODE, conf)
        return cluster

    def submit(self, cluster: NodeCluster) -> str:
        assert self.s3 is not None
        a = self.args
        options = edge_job_options(
            self.nodes,
            self.s3.endpoint,
            dataset=DATASET_URI,
            job_name=JOB_NAME,
            gpu_nodes=GPU_NODES,
            ranks_per_node=RANKS_PER_NODE,
            micro_batch=a.micro_batch,
            prefetch_depth=a.prefetch_depth,
            epochs=100,
            output_root=OUTPUT_ROOT,
            ack_port=ACK_PORT,
            extra=a.set,
        )
        return submit(cluster, a.cpu_parallelism, options)

    def trainer(self, node: int) -> None:
        self.procs.append(
            start_trainer(
                self.nodes,
                f"gpu{node}",
                f"{OUTPUT_ROOT}/{JOB_NAME}",
                range(node * RANKS_PER_NODE, (node + 1) * RANKS_PER_NODE),
                self.records[node],
                self.args.step_time_ms,
                self.base / f"trainer-gpu{node}.out",
                timeout_s=900,
            )
        )

    def ahead(self) -> dict[int, int]:
        """Per rank: the batches the trainer has in hand, from the GPU nodes' /dev/shm: the steps
        after its acknowledged one that are all written (a step still missing, e.g. held by a
        slow GET, ends them, however many later steps are written)."""
        return {r: hand for r, (_, _, hand) in self.on_disk().items()}

    def on_disk(self) -> dict[int, tuple[int, int, int]]:
        """Per rank: (the highest step written, the acknowledged step, the batches in hand)."""
        out = {}
        for rank in range(WORLD_SIZE):
            job_dir = self.nodes.shm(f"gpu{rank // RANKS_PER_NODE}") / "stoker-faults" / JOB_NAME
            try:
                manifest = json.loads((job_dir / "manifest.json").read_text())
                rank_dir = job_dir / f"gen-{manifest['generation']}" / f"rank-{rank}"
                steps = sorted(int(p.name[5:15]) for p in rank_dir.glob("step-*.arrow"))
                ack = json.loads((rank_dir / "ack.json").read_text())["consumed_step"]
            except (OSError, ValueError, KeyError):
                continue
            if steps:
                written, hand = set(steps), 0
                while int(ack) + 1 + hand in written:
                    hand += 1
                out[rank] = (steps[-1], int(ack), hand)
        return out

    def sleep_watching(
        self, seconds: float, top_at_cut: dict[int, int], flowing: list[float]
    ) -> None:
        """Sleep ``seconds``, checking every 0.25 s until every rank has a batch beyond its
        highest at the cut (appended to ``flowing`` once: the job delivers again)."""
        end = time.time() + seconds
        while True:
            if not flowing:
                now = {r: top for r, (top, _, _) in self.on_disk().items()}
                if len(now) == WORLD_SIZE and all(now[r] > top_at_cut.get(r, -1) for r in now):
                    flowing.append(time.time())
            left = end - time.time()
            if left <= 0:
                return
            time.sleep(min(0.25, left))

    def received(self) -> list[dict[str, Any]]:
        rows = []
        for f in self.records:
            if f.is_file():
                rows += [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
        return rows

    def fault(self, cluster: NodeCluster, jid: str, poller: Poller, spec: str) -> Fault:
        a = self.args
        node, seconds = spec.split(":")
        fault = Fault(node, float(seconds))
        full = a.prefetch_depth - 1  # the trainer holds one more while it computes its step
        wait_for(
            "the job to run and every rank to hold the full prefetch",
            300,
            lambda: (
                cluster.running(jid)
                and len(ahead := self.ahead()) == WORLD_SIZE
                and min(ahead.values()) >= full
            ),
        )
        fault.prefetch_at_cut = self.ahead()
        top_at_cut = {r: top for r, (top, _, _) in self.on_disk().items()}
        t_cut = time.time()
        self.nodes.cut(node)
        log(f"cut {node} (prefetch {fault.prefetch_at_cut})")
        flowing: list[float] = []
        self.sleep_watching(fault.duration_s, top_at_cut, flowing)
        self.nodes.heal(node)
        t_heal = time.time()
        log(f"healed {node}")
        # The job fails over once the fault is detected (a heartbeat timeout); a fault that the
        # job rides out (an S3 outage within the client's retries) may never stop it.
        deadline = t_heal + a.settle_s
        while time.time() < deadline:
            down = poller.first(t_cut, running=False)
            if down is not None and poller.first(down, running=True) is not None:
                break
            self.sleep_watching(POLL_S, top_at_cut, flowing)
        down = poller.first(t_cut, running=False)
        up = poller.first(down, running=True) if down is not None else None
        fault.detected_s = None if down is None else down - t_cut
        fault.running_s = None if up is None else up - t_cut
        fault.after_heal_s = None if up is None else up - t_heal
        # the window ends once the trainers have read on for settle_s after the job ran again
        self.sleep_watching(
            max(0.0, (up or t_heal) + a.settle_s - time.time()), top_at_cut, flowing
        )
        t_end = time.time()
        fault.flowing_s = flowing[0] - t_cut if flowing else None
        history = cluster.rest(f"/jobs/{jid}/exceptions?maxExceptions=100")
        for e in history.get("exceptionHistory", {}).get("entries", []):
            if t_cut * 1000 <= e["timestamp"] <= t_end * 1000:
                first = (e.get("stacktrace") or e.get("exceptionName") or "").split("\n")[0]
                at = e["timestamp"] / 1000 - t_cut
                fault.failures.append(f"+{at:.1f}s {first[:300]}")
        for row in self.received():
            if t_cut <= row["received_at"] <= t_end:
                r = int(row["rank"])
                fault.max_wait_s[r] = max(fault.max_wait_s.get(r, 0.0), float(row["wait_s"]))
                fault.waited_s += float(row["wait_s"])
                fault.backfilled += len(row["backfilled"])
        fault.max_wait_s = dict(sorted(fault.max_wait_s.items()))
        return fault

    def check_exactly_once(self) -> str:
        rows = self.received()
        problems = []
        for rank in range(WORLD_SIZE):
            steps = sorted(int(r["step"]) for r in rows if int(r["rank"]) == rank)
            if not steps:
                problems.append(f"rank {rank}: nothing received")
                continue
            if len(set(steps)) != len(steps):
                problems.append(f"rank {rank}: a step received twice")
            if steps != list(range(steps[0], steps[-1] + 1)):
                problems.append(f"rank {rank}: a gap in steps {steps[0]}..{steps[-1]}")
        n = len(rows)
        return "FAIL " + "; ".join(problems) if problems else f"PASS ({n} batches)"


def write_results(faults: list[Fault], exactly_once: str, args: argparse.Namespace) -> Path:
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"faults-{args.label}"
    settings = {
        "conf": args.conf,
        "set": args.set,
        "prefetch_depth": args.prefetch_depth,
        "step_time_ms": args.step_time_ms,
        "micro_batch": args.micro_batch,
        "cpu_parallelism": args.cpu_parallelism,
        "cpu_slots": args.cpu_slots,
        "records": args.records,
        "rate": args.rate,
    }
    stem.with_suffix(".json").write_text(
        json.dumps(
            {
                "settings": settings,
                "faults": [asdict(f) for f in faults],
                "exactly_once": exactly_once,
                "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
            indent=2,
        )
        + "\n"
    )
    depth_s = args.prefetch_depth * args.step_time_ms / 1000

    def s(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    lines = [
        f"# Faults and the prefetch: {args.label}",
        "",
        f"`bench/faults.sh {' '.join(args.argv)}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).",
        "",
        f"2 GPU nodes x 2 ranks, 2 CPU nodes (CPU parallelism {args.cpu_parallelism}), a trainer "
        f"step of {args.step_time_ms} ms, B = {args.micro_batch}, prefetch depth "
        f"{args.prefetch_depth} ({depth_s:.0f} s of steps). Cluster overrides: "
        f"{', '.join(f'`{c}`' for c in args.conf) or 'none'}; job overrides: "
        f"{', '.join(f'`{c}`' for c in args.set) or 'none'}.",
        "",
        "| fault | batches ahead at the cut | detected | every subtask RUNNING | from the heal "
        "| new batches on every rank | failures | longest trainer wait | trainer wait, sum "
        "| back-filled |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for f in faults:
        heal = "-" if f.after_heal_s is None else f"{f.after_heal_s:.1f} s"
        if f.after_heal_s is not None and f.after_heal_s < 0:
            heal = "(before the heal)"
        lines.append(
            f"| {f.node} cut {f.duration_s:.0f} s | {min(f.prefetch_at_cut.values(), default=0)}"
            f"-{max(f.prefetch_at_cut.values(), default=0)} | {s(f.detected_s)} s | "
            f"{s(f.running_s)} s | {heal} | {s(f.flowing_s)} s | {len(f.failures)} | "
            f"{max(f.max_wait_s.values(), default=0):.1f} s | {f.waited_s:.1f} s | {f.backfilled} |"
        )
    lines += [
        "",
        f"Every (step, rank) exactly once: {exactly_once}.",
        "",
        "Failures (the job's exception history, time after the cut):",
        "",
    ]
    for f in faults:
        lines.append(f"- {f.node}:")
        lines += [f"  - `{x}`" for x in f.failures] or ["  - none"]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return stem.with_suffix(".md")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/faults.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("--label", default="run", help="names the result files faults-<label>.*")
    p.add_argument("--faults", default="gpu1:20,cpu1:20,s3:15", help="NODE:SECONDS, in order")
    p.add_argument("--prefetch-depth", type=int, default=30)
    p.add_argument("--step-time-ms", type=int, default=2000)
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--cpu-parallelism", type=int, default=2)
    p.add_argument("--cpu-slots", type=int, default=2, help="slots of each CPU TaskManager")
    p.add_argument("--records", type=int, default=400, help="dataset records (read for 100 epochs)")
    p.add_argument("--rate", default="1gbit", help="every node's network card")
    p.add_argument(
        "--settle-s",
        type=float,
        default=60,
        help="after the job runs again, how long the trainers read on before the next fault",
    )
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="cluster -D")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="job option")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        log("error: the bench runs every process inside simulated nodes: run it as root")
        return 2
    if not JAR.is_file():
        log(f"error: {JAR} is missing (mvn package)")
        return 2
    # SIGTERM (a timeout, kill) unwinds like Ctrl-C, so the cluster and the nodes are removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    base = Path(tempfile.mkdtemp(prefix="stoker-faults-"))
    bench = Bench(args, base)
    faults: list[Fault] = []
    keep = REPO / ".stoker" / "logs" / f"faults-{args.label}"
    try:
        bench.up()
        cluster = bench.cluster()
        try:
            jid = bench.submit(cluster)
            for n in range(GPU_NODES):
                bench.trainer(n)
            wait_for("the job to run", 180, lambda: cluster.running(jid))
            poller = Poller(cluster, jid)
            poller.start()
            for spec in args.faults.split(","):
                f = bench.fault(cluster, jid, poller, spec)
                faults.append(f)
                print(f.line(), flush=True)
            poller.stop_event.set()
        finally:
            shutil.rmtree(keep, ignore_errors=True)
            if (cluster.run_dir / "log").is_dir():
                shutil.copytree(cluster.run_dir / "log", keep)
            cluster.stop()
        exactly_once = bench.check_exactly_once()
    finally:
        bench.down()
        keep.mkdir(parents=True, exist_ok=True)
        for f in [*base.glob("*.err"), *base.glob("*.out"), *base.glob("*.jsonl")]:
            shutil.copy(f, keep)
        shutil.rmtree(base, ignore_errors=True)
    md = write_results(faults, exactly_once, args)
    print(f"exactly once: {exactly_once}; results in {md}", flush=True)
    return 0 if exactly_once.startswith("PASS") else 1


if __name__ == "__main__":
    sys.exit(main())
