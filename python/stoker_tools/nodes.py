"""Simulated nodes on one machine and a standalone Flink cluster inside them, from Python.

For the multi-node end-to-end test (``python/tests/system/test_multinode.py``) and the scaling ladder
(``bench/scaling-ladder.sh``); docs/multi-node.md describes the layout.

* :class:`Nodes` drives ``scripts/nodes.sh`` under a random prefix: each node is a network
  namespace with its own address on a private bridge, a ``tc`` rate limit on both directions of
  its link (its network card) and its own ``/dev/shm``. Needs root.
* :class:`NodeCluster` drives ``scripts/cluster.sh`` inside the nodes: the JobManager in one node,
  TaskManagers added in any node, each declaring an external resource (``stoker-cpu`` or
  ``stoker-node-<n>``) so that the job's slot sharing groups land where
  ``stoker.topology.placement: EDGE`` asks. The REST API and the Flink CLI are reached through
  ``nodes.sh exec`` (the host has no address on the bridge).
* :class:`S3Server` is the testkit's S3 server (S3Proxy) bound to a node's address.

Failures raise :class:`HarnessError` (a script failed, a server did not come up) or
:class:`RestError` (a REST call failed, an ``OSError``). The scripts' and the Flink CLI's output in
their messages (which can quote a job's exceptions, i.e. record text) is escaped with
:func:`stoker.printable.printable`, line breaks kept.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import select
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from stoker.printable import printable
from stoker_tools.flink_rest import JobRest

__all__ = [
    "CPU_RESOURCE",
    "HarnessError",
    "NodeCluster",
    "Nodes",
    "RestError",
    "S3Server",
    "node_resource",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
NODES_SH = REPO_ROOT / "scripts" / "nodes.sh"
CLUSTER_SH = REPO_ROOT / "scripts" / "cluster.sh"
STATE_ROOT = Path("/run/stoker-nodes")
#: the external resource every CPU TaskManager declares (``stoker.topology.placement: EDGE``)
CPU_RESOURCE = "stoker-cpu"


def node_resource(node: int) -> str:
    """The external resource GPU node ``node``'s edge TaskManager declares."""
    return f"stoker-node-{node}"


class HarnessError(RuntimeError):
    """A script of the harness failed or a server it starts did not come up."""


class RestError(OSError):
    """A REST call through ``nodes.sh exec <node> curl`` failed (the JobManager busy, a 404)."""


class Nodes:
    """``scripts/nodes.sh`` under a random prefix (``prefix_letter`` + 4 hex digits), so sets of
    nodes of different runs never collide; :meth:`down` removes everything, also after a failed
    :meth:`up`."""

    def __init__(self, prefix_letter: str = "m") -> None:
        self.prefix = prefix_letter + secrets.token_hex(2)
        self.env = dict(os.environ, STOKER_NODES_PREFIX=self.prefix)
        #: node name -> its address on the bridge
        self.address: dict[str, str] = {}
        #: node name -> its host-side veth (the bridge port: its counters are the node's traffic)
        self.port: dict[str, str] = {}

    def up(self, rates: Mapping[str, str]) -> None:
        """Create the nodes, ``{name: rate}`` (``tc`` rates such as ``1gbit``, ``40mbit``)."""
        proc = subprocess.run(
            [str(NODES_SH), "up", *(f"{n}:{r}" for n, r in rates.items())],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if proc.returncode != 0:
            raise HarnessError(
                f"nodes.sh up failed:\n{printable(proc.stderr[-3000:], keep_newlines=True)}"
            )
        for line in proc.stdout.splitlines():
            name, address, _rate, _netns, port = line.split()[:5]
            self.address[name] = address
            self.port[name] = port

    def command(self, node: str, *cmd: str) -> list[str]:
        return [str(NODES_SH), "exec", node, *cmd]

    def run(
        self, node: str, *cmd: str, env: Mapping[str, str] | None = None, timeout_s: float = 180
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(node, *cmd),
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )

    def popen(
        self, node: str, *cmd: str, env: Mapping[str, str] | None = None, **kw: Any
    ) -> subprocess.Popen[Any]:
        return subprocess.Popen(self.command(node, *cmd), env={**self.env, **(env or {})}, **kw)

    def shm(self, node: str) -> Path:
        """The node's /dev/shm as the host sees it (the tmpfs nodes.sh mounted for it)."""
        return STATE_ROOT / self.prefix / "shm" / node

    def traffic(self, node: str) -> tuple[int, int]:
        """(bytes received, bytes sent) by the node so far, from the counters of its bridge port
        on the host (what the port sends is what the node receives)."""
        stats = Path("/sys/class/net") / self.port[node] / "statistics"
        return int((stats / "tx_bytes").read_text()), int((stats / "rx_bytes").read_text())

    def cut(self, node: str) -> None:
        """Partition ``node`` from every other node (``nodes.sh cut``: its bridge port drops every
        frame, silently); :meth:`heal` ends it."""
        self._script("cut", node)

    def heal(self, node: str) -> None:
        self._script("heal", node)

    def _script(self, *args: str) -> None:
        proc = subprocess.run(
            [str(NODES_SH), *args], env=self.env, capture_output=True, text=True, timeout=30
        )
        if proc.returncode != 0:
            raise HarnessError(
                f"nodes.sh {' '.join(args)} failed: {printable(proc.stderr, keep_newlines=True)}"
            )

    def pids(self, node: str) -> list[int]:
        """The processes running in the node (its network namespace)."""
        proc = subprocess.run(
            ["ip", "netns", "pids", f"{self.prefix}-{node}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return [int(p) for p in proc.stdout.split()]

    def down(self) -> str:
        """Stop every process in the nodes and remove them; nodes.sh's log."""
        proc = subprocess.run(
            [str(NODES_SH), "down"], env=self.env, capture_output=True, text=True, timeout=120
        )
        return proc.stderr


class NodeCluster(JobRest):
    """``scripts/cluster.sh`` with its JobManager in node ``jm_node``, TaskManagers in their nodes.

    ``env``: extra environment of every cluster.sh call (e.g. the S3 credentials). The JobManager's
    REST API listens on ``rest_port`` at ``jm_node``'s address.
    """

    def __init__(
        self,
        nodes: Nodes,
        run_dir: Path,
        env: Mapping[str, str],
        jm_node: str = "cpu0",
        rest_port: int = 8081,
    ) -> None:
        self.nodes = nodes
        self.run_dir = run_dir
        self.jm_node = jm_node
        self.jm = nodes.address[jm_node]
        self.rest_port = rest_port
        self.env = {
            **env,
            "STOKER_CLUSTER_DIR": str(run_dir),
            "STOKER_CLUSTER_ADDRESS": self.jm,
            "STOKER_TASKMANAGERS": "0",
            "STOKER_REST_PORT": str(rest_port),
        }
        #: TaskManager index -> the node it runs in
        self.tm_node: dict[int, str] = {}

    def script(self, node: str, *args: str, timeout_s: float = 240) -> str:
        proc = self.nodes.run(node, str(CLUSTER_SH), *args, env=self.env, timeout_s=timeout_s)
        if proc.returncode != 0:
            raise HarnessError(
                f"nodes.sh exec {node} scripts/cluster.sh {' '.join(args[:3])} failed "
                f"({proc.returncode}):\n{printable(proc.stdout[-3000:], keep_newlines=True)}\n"
                f"{printable(proc.stderr[-3000:], keep_newlines=True)}"
            )
        return proc.stdout

    def start(self, *conf: str) -> None:
        """Start the JobManager (``conf``: ``-D key=value`` arguments of cluster.sh start)."""
        self.script(self.jm_node, "start", *conf)

    def add_taskmanager(
        self, node: str, resource: str, amount: int, conf: Iterable[str] = ()
    ) -> int:
        """Start a TaskManager in ``node`` with ``amount`` slots declaring ``amount`` of the
        external resource ``resource``; its index (for :meth:`kill_taskmanager`)."""
        a = self.nodes.address[node]
        out = self.script(
            node,
            "add-taskmanager",
            *("-D", f"taskmanager.host={a}"),
            *("-D", f"taskmanager.bind-host={a}"),
            *("-D", f"external-resources={resource}"),
            *("-D", f"external-resource.{resource}.amount={amount}"),
            *("-D", f"taskmanager.numberOfTaskSlots={amount}"),
            *conf,
        )
        i = int(out.split()[-1])
        self.tm_node[i] = node
        return i

    def kill_taskmanager(self, i: int) -> None:
        """SIGKILL from the host: the nodes share the machine's process ids."""
        proc = subprocess.run(
            [str(CLUSTER_SH), "kill-taskmanager", str(i)],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=30,
        )
        if proc.returncode != 0:
            raise HarnessError(
                f"cluster.sh kill-taskmanager {i} failed: "
                f"{printable(proc.stderr, keep_newlines=True)}"
            )

    def stop(self) -> None:
        subprocess.run(
            [str(CLUSTER_SH), "stop"],
            env={**os.environ, **self.env},
            capture_output=True,
            timeout=120,
        )

    def flink(self, *args: str, timeout_s: float = 240) -> str:
        """The Flink CLI in the JobManager's node; its standard output."""
        return self.script(self.jm_node, "flink", *args, timeout_s=timeout_s)

    def rest(self, path: str) -> Any:
        proc = self.nodes.run(
            self.jm_node,
            "curl",
            "-sf",
            "--max-time",
            "10",
            f"http://{self.jm}:{self.rest_port}{path}",
            timeout_s=30,
        )
        if proc.returncode != 0:
            raise RestError(
                f"GET {path}: curl exit {proc.returncode} {printable(proc.stderr.strip())}"
            )
        return json.loads(proc.stdout)

    def tm_addresses(self) -> dict[str, str]:
        """TaskManager id -> the address its RPC endpoint is bound to (from its REST ``path``)."""
        out = {}
        for tm in self.rest("/taskmanagers")["taskmanagers"]:
            m = re.search(r"@([0-9.]+):\d+/", tm["path"])
            if not m:
                raise HarnessError(f"no address in TaskManager path {tm['path']}")
            out[tm["id"]] = m.group(1)
        return out

    def placement(self, jid: str) -> list[tuple[str, int, str, str]]:
        """(vertex name, subtask, status, TaskManager id) of every subtask's current execution."""
        out = []
        for v in self.job(jid)["vertices"]:
            detail = self.rest(f"/jobs/{jid}/vertices/{v['id']}")
            for s in detail["subtasks"]:
                out.append(
                    (
                        v["name"],
                        int(s["subtask"]),
                        s["status"],
                        s.get("taskmanager-id", "(unassigned)"),
                    )
                )
        return out


class S3Server:
    """The testkit's LocalS3Server in node ``node``, bound to its address on ``port``, with
    ``dataset`` uploaded to ``uri`` (``s3://bucket/prefix``). It stops when :meth:`stop` closes
    its standard input. ``log``: its standard error; its log4j log beside it (``.log``)."""

    def __init__(
        self,
        nodes: Nodes,
        dataset: Path,
        uri: str,
        basedir: Path,
        log: Path,
        node: str = "s3",
        port: int = 9000,
        timeout_s: float = 180,
    ) -> None:
        testkit = REPO_ROOT / "testkit" / "target"
        jar, cp_file = testkit / "stoker-testkit.jar", testkit / "runtime-classpath.txt"
        if not jar.is_file() or not cp_file.is_file():
            raise HarnessError(f"{jar} or {cp_file} is missing: build with mvn package")
        self.err: IO[str] = log.open("w")
        log4j = REPO_ROOT / "flink-conf" / "log4j-s3proxy.properties"
        self.proc: subprocess.Popen[str] = nodes.popen(
            node,
            "java",
            f"-Dlog.file={log.with_suffix('.log')}",
            f"-Dlog4j.configurationFile=file:{log4j}",
            "-cp",
            f"{jar}:{cp_file.read_text().strip()}",
            "dev.stoker.testkit.LocalS3Server",
            *("--host", nodes.address[node]),
            *("--port", str(port)),
            *("--basedir", str(basedir)),
            *("--upload", str(dataset), uri),
            "--exit-on-stdin-eof",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            text=True,
        )
        self.endpoint = self._await_endpoint(timeout_s)

    def _await_endpoint(self, timeout_s: float) -> str:
        """The ``endpoint=`` line of the server's standard output, read from the pipe's file
        descriptor itself: a buffered ``readline`` after ``select`` can take the server's
        ``uploaded=`` and ``endpoint=`` lines in one read and leave the second in its buffer,
        where ``select`` never sees it."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        received = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise HarnessError(
                    f"the S3 server exited ({self.proc.wait()}); see {self.err.name}"
                )
            received += chunk
            *complete, _ = received.split(b"\n")  # the last piece may be a line still written
            for line in complete:
                if line.startswith(b"endpoint="):
                    return line.decode().strip().removeprefix("endpoint=")
        raise HarnessError(
            f"the S3 server did not serve within {timeout_s:.0f}s; see {self.err.name}"
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # it exits when its standard input closes
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.err.close()
