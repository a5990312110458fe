"""The job makes no network connection of its own: run in a network namespace with loopback only.

The real job (embedded Flink, local dataset and tokenizer, so there is no S3 endpoint to reach)
runs under ``unshare --net`` (a new network namespace whose only interface is ``lo``) and ``strace
-f --seccomp-bpf -e trace=connect``, which records every connection attempt of every thread,
including ones the namespace makes fail at once (e.g. to 169.254.169.254, the EC2 metadata
service that DJL's usage telemetry asks). Allowed: loopback (Flink's own ports; embedded Flink in fact connects to none)
other than DNS (port 53), and Unix sockets (glibc asks nscd's socket for user names). A second run with ``-DOPT_OUT_TRACKING=false -Dai.djl.offline=false``
(which the job leaves alone: an explicit setting wins) shows that the check sees the telemetry connection when it is
on, so the first run's clean result is not an artefact of the observation.

``--seccomp-bpf`` has the kernel stop the job's threads for strace at ``connect`` only, not at
every system call (the two runs took 44 and 52 CPU-seconds so, 50 and 65 without it; the control
run shows that it still sees every connection).

Needs root (network namespaces) and strace 5.3 or later: without them the test fails, saying so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from harness.jobs import job_command

CONNECT = re.compile(r"connect\(\d+, \{sa_family=(AF_[A-Z0-9]+)(.*?)\}, \d+\)")
PORT = re.compile(r"sin6?_port=htons\((\d+)\)")
ADDR = re.compile(r'inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)"')


def _require_tools() -> None:
    if os.geteuid() != 0:
        pytest.fail(
            "test_no_network needs root: it runs the job in a new network namespace "
            "(unshare --net); run the tests as root (./stoker test does in CI)"
        )
    for tool in ("unshare", "strace", "ip", "java"):
        if shutil.which(tool) is None:
            pytest.fail(
                f"test_no_network needs {tool} on PATH (util-linux, strace, iproute2, a JDK)"
            )


def _connections(trace_dir: Path) -> list[tuple[str, str, int]]:
    """(family, address, port) of every connect() in the strace output files."""
    out = []
    for f in sorted(trace_dir.glob("trace*")):
        for line in f.read_text(errors="replace").splitlines():
            m = CONNECT.search(line)
            if not m:
                continue
            family, rest = m.group(1), m.group(2)
            if family == "AF_UNIX":
                out.append((family, rest.strip(", "), 0))
                continue
            port = PORT.search(rest)
            addr = ADDR.search(rest)
            host = (addr.group(1) or addr.group(2)) if addr else rest
            # Java connects IPv4 targets through IPv6 sockets, as IPv4-mapped addresses
            host = host.removeprefix("::ffff:") if "." in host else host
            out.append((family, host, int(port.group(1)) if port else -1))
    return out


def _run_isolated(tmp: Path, name: str, *jvm_props: str) -> list[tuple[str, str, int]]:
    """Runs the job in a loopback-only network namespace under strace; its connections."""
    traces = tmp / f"{name}-strace"
    traces.mkdir()
    cmd = job_command(tmp / "out", name, "--stoker.prefetch-depth", "0")
    cmd[1:1] = list(jvm_props)
    script = 'ip link set lo up && exec strace -f --seccomp-bpf -qq -e trace=connect -ff -o "$0/trace" "$@"'
    proc = subprocess.run(
        ["unshare", "--net", "--", "sh", "-c", script, str(traces), *cmd],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (
        f"the job failed in the network namespace ({proc.returncode}):\n"
        f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    manifest = tmp / "out" / name / "manifest.json"
    assert manifest.is_file(), f"the job wrote no manifest:\n{proc.stderr[-3000:]}"
    return _connections(traces)


def _outside(conns: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """Connections that are neither a Unix socket nor loopback (DNS on loopback counts as outside)."""
    bad = []
    for family, addr, port in conns:
        if family == "AF_UNIX":
            continue
        loopback = addr.startswith("127.") or addr == "::1"
        if family in ("AF_INET", "AF_INET6") and loopback and port != 53:
            continue
        bad.append((family, addr, port))
    return bad


def test_the_job_connects_to_nothing_but_loopback(tmp_path: Path) -> None:
    _require_tools()
    conns = _run_isolated(tmp_path, "isolated")
    assert _outside(conns) == [], f"connections outside loopback: {sorted(set(_outside(conns)))}"

    # the control: with DJL's telemetry switched on explicitly, the check sees it
    control = _run_isolated(
        tmp_path, "telemetry-on", "-DOPT_OUT_TRACKING=false", "-Dai.djl.offline=false"
    )
    assert ("169.254.169.254", 80) in [(a, p) for _, a, p in _outside(control)], (
        f"with OPT_OUT_TRACKING=false DJL should try the EC2 metadata service; saw "
        f"{sorted(set(_outside(control)))}"
    )
