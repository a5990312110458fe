"""The scaling ladder (issue 21, point 8): 1, 2 and 4 simulated GPU nodes x 2 ranks, fed by one
Flink job whose CPU stages are packed on one CPU node (``colocated``) or spread over the CPU nodes
(``spread``), every node with the same network-card cap. See bench/README.md, "Scaling ladder".

Every process runs inside its simulated node (``scripts/nodes.sh``: a network namespace, a ``tc``
rate limit on both directions of its link, its own ``/dev/shm``): the JobManager in ``jm``, the
S3 server in ``s3`` (both uncapped: ``--fast-rate``), ``--cpu-nodes`` CPU TaskManagers in
``cpu0..`` (``--cpu-slots`` slots each, resource ``stoker-cpu``), one edge TaskManager per GPU node
in ``gpu<n>`` (``stoker-node-<n>``, one slot per rank) and one simulated trainer per GPU node
(``stoker_tools.simulate``, ``--step-time-ms`` per step, ``--micro-batch`` rows per rank): the
demand is fixed per rank, so it grows with the rung.

* ``colocated``: ``taskmanager.load-balance.mode: NONE``, Flink's default, which fills one
  TaskManager's slots before the next: every CPU-stage subtask on one CPU node, whose network card
  carries every image from S3 and every sample to the GPU nodes.
* ``spread``: ``taskmanager.load-balance.mode: SLOTS`` (Stoker's flink-conf): the CPU-stage
  subtasks, and with them the fetch load, spread over the CPU nodes.

The placement is read back from the REST API and printed; a colocated run whose CPU stages are not
on one node, or a spread one on fewer than min(cpu nodes, parallelism) nodes, is an error. Per rung
and mode, over a window of ``--measure-s`` seconds after ``--warmup-s`` of steady running:
samples/s received by the trainers, their wait-time ratio (time waiting for data / time), bytes/s
through each node's network card (its link's counters, both directions), the machine's CPU use, the
bytes per sample the GPU nodes received (their cards' counters over the samples the trainers got) and
each GPU node's ingress per step, and the resource that bounds the rung. One line per rung, then
``RESULT nodes=<top> spread/colocated=X.XX``; results in ``--out``/scaling-ladder.{md,csv,json,png}.
Needs root.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
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

BUCKET = "ladder"
DATASET_URI = f"s3://{BUCKET}/data"
OUTPUT_ROOT = "/dev/shm/stoker-ladder"
ACK_PORT = 7070
SINK_PREFIX = "arrow-shm-sink-node-"
#: a node's network card counts as the bound from this share of its cap on
NIC_BOUND = 0.85
#: the machine's CPUs count as the bound from this share on
CPU_BOUND = 0.90


def log(msg: str) -> None:
    print(f"[ladder] {msg}", file=sys.stderr, flush=True)


def rate_bytes_per_s(rate: str) -> float:
    m = re.fullmatch(r"(\d+)(k|m|g)bit", rate)
    if not m:
        raise ValueError(f"rate {rate!r}: like 40mbit")
    return int(m.group(1)) * {"k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes used so far; a process gone counts 0."""
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLOCK_TICKS


def cpu_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the machine so far, from /proc/stat."""
    # user nice system idle iowait irq softirq steal (guest time is already in user)
    fields = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


@dataclass
class Rung:
    nodes: int
    mode: str
    samples_per_s: float
    demand_per_s: float
    wait_time_ratio: float
    cpu_use: float
    busiest_node: str
    busiest_nic_use: float
    bound: str
    #: the GPU nodes' network cards: bytes received per sample the trainers got (TCP/IP included)
    nic_bytes_per_sample: float
    ingress_bytes_per_step: dict[str, float]
    nic_rx_bytes_per_s: dict[str, float]
    nic_tx_bytes_per_s: dict[str, float]
    cpu_subtasks_per_node: dict[str, int]
    window_s: float
    batches: int
    #: cores used by the processes of each node (CPU seconds / window)
    node_cpu_cores: dict[str, float]

    def line(self) -> str:
        return (
            f"nodes={self.nodes} {self.mode:9} samples/s={self.samples_per_s:6.2f} "
            f"(demand {self.demand_per_s:.1f}) wait={self.wait_time_ratio:6.1%} "
            f"cpu={self.cpu_use:5.1%} busiest NIC {self.busiest_node} "
            f"{self.busiest_nic_use:5.1%} bound={self.bound} "
            f"into GPU nodes {self.nic_bytes_per_sample / 1024:.0f} KiB/sample "
            f"cpu-stage subtasks {dict(sorted(self.cpu_subtasks_per_node.items()))} cores "
            + " ".join(f"{n}={c:.2f}" for n, c in self.node_cpu_cores.items())
        )


class Ladder(Testbed):
    def __init__(self, args: argparse.Namespace, base: Path) -> None:
        super().__init__("l", base)
        self.args = args
        self.cpu_nodes = [f"cpu{i}" for i in range(args.cpu_nodes)]
        self.gpu_nodes = [f"gpu{n}" for n in range(max(args.rungs))]

    def up(self) -> None:
        a = self.args
        rates = {"jm": a.fast_rate, "s3": a.fast_rate}
        rates.update({n: a.rate for n in self.cpu_nodes + self.gpu_nodes})
        dataset = REPO / ".stoker" / "ladder-dataset"
        s3 = self.bring_up(rates, dataset, a.records, DATASET_URI)
        log(f"nodes up ({', '.join(rates)}), {a.records} records on S3 at {s3.endpoint}")

    # --- one cluster per mode -----------------------------------------------------------------
    def cluster(self, mode: str) -> NodeCluster:
        assert self.s3 is not None
        a = self.args
        cluster = start_cluster(
            self.nodes,
            self.base / f"cluster-{mode}",
            self.s3.endpoint,
            "jm",
            (
                *("-D", "metrics.fetcher.update-interval=1000"),
                *(
                    "-D",
                    f"taskmanager.load-balance.mode={'NONE' if mode == 'colocated' else 'SLOTS'}",
                ),
            ),
        )
        cpu_conf = (
            *("-D", f"taskmanager.memory.process.size={a.cpu_tm_memory}"),
            *("-D", "taskmanager.memory.managed.size=256mb"),
        )
        for n in self.cpu_nodes:
            cluster.add_taskmanager(n, CPU_RESOURCE, a.cpu_slots, cpu_conf)
        for n, node in enumerate(self.gpu_nodes):
            cluster.add_taskmanager(
                node,
                node_resource(n),
                a.ranks_per_node,
                (
                    *("-D", f"taskmanager.memory.process.size={a.edge_tm_memory}"),
                    *("-D", "taskmanager.memory.managed.size=96mb"),
                ),
            )
        return cluster

    # --- one rung ------------------------------------------------------------------------------
    def submit(self, cluster: NodeCluster, n_nodes: int, job_name: str) -> str:
        assert self.s3 is not None
        a = self.args
        options = edge_job_options(
            self.nodes,
            self.s3.endpoint,
            dataset=DATASET_URI,
            job_name=job_name,
            gpu_nodes=n_nodes,
            ranks_per_node=a.ranks_per_node,
            micro_batch=a.micro_batch,
            prefetch_depth=a.prefetch_depth,
            epochs=a.epochs,
            output_root=OUTPUT_ROOT,
            ack_port=ACK_PORT,
            extra=a.set,
        )
        return submit(cluster, a.cpu_parallelism, options)

    def trainer(self, node: int, job_name: str, record: Path) -> subprocess.Popen[Any]:
        a = self.args
        ranks = range(node * a.ranks_per_node, (node + 1) * a.ranks_per_node)
        proc = start_trainer(
            self.nodes,
            f"gpu{node}",
            f"{OUTPUT_ROOT}/{job_name}",
            ranks,
            record,
            a.step_time_ms,
            self.base / f"{job_name}-gpu{node}.out",
            timeout_s=600,
        )
        self.procs.append(proc)
        return proc

    def rung(self, cluster: NodeCluster, n_nodes: int, mode: str) -> Rung:
        a = self.args
        job_name = f"ladder-{mode}-{n_nodes}"
        records = {n: self.base / f"{job_name}-gpu{n}.jsonl" for n in range(n_nodes)}
        jid = self.submit(cluster, n_nodes, job_name)
        trainers = [self.trainer(n, job_name, records[n]) for n in range(n_nodes)]
        try:
            wait_for("the job to run", 180, lambda: cluster.running(jid))
            placement = self.check_placement(cluster, jid, mode, n_nodes)
            ranks = n_nodes * a.ranks_per_node
            wait_for(
                "every rank's first batch",
                300,
                lambda: (
                    sum(len(_batches(r)) > 0 for r in records.values()) == n_nodes
                    and len({b["rank"] for r in records.values() for b in _batches(r)}) == ranks
                ),
            )
            time.sleep(a.warmup_s)
            t0, traffic0, cpu0, node_cpu0 = time.time(), self.traffic(), cpu_busy(), self.node_cpu()
            time.sleep(a.measure_s)
            t1, traffic1, cpu1, node_cpu1 = time.time(), self.traffic(), cpu_busy(), self.node_cpu()
            for t in trainers:
                if t.poll() is not None:
                    raise RuntimeError(f"a trainer of {job_name} ended early ({t.returncode})")
        finally:
            for t in trainers:
                if t.poll() is None:
                    t.send_signal(signal.SIGKILL)
                    t.wait()
            cluster.flink("cancel", jid)
            wait_for(
                "the job to be cancelled",
                120,
                lambda: cluster.state(jid) in ("CANCELED", "FAILED", "FINISHED"),
            )
            for n in range(n_nodes):
                shutil.rmtree(self.nodes.shm(f"gpu{n}") / "stoker-ladder", ignore_errors=True)
        window = t1 - t0
        got = [b for r in records.values() for b in _batches(r) if t0 <= b["received_at"] < t1]
        samples = sum(b["rows"] - len(b["backfilled"]) for b in got)
        wait = sum(b["wait_s"] for b in got)
        rx = {n: (traffic1[n][0] - traffic0[n][0]) / window for n in traffic0}
        tx = {n: (traffic1[n][1] - traffic0[n][1]) / window for n in traffic0}
        cap = rate_bytes_per_s(a.rate)
        capped = self.cpu_nodes + self.gpu_nodes[:n_nodes]
        busiest = max(capped, key=lambda n: max(rx[n], tx[n]))
        nic_use = max(rx[busiest], tx[busiest]) / cap
        cpu_use = (cpu1[0] - cpu0[0]) / (cpu1[1] - cpu0[1])
        steps = collections.Counter(b["rank"] // a.ranks_per_node for b in got)
        gpu_rx = sum(rx[f"gpu{n}"] for n in range(n_nodes)) * window
        ingress = {
            f"gpu{n}": rx[f"gpu{n}"] * window / max(steps[n] / a.ranks_per_node, 1)
            for n in range(n_nodes)
        }
        wait_ratio = wait / (window * ranks)
        if nic_use >= NIC_BOUND:
            bound = f"NIC of {busiest}"
        elif cpu_use >= CPU_BOUND:
            bound = "CPU"
        elif wait_ratio < 0.05:
            bound = "demand"
        else:
            bound = "pipeline (no resource saturated)"
        return Rung(
            nodes=n_nodes,
            mode=mode,
            samples_per_s=samples / window,
            demand_per_s=ranks * a.micro_batch * 1000 / a.step_time_ms,
            wait_time_ratio=wait_ratio,
            cpu_use=cpu_use,
            busiest_node=busiest,
            busiest_nic_use=nic_use,
            bound=bound,
            nic_bytes_per_sample=gpu_rx / max(samples, 1),
            ingress_bytes_per_step=ingress,
            nic_rx_bytes_per_s={n: rx[n] for n in capped},
            nic_tx_bytes_per_s={n: tx[n] for n in capped},
            cpu_subtasks_per_node=placement,
            window_s=window,
            batches=len(got),
            node_cpu_cores={n: (node_cpu1[n] - node_cpu0.get(n, 0.0)) / window for n in node_cpu1},
        )

    def node_cpu(self) -> dict[str, float]:
        """CPU seconds used so far by the processes of every node."""
        return {n: cpu_seconds(self.nodes.pids(n)) for n in self.nodes.address}

    def traffic(self) -> dict[str, tuple[int, int]]:
        return {n: self.nodes.traffic(n) for n in self.cpu_nodes + self.gpu_nodes}

    def check_placement(
        self, cluster: NodeCluster, jid: str, mode: str, n_nodes: int
    ) -> dict[str, int]:
        """CPU-stage subtasks per node, from the REST API; checks the sinks are on their nodes
        and the CPU stages packed (colocated) or spread."""
        node_of = {a: n for n, a in self.nodes.address.items()}
        addresses = {tm: node_of.get(a, "?") for tm, a in cluster.tm_addresses().items()}
        per_node: dict[str, int] = collections.Counter()
        vertices = set()
        for vertex, _subtask, _status, tm in cluster.placement(jid):
            node = addresses.get(tm, "?")
            m = re.search(re.escape(SINK_PREFIX) + r"(\d+)", vertex)
            if m:
                if node != f"gpu{m.group(1)}":
                    raise RuntimeError(f"{vertex} runs on {node}")
            elif vertex.startswith("Source"):
                per_node[node] += 1
                vertices.add(vertex)
            elif node not in self.cpu_nodes:
                raise RuntimeError(f"CPU-stage {vertex} runs on {node}")
        want = 1 if mode == "colocated" else min(len(self.cpu_nodes), self.args.cpu_parallelism)
        if mode == "colocated" and len(per_node) != 1 or mode == "spread" and len(per_node) < want:
            raise RuntimeError(f"{mode}: the source's subtasks run on {dict(per_node)}")
        return dict(per_node)


def _batches(record: Path) -> list[dict[str, Any]]:
    try:
        text = record.read_text()
    except OSError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.endswith("}")]


# --- results ------------------------------------------------------------------------------------
def write_results(rungs: list[Rung], args: argparse.Namespace, out: Path, ratio: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "scaling-ladder.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            ["nodes", "mode", "samples_per_s", "demand_per_s", "wait_time_ratio", "cpu_use",
             "busiest_node", "busiest_nic_use", "bound", "nic_bytes_per_sample",
             "cpu_subtasks_per_node", "node", "nic_rx_bytes_per_s", "nic_tx_bytes_per_s",
             "ingress_bytes_per_step"]
        )  # fmt: skip
        for r in rungs:
            for node in r.nic_rx_bytes_per_s:
                w.writerow(
                    [r.nodes, r.mode, f"{r.samples_per_s:.3f}", f"{r.demand_per_s:.3f}",
                     f"{r.wait_time_ratio:.4f}", f"{r.cpu_use:.4f}", r.busiest_node,
                     f"{r.busiest_nic_use:.4f}", r.bound, f"{r.nic_bytes_per_sample:.0f}",
                     json.dumps(r.cpu_subtasks_per_node), node,
                     f"{r.nic_rx_bytes_per_s[node]:.0f}", f"{r.nic_tx_bytes_per_s[node]:.0f}",
                     f"{r.ingress_bytes_per_step.get(node, 0):.0f}"]
                )  # fmt: skip
    (out / "scaling-ladder.json").write_text(
        json.dumps({"args": vars(args), "rungs": [asdict(r) for r in rungs]}, indent=1, default=str)
        + "\n"
    )
    cap = rate_bytes_per_s(args.rate)
    lines = [
        "# Scaling ladder",
        "",
        f"`{' '.join(['bench/scaling-ladder.sh', *sys.argv[1:]])}` on {time.strftime('%Y-%m-%d')}: "
        f"{args.cpu_nodes} CPU nodes x {args.cpu_slots} slots, CPU-stage parallelism "
        f"{args.cpu_parallelism}, {args.ranks_per_node} ranks per GPU node, every CPU and GPU "
        f"node's network card capped at {args.rate} ({cap / 2**20:.2f} MiB/s each way), "
        f"micro-batch {args.micro_batch}, trainer step {args.step_time_ms} ms, prefetch depth "
        f"{args.prefetch_depth}; window {args.measure_s:.0f} s after {args.warmup_s:.0f} s of "
        "warm-up. All nodes share the machine's CPUs.",
        "",
        "| GPU nodes | CPU stages | samples/s | demand | wait-time ratio | CPU use | busiest NIC "
        "| bound | KiB/sample into the GPU nodes | GPU node ingress MiB/step "
        "| CPU-stage subtasks per node |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rungs:
        ingress = ", ".join(f"{n} {v / 2**20:.2f}" for n, v in r.ingress_bytes_per_step.items())
        lines.append(
            f"| {r.nodes} | {r.mode} | {r.samples_per_s:.2f} | {r.demand_per_s:.1f} | "
            f"{r.wait_time_ratio:.1%} | {r.cpu_use:.0%} | {r.busiest_node} "
            f"{r.busiest_nic_use:.0%} | {r.bound} | {r.nic_bytes_per_sample / 1024:.0f} | "
            f"{ingress} | {json.dumps(r.cpu_subtasks_per_node)} |"
        )
    capped = list(dict.fromkeys(n for r in rungs for n in r.nic_rx_bytes_per_s))
    lines += [
        "",
        "Bytes/s through each capped node's network card (received / sent, MiB/s):",
        "",
        "| GPU nodes | CPU stages | " + " | ".join(capped) + " |",
        "|---|---|" + "---|" * len(capped),
    ]
    for r in rungs:
        cells = [
            f"{r.nic_rx_bytes_per_s[n] / 2**20:.2f} / {r.nic_tx_bytes_per_s[n] / 2**20:.2f}"
            if n in r.nic_rx_bytes_per_s
            else "-"
            for n in capped
        ]
        lines.append(f"| {r.nodes} | {r.mode} | " + " | ".join(cells) + " |")
    names = list(next(iter(rungs)).node_cpu_cores)
    lines += [
        "",
        "Cores used by the processes of each node:",
        "",
        "| GPU nodes | CPU stages | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for r in rungs:
        cells = [f"{r.node_cpu_cores.get(n, 0):.2f}" for n in names]
        lines.append(f"| {r.nodes} | {r.mode} | " + " | ".join(cells) + " |")
    lines += ["", f"RESULT nodes={max(r.nodes for r in rungs)} spread/colocated={ratio:.2f}", ""]
    (out / "scaling-ladder.md").write_text("\n".join(lines))
    plot(rungs, out / "scaling-ladder.png")


def plot(rungs: list[Rung], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for mode, style in (("colocated", "o-"), ("spread", "s-")):
        rs = sorted((r for r in rungs if r.mode == mode), key=lambda r: r.nodes)
        ax1.plot([r.nodes for r in rs], [r.samples_per_s for r in rs], style, label=mode)
        ax2.plot([r.nodes for r in rs], [100 * r.wait_time_ratio for r in rs], style, label=mode)
    demand = sorted({(r.nodes, r.demand_per_s) for r in rungs})
    ax1.plot([n for n, _ in demand], [d for _, d in demand], "k:", label="trainers' demand")
    ax1.set(xlabel="GPU nodes (2 ranks each)", ylabel="samples/s", title="Throughput")
    ax2.set(xlabel="GPU nodes (2 ranks each)", ylabel="%", title="Trainers' wait-time ratio")
    for ax in (ax1, ax2):
        ax.set_xticks([n for n, _ in demand])
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rungs", default="1,2,4", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--modes", default="colocated,spread", type=lambda s: s.split(","))
    p.add_argument("--rate", default="25mbit", help="network card cap of each CPU and GPU node")
    p.add_argument("--fast-rate", default="10gbit", help="cap of the JobManager's and S3 node")
    p.add_argument("--cpu-nodes", type=int, default=4)
    p.add_argument("--cpu-slots", type=int, default=4, help="slots of each CPU TaskManager")
    p.add_argument("--cpu-parallelism", type=int, default=4, help="-p of the CPU stages")
    p.add_argument("--cpu-tm-memory", default="3g")
    p.add_argument("--edge-tm-memory", default="1280m")
    p.add_argument("--ranks-per-node", type=int, default=2)
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--step-time-ms", type=int, default=1500)
    p.add_argument("--prefetch-depth", type=int, default=4)
    p.add_argument("--records", type=int, default=420)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--warmup-s", type=float, default=60.0)
    p.add_argument("--measure-s", type=float, default=60.0)
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a job option of every rung, e.g. stoker.topology.ack-poll-interval=20ms (repeatable)",
    )
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args(argv)
    for mode in args.modes:
        if mode not in ("colocated", "spread"):
            p.error(f"--modes: {mode!r} is not colocated or spread")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        log(
            "error: the ladder runs every process inside simulated nodes (network namespaces): run it as root"
        )
        return 2
    if not JAR.is_file():
        log(f"error: {JAR} is missing (mvn package)")
        return 2
    base = Path(tempfile.mkdtemp(prefix="stoker-ladder-"))
    ladder = Ladder(args, base)
    rungs: list[Rung] = []
    try:
        ladder.up()
        for mode in args.modes:
            cluster = ladder.cluster(mode)
            try:
                for n in args.rungs:
                    r = ladder.rung(cluster, n, mode)
                    rungs.append(r)
                    print(r.line(), flush=True)
            finally:
                keep = REPO / ".stoker" / "logs" / f"ladder-{mode}"
                shutil.rmtree(keep, ignore_errors=True)
                if (cluster.run_dir / "log").is_dir():
                    shutil.copytree(cluster.run_dir / "log", keep)
                cluster.stop()
    finally:
        ladder.down()
        keep = REPO / ".stoker" / "logs" / "ladder"
        shutil.rmtree(keep, ignore_errors=True)
        keep.mkdir(parents=True)
        for f in [*base.glob("*.err"), *base.glob("*.out"), *base.glob("*.log")]:
            shutil.copy(f, keep)
        shutil.rmtree(base, ignore_errors=True)
    top = max(args.rungs)
    by = {(r.nodes, r.mode): r for r in rungs}
    ratio = 0.0
    if (top, "spread") in by and (top, "colocated") in by:
        ratio = by[top, "spread"].samples_per_s / by[top, "colocated"].samples_per_s
    write_results(rungs, args, args.out, ratio)
    print(f"RESULT nodes={top} spread/colocated={ratio:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
