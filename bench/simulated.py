"""What the benchmarks on simulated nodes (``scaling_ladder.py``, ``faults.py``) share: polling, a
standalone Flink cluster in the nodes that reads the S3 server of one node, the job submitted with
``flink run -d``, and a simulated trainer in a GPU node. Needs root (``scripts/nodes.sh``)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from stoker_tools.demo import S3_CREDENTIALS
from stoker_tools.nodes import NodeCluster, Nodes, S3Server

from bench.loaders.common import MAX_PIXELS, MIN_PIXELS, TOKENIZER, make_dataset

REPO = Path(__file__).resolve().parents[1]
JAR = REPO / "job" / "target" / "stoker-job.jar"


def wait_for(what: str, timeout_s: float, check: Callable[[], Any], interval_s: float = 1.0) -> Any:
    """Poll ``check`` until truthy (a failing REST call counts as not yet); TimeoutError after."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = check()
        except OSError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(interval_s)


def start_cluster(
    nodes: Nodes, run_dir: Path, s3_endpoint: str, jm_node: str, conf: Iterable[str] = ()
) -> NodeCluster:
    """The JobManager in ``jm_node``, its S3 filesystem (the JSONL, the dataset listing) pointed
    at ``s3_endpoint`` with the test server's keys; ``conf``: more ``-D key=value`` arguments."""
    cluster = NodeCluster(nodes, run_dir, S3_CREDENTIALS, jm_node)
    cluster.start(
        *("-D", f"s3.endpoint={s3_endpoint}"),
        *("-D", "s3.path.style.access=true"),
        *("-D", f"s3.access-key={S3_CREDENTIALS['AWS_ACCESS_KEY_ID']}"),
        *("-D", f"s3.secret-key={S3_CREDENTIALS['AWS_SECRET_ACCESS_KEY']}"),
        *conf,
    )
    return cluster


def submit(cluster: NodeCluster, parallelism: int, options: Mapping[str, str]) -> str:
    """``flink run -d -p parallelism`` of the job jar with ``options`` (``--key value``); the job
    id it printed. RuntimeError if it printed none."""
    args = [x for k, v in options.items() for x in (f"--{k}", v)]
    out = cluster.flink("run", "-d", "-p", str(parallelism), str(JAR), *args)
    m = re.search(r"JobID ([0-9a-f]{32})", out)
    if not m:
        raise RuntimeError(f"`flink run -d` printed no job id:\n{out}")
    return m.group(1)


def start_trainer(
    nodes: Nodes,
    node: str,
    job_dir: str,
    ranks: Iterable[int],
    record: Path,
    step_time_ms: int,
    out: Path,
    timeout_s: float,
) -> subprocess.Popen[Any]:
    """``stoker_tools.simulate`` of ``ranks`` inside ``node`` (its /dev/shm), reading ``job_dir``
    at ``step_time_ms`` per step and appending a line per batch to ``record``; its output in
    ``out``."""
    return nodes.popen(
        node,
        sys.executable,
        "-m",
        "stoker_tools.simulate",
        *("--root", job_dir),
        *("--ranks", ",".join(map(str, ranks))),
        *("--record", str(record)),
        *("--step-time-ms", str(step_time_ms)),
        *("--timeout-s", str(timeout_s)),
        *("--progress-interval-s", "30"),
        env={"PYTHONPATH": str(REPO / "python")},
        stdout=out.open("w"),
        stderr=subprocess.STDOUT,
    )


def edge_job_options(
    nodes: Nodes,
    s3_endpoint: str,
    *,
    dataset: str,
    job_name: str,
    gpu_nodes: int,
    ranks_per_node: int,
    micro_batch: int,
    prefetch_depth: int,
    epochs: int,
    output_root: str,
    ack_port: int,
    extra: Iterable[str] = (),
) -> dict[str, str]:
    """The job's options for ``gpu_nodes`` GPU nodes ``gpu0..`` (``EDGE`` placement, each node's
    acks on ``ack_port``), bench/loaders' image geometry and tokenizer, reading ``dataset`` from
    the S3 server at ``s3_endpoint``; ``extra``: ``key=value`` overrides."""
    ack = ";".join(f"{nodes.address[f'gpu{n}']}:{ack_port}" for n in range(gpu_nodes))
    return {
        "stoker.dataset.path": dataset,
        "stoker.tokenizer.path": str(TOKENIZER),
        "stoker.job-name": job_name,
        "stoker.dp-world-size": str(gpu_nodes * ranks_per_node),
        "stoker.micro-batch-size": str(micro_batch),
        "stoker.prefetch-depth": str(prefetch_depth),
        "stoker.epochs": str(epochs),
        "stoker.image.min-pixels": str(MIN_PIXELS),
        "stoker.image.max-pixels": str(MAX_PIXELS),
        "stoker.output.root": output_root,
        "stoker.topology.nodes": str(gpu_nodes),
        "stoker.topology.placement": "EDGE",
        "stoker.topology.ack-addresses": ack,
        "s3.endpoint": s3_endpoint,
        "s3.path.style.access": "true",
        **dict(kv.split("=", 1) for kv in extra),
    }


class Testbed:
    """Simulated nodes (prefix ``prefix_letter``) with the S3 server in node ``s3`` serving a
    bench/loaders dataset, and the processes a benchmark starts in them: :meth:`down` kills those,
    stops the server and removes the nodes. ``base``: the run's directory (the server's files)."""

    def __init__(self, prefix_letter: str, base: Path) -> None:
        self.base = base
        self.nodes = Nodes(prefix_letter)
        self.s3: S3Server | None = None
        self.procs: list[subprocess.Popen[Any]] = []

    def bring_up(
        self, rates: Mapping[str, str], dataset_dir: Path, records: int, uri: str
    ) -> S3Server:
        """The nodes ``{name: rate}`` (one named ``s3``), then ``records`` records of
        :func:`bench.loaders.common.make_dataset` in ``dataset_dir`` uploaded to ``uri``."""
        self.nodes.up(rates)
        dataset = make_dataset(dataset_dir, records)
        self.s3 = S3Server(self.nodes, dataset, uri, self.base / "s3", self.base / "s3.err")
        return self.s3

    def down(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if self.s3 is not None:
            self.s3.stop()
        self.nodes.down()
