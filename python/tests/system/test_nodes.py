"""Simulated nodes on one machine (``scripts/nodes.sh``), the base of the multi-node tests.

Each test brings up its own set of nodes under a prefix unique to the test run, so earlier
leftovers or a parallel run never collide, and removes them in ``finally`` (also when it fails),
then checks that no network namespace, bridge, veth, mount or state directory of the prefix is
left. What is checked against the kernel's own view (``ip -j``, ``tc -j``, ``/proc/self/mounts``)
and real sockets:

* each node reaches the others over TCP on its address, and nothing else: neither the host's
  loopback nor any of the host's addresses, and it has no default route;
* a file in ``/dev/shm`` of node A is seen by another process of node A, not by node B nor the host;
* each node's rate is a token bucket on both directions of its link, and it holds: a bulk TCP
  transfer into and out of a slow node runs at about that rate;
* ``cut`` partitions a node silently (a connection to it times out, no reset; the others still reach
  each other) and ``heal`` ends it: an open connection across the cut carries on;
* ``up`` with a bad argument, or failing halfway, leaves nothing behind; ``down`` is idempotent and
  stops the processes still running in the nodes;
* outside root the script fails at once with a clear message.

The script needs root (CI runs as root); run as another user these tests fail, they never skip.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness.paths import REPO_ROOT

NODES = REPO_ROOT / "scripts" / "nodes.sh"
STATE_ROOT = Path("/run/stoker-nodes")

# In-node helpers, run with this interpreter (same file system inside a node).
# Echoes every message on each connection until it closes (one thread per connection).
ECHO_SERVER = """
import socket, sys, threading
def serve(c):
    with c:
        while m := c.recv(1024):
            c.sendall(b"echo:" + m)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(8)
print("listening", flush=True)
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
"""
CONNECT = """
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
try:
    with socket.create_connection((host, port), timeout=3) as s:
        s.sendall(sys.argv[3].encode())
        print("reply", s.recv(1024).decode())
except OSError as e:
    print("failed", type(e).__name__, e)
"""
# Keeps one connection open: after each line on stdin ("send"), sends a message and prints the
# reply (or the error).
CHAT = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
print("listening", flush=True)
for _ in sys.stdin:
    try:
        s.sendall(b"again")
        print("reply", s.recv(1024).decode(), flush=True)
    except OSError as e:
        print("failed", type(e).__name__, flush=True)
"""
# Receives one TCP stream and prints its rate in bits/s, from the first byte to EOF.
SINK_SERVER = """
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(1)
print("listening", flush=True)
c, _ = s.accept()
n, t0 = 0, None
while b := c.recv(1 << 20):
    t0 = t0 or time.monotonic()
    n += len(b)
print(n, n * 8 / (time.monotonic() - t0), flush=True)
"""
SEND = """
import socket, sys
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10) as s:
    s.sendall(b"x" * int(sys.argv[3]))
"""


def _require_root() -> None:
    if os.geteuid() != 0:
        pytest.fail(
            "scripts/nodes.sh needs root (network namespaces, a bridge, mounts): run the tests "
            "as root, as CI does"
        )


@dataclass
class Node:
    name: str
    address: str
    rate: str
    netns: str
    port: str


class Nodes:
    """One set of simulated nodes under its own prefix."""

    def __init__(self) -> None:
        # 't' + 4 hex digits: the prefix allows 6 characters (interface names are <= 15)
        self.prefix = "t" + secrets.token_hex(2)
        self.env = dict(os.environ, STOKER_NODES_PREFIX=self.prefix)
        self.procs: list[subprocess.Popen[str]] = []

    def script(self, *args: str, env: dict[str, str] | None = None, timeout_s: float = 60):
        return subprocess.run(
            [str(NODES), *args],
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )

    def up(self, *specs: str) -> dict[str, Node]:
        proc = self.script("up", *specs)
        assert proc.returncode == 0, f"nodes.sh up failed:\n{proc.stdout}\n{proc.stderr}"
        return self.list()

    def list(self) -> dict[str, Node]:
        proc = self.script("list")
        assert proc.returncode == 0, proc.stderr
        nodes = [Node(*line.split()) for line in proc.stdout.splitlines()]
        return {n.name: n for n in nodes}

    def run(self, node: str, *cmd: str, timeout_s: float = 30) -> str:
        proc = self.script("exec", node, *cmd, timeout_s=timeout_s)
        assert proc.returncode == 0, f"exec in {node} failed:\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout

    def python(self, node: str, code: str, *args: str, timeout_s: float = 30) -> str:
        return self.run(node, sys.executable, "-c", code, *args, timeout_s=timeout_s)

    def start_python(self, node: str, code: str, *args: str) -> subprocess.Popen[str]:
        """A long-running Python process in ``node`` that has printed its first line."""
        proc = subprocess.Popen(
            [str(NODES), "exec", node, sys.executable, "-u", "-c", code, *args],
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.strip() == "listening", f"{node}: {first!r} {proc.stderr.read()}"
        return proc

    def down(self) -> None:
        proc = self.script("down")
        assert proc.returncode == 0, f"nodes.sh down failed:\n{proc.stderr}"
        for p in self.procs:  # down stops what still runs inside the nodes
            p.wait(timeout=15)

    def leftovers(self) -> list[str]:
        """Everything of this prefix that still exists on the host."""
        mark = self.prefix + "-"
        netns = json.loads(subprocess.check_output(["ip", "-j", "netns", "list"]) or b"[]")
        links = json.loads(subprocess.check_output(["ip", "-j", "link", "show"]))
        mounts = Path("/proc/self/mounts").read_text().splitlines()
        state = STATE_ROOT / self.prefix
        return (
            [f"netns {n['name']}" for n in netns if n["name"].startswith(mark)]
            + [f"link {link['ifname']}" for link in links if link["ifname"].startswith(mark)]
            + [f"mount {m}" for m in mounts if str(state) in m]
            + ([f"state {state}"] if state.exists() else [])
        )


@pytest.fixture
def nodes() -> Iterator[Nodes]:
    _require_root()
    n = Nodes()
    assert not n.leftovers(), "a fresh prefix already has objects"
    try:
        yield n
    finally:
        try:
            n.down()
        finally:
            for p in n.procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    assert not n.leftovers(), f"nodes.sh down left: {n.leftovers()}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _host_ipv4_addresses() -> list[str]:
    addrs = json.loads(subprocess.check_output(["ip", "-j", "-4", "addr", "show"]))
    return [a["local"] for link in addrs for a in link.get("addr_info", [])]


def test_nodes_reach_each_other_over_tcp_and_nothing_else(nodes: Nodes) -> None:
    up = nodes.up("alpha:1gbit", "beta:200mbit", "gamma:100mbit")
    assert [n.address for n in up.values()] == ["10.77.0.1", "10.77.0.2", "10.77.0.3"]
    port = _free_port()
    nodes.start_python("beta", ECHO_SERVER, str(port))
    for client in ("alpha", "gamma"):
        reply = nodes.python(client, CONNECT, up["beta"].address, str(port), client)
        assert reply.strip() == f"reply echo:{client}", reply

    # The host listens on every address, loopback included; from inside a node none of them
    # answers: 127.0.0.1 is the node's own (empty) loopback, the host's addresses have no route.
    with socket.socket() as host_listener:
        host_listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        host_listener.bind(("0.0.0.0", 0))
        host_listener.listen(8)
        host_port = host_listener.getsockname()[1]
        host_addrs = _host_ipv4_addresses()
        assert "127.0.0.1" in host_addrs
        # the host itself reaches its listener on each of these addresses
        for addr in host_addrs:
            socket.create_connection((addr, host_port), timeout=3).close()
            host_listener.accept()[0].close()
        for addr in host_addrs:
            out = nodes.python("alpha", CONNECT, addr, str(host_port), "x")
            assert out.startswith("failed"), f"node alpha reached the host at {addr}: {out}"
    # a node's routing table: its own /24 on eth0, nothing else (no default route, no NAT)
    routes = json.loads(nodes.run("alpha", "ip", "-j", "route", "show"))
    assert routes == [
        {
            "dst": "10.77.0.0/24",
            "dev": "eth0",
            "protocol": "kernel",
            "scope": "link",
            "prefsrc": "10.77.0.1",
            "flags": [],
        }
    ], routes
    links = json.loads(nodes.run("alpha", "ip", "-j", "link", "show"))
    assert sorted(link["ifname"] for link in links) == ["eth0", "lo"]


def test_each_node_has_its_own_dev_shm(nodes: Nodes) -> None:
    nodes.up("a:1gbit", "b:1gbit")
    name = f"stoker-nodes-test-{nodes.prefix}"
    nodes.run("a", "sh", "-c", f"echo written-in-a > /dev/shm/{name}")
    # a second process of node a sees it
    assert nodes.run("a", "cat", f"/dev/shm/{name}") == "written-in-a\n"
    # node b and the host do not
    assert nodes.run("b", "sh", "-c", f"test -e /dev/shm/{name} && echo seen || echo absent") == (
        "absent\n"
    )
    assert not Path("/dev/shm", name).exists()
    # node b's /dev/shm is a tmpfs of its own (and empty)
    assert nodes.run("b", "ls", "-A", "/dev/shm") == ""
    # (the last mount on /dev/shm is the one processes see)
    mounts = nodes.run("b", "findmnt", "-n", "-o", "FSTYPE,SOURCE", "/dev/shm").splitlines()
    assert mounts[-1].split() == ["tmpfs", f"stoker-nodes-{nodes.prefix}-b"], mounts


def _rate_bytes(rate: str) -> int:
    units = {"kbit": 1000, "mbit": 1000**2, "gbit": 1000**3}
    return int(rate[:-4]) * units[rate[-4:]] // 8


def test_rate_limit_is_the_nodes_network_card(nodes: Nodes) -> None:
    up = nodes.up("fast:1gbit", "slow:40mbit")
    for node in up.values():
        # what the node sends: its eth0; what it receives: its port on the bridge (host side)
        inside = json.loads(nodes.run(node.name, "tc", "-j", "qdisc", "show", "dev", "eth0"))
        outside = json.loads(
            subprocess.check_output(["tc", "-j", "qdisc", "show", "dev", node.port])
        )
        for qdiscs in (inside, outside):
            assert len(qdiscs) == 1 and qdiscs[0]["kind"] == "tbf" and qdiscs[0]["root"], qdiscs
            assert qdiscs[0]["options"]["rate"] == _rate_bytes(node.rate), qdiscs

    # Coarse throughput check, both directions through the slow node's card. Noise on a busy
    # machine only slows a transfer down, so the upper bound is tight and the lower one generous.
    cap_bps = 40e6
    size = 5_000_000  # ~1 s at 40 Mbit/s
    for sender, receiver in (("fast", "slow"), ("slow", "fast")):
        port = _free_port()
        server = nodes.start_python(receiver, SINK_SERVER, str(port))
        nodes.python(sender, SEND, up[receiver].address, str(port), str(size))
        out, err = server.communicate(timeout=30)
        received, bps = out.split()
        assert int(received) == size, err
        assert 0.2 * cap_bps < float(bps) < 1.15 * cap_bps, (
            f"{sender} -> {receiver}: {float(bps) / 1e6:.1f} Mbit/s through a 40 Mbit/s card"
        )


def test_cut_partitions_a_node_silently_and_heal_ends_it(nodes: Nodes) -> None:
    n = nodes.up("a:1gbit", "b:1gbit", "c:1gbit")
    port = _free_port()
    for node in ("b", "c"):
        nodes.start_python(node, ECHO_SERVER, str(port))
    chat = nodes.start_python("a", CHAT, n["b"].address, str(port))
    assert chat.stdin is not None and chat.stdout is not None

    def say() -> str:
        chat.stdin.write("send\n")
        chat.stdin.flush()
        return chat.stdout.readline().strip()

    assert say() == "reply echo:again"
    assert nodes.script("cut", "b").returncode == 0
    t0 = time.monotonic()
    out = nodes.python("a", CONNECT, n["b"].address, str(port), "x")
    # a partition, not a refusal: the SYN is dropped, so the connect waits its full 3 s timeout
    assert out.strip() == "failed TimeoutError timed out", out
    assert time.monotonic() - t0 >= 3
    assert nodes.python("a", CONNECT, n["c"].address, str(port), "up").strip() == "reply echo:up"
    assert nodes.script("heal", "b").returncode == 0
    out = nodes.python("a", CONNECT, n["b"].address, str(port), "back")
    assert out.strip() == "reply echo:back", out
    # the connection opened before the cut was never reset: it carries on
    assert say() == "reply echo:again"
    bad = nodes.script("cut", "nosuch")
    assert bad.returncode != 0 and "no node 'nosuch'" in bad.stderr


def test_down_stops_processes_in_the_nodes_and_is_idempotent(nodes: Nodes) -> None:
    nodes.up("a:100mbit")
    sleeper = subprocess.Popen([str(NODES), "exec", "a", "sleep", "300"], env=nodes.env)
    nodes.procs.append(sleeper)
    deadline = time.monotonic() + 10
    while not nodes.run("a", "sh", "-c", "pgrep -x sleep || true").strip():
        assert time.monotonic() < deadline, "the sleeper never started in node a"
        time.sleep(0.1)
    nodes.down()
    assert sleeper.returncode is not None
    assert not nodes.leftovers()
    nodes.down()  # again: nothing to do, still succeeds


@pytest.mark.parametrize(
    "specs",
    [
        ["a:fast"],  # not a rate
        ["a:1gbit", "a:1gbit"],  # a name twice
        ["Bad!:1gbit"],  # not a name
        ["a"],  # no rate
        [],  # no node
    ],
)
def test_up_with_a_bad_argument_fails_and_leaves_nothing(nodes: Nodes, specs: list[str]) -> None:
    proc = nodes.script("up", *specs)
    assert proc.returncode != 0
    assert "error:" in proc.stderr or "usage:" in proc.stderr, proc.stderr
    assert not nodes.leftovers()


def test_up_failing_halfway_removes_what_it_created(nodes: Nodes) -> None:
    # The tmpfs mount fails only after the bridge, the first namespace and its veth exist.
    env = dict(nodes.env, STOKER_NODES_SHM_SIZE="not-a-size")
    proc = nodes.script("up", "a:1gbit", "b:1gbit", env=env)
    assert proc.returncode != 0
    assert "up failed: removing what it created" in proc.stderr, proc.stderr
    assert not nodes.leftovers()


def test_outside_root_it_fails_at_once_with_a_clear_message(nodes: Nodes) -> None:
    for args in (["up", "a:1gbit"], ["down"], ["exec", "a", "true"], ["list"]):
        proc = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(NODES), *args],
            env=nodes.env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode != 0
        assert "must run as root" in proc.stderr, proc.stderr
    assert not nodes.leftovers()
