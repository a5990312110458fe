"""``./stoker demo``'s orchestration (``stoker_tools.demo``) run twice in a row in one state
directory, as a user runs it twice in one clone: the naive serial loader and then the real job
(the jar ``./stoker test`` built) over the generated sample dataset, served by the testkit's local
S3 server on the same port both times, and the simulated trainer. A small dataset and a short step
(``--records``, ``--step-time-ms``) keep it short; the demo's defaults are larger.

Each run must end with the trainer's ``result: OK``, the job's accounting line, whose counts
must match the sample dataset's records (counted here from its JSONL files), and the table of
both loaders, each with every sample and busy shares between 0 and 1 (no timing is asserted).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from harness.paths import REPO_ROOT, TOKENIZER_DIR, require_shared

RECORDS = 24
#: A row of the closing table: loader, samples, wall s, samples/s, first batch s, waiting
#: (steady), busy (steady), busy (whole run).
TABLE_ROW = re.compile(
    r"^(naive serial loop, in each rank|Stoker, up to \d+ batches ahead) +(\d+) +([0-9.]+) +"
    r"([0-9.]+) +([0-9.]+) +([0-9.]+)% +([0-9.]+)% +([0-9.]+)%$",
    re.M,
)
ACCOUNTING = re.compile(
    r"^\[job\] Run finished: records in steps 0\.\.(\d+)=(\d+), read=(\d+), "
    r"samples emitted=(\d+), dead letters=(\d+)$",
    re.M,
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _demo(state: Path, out_root: Path, s3_port: int, rest_port: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, STOKER_S3_PORT=str(s3_port), PYTHONPATH=str(REPO_ROOT / "python"))
    for key in ("STOKER_DEMO_TRAINER", "STOKER_DEMO_S3", "STOKER_DEMO_NAIVE"):
        env.pop(key, None)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "stoker_tools.demo",
            "--repo",
            str(REPO_ROOT),
            "--state-dir",
            str(state),
            "--tokenizer",
            str(TOKENIZER_DIR),
            "--records",
            str(RECORDS),
            "--step-time-ms",
            "20",
            "--",
            "--stoker.output.root",
            str(out_root),
            "--rest.port",
            str(rest_port),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )


def test_the_demo_runs_twice_in_a_row_in_one_clone(tmp_path):
    jar = Path(os.environ.get("STOKER_JAR", REPO_ROOT / "job/target/stoker-job.jar"))
    testkit = REPO_ROOT / "testkit/target/stoker-testkit.jar"
    if not jar.is_file() or not testkit.is_file():
        pytest.fail(f"{jar} or {testkit} is missing: run ./stoker test (mvn package builds them)")
    require_shared()
    state = tmp_path / "state"
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    out_root = Path(tempfile.mkdtemp(prefix="stoker-demo-test-", dir=base))
    s3_port, rest_port = _free_port(), _free_port()  # the same ports for both runs
    try:
        for run in (1, 2):
            proc = _demo(state, out_root, s3_port, rest_port)
            output = proc.stdout + proc.stderr
            assert proc.returncode == 0, f"run {run}:\n{output[-6000:]}"
            assert "result: OK" in proc.stdout, f"run {run}:\n{output[-6000:]}"
            records = sum(
                len([x for x in f.read_text().splitlines() if x.strip()])
                for f in (state / "sample-dataset").glob("*.jsonl")
            )
            m = ACCOUNTING.search(proc.stdout)
            assert m, f"run {run}: no accounting line:\n{output[-6000:]}"
            planned, read, emitted, dead = (int(x) for x in m.groups()[1:])
            assert planned == read == records == RECORDS == emitted + dead, m.group(0)
            assert re.search(r"total: .* steady_wait_time_ratio=[0-9.]+", proc.stdout), output
            rows = {r[0].split(",")[0]: r[1:] for r in TABLE_ROW.findall(proc.stdout)}
            assert sorted(rows) == ["Stoker", "naive serial loop"], f"run {run}:\n{output[-6000:]}"
            for name, (samples, _, _, _, waiting, busy, busy_whole) in rows.items():
                assert int(samples) == records, name  # both loaders trained on every sample
                assert 0 <= float(busy) <= 100 and 0 <= float(busy_whole) <= 100, name
                assert abs(float(waiting) + float(busy) - 100) < 0.15, name
            assert "Steady state: the trainer is busy" in proc.stdout
            assert "'steady' is after each rank's first batch" in proc.stderr
            print(
                f"run {run}:",
                *proc.stdout.splitlines()[-10:],
                proc.stderr.splitlines()[-1],
                sep="\n",
            )
            # the demo removed its job directory; nothing left running on its ports
            assert list(out_root.iterdir()) == [], f"run {run}"
        with socket.socket() as s:
            # the S3 server is gone: nothing listens on its port. SO_REUSEADDR, as a server would
            # set it, so that the connections it closed last (TIME_WAIT for 60 s on Linux) do not
            # count; a socket still listening there does, and fails the bind.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", s3_port))
    finally:
        subprocess.run(["rm", "-rf", str(out_root)], check=False)
