"""Kill-and-resume runs of the example trainers and the framework adapters against the real job:
the job's shape (the shared LLaVA-style dataset, W = 2 ranks of B = 2 rows, 10 steps), the
processes a test starts (each in its own session, all stopped at the end), the job's REST calls,
and the records the trainers write (one JSON line per batch trained on: step, rank, rows,
sample indices, locations, back-filled rows, tensor SHA-256, tokens, loss) and what is asserted
on them. Used by tests/model/test_train_example.py, test_torchtitan.py and test_megatron.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from harness.jobs import job_command
from harness.paths import DATASET

W, B = 2, 2
NUM_STEPS = 10  # ceil(38 records / (W * B))
GRAD_ACCUM, CHECKPOINT_EVERY = 2, 2  # checkpoints after steps 3, 7 and 9 (the end)
KILL_AFTER_CHECKPOINT = 3
MAX_PIXELS = 12544  # 16 merged image tokens at most: a CPU step of the tiny model is short
TIMEOUT_S = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def terminated(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # so that the test's finally stops its processes


class Processes:
    """Every process the test starts, each in its own session so that a kill reaches its
    children too; :meth:`stop_all` ends those still running (also when pytest gets SIGTERM)."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> Any:
        with log.open("ab") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.procs.append(proc)
        return proc

    @staticmethod
    def kill(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop_all(self) -> None:
        for proc in self.procs:
            self.kill(proc)


def wait(what: str, condition: Any, timeout_s: float = TIMEOUT_S, logs: list[Path] = ()) -> Any:
    """``condition()``'s first truthy value, polled every 20 ms; fails the test after
    ``timeout_s`` with the tails of ``logs``."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}\n{tails(logs)}")
        time.sleep(0.02)


MAIN_CLASS = "dev.stoker.job.StokerJob"


def job_parts(
    out_root: Path, job_name: str, base: Path, rest_port: int
) -> tuple[list[str], list[str]]:
    """The real job's command line split after its main class: (the JVM's part, the job's
    ``--key value`` options)."""
    cmd = job_command(
        out_root,
        job_name,
        "--stoker.image.max-pixels",
        str(MAX_PIXELS),
        "--stoker.prefetch-depth",
        "2",
        "--rest.port",
        str(rest_port),
        "--execution.checkpointing.dir",
        (base / "checkpoints").as_uri(),
        dataset=DATASET,
        world_size=W,
        micro_batch_size=B,
    )
    cut = cmd.index(MAIN_CLASS) + 1
    return cmd[:cut], cmd[cut:]


def tails(logs: Any) -> str:
    """The last 3000 characters of each existing file of ``logs``, for a failure message."""
    return "\n".join(f"--- {p}:\n{p.read_text()[-3000:]}" for p in sorted(logs) if p.exists())


def finish(proc: subprocess.Popen[bytes], what: str, base: Path) -> None:
    """Wait for ``proc`` to exit 0; else fail with the tails of every log in ``base``."""
    try:
        rc = proc.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what} did not end within {TIMEOUT_S}s:\n{tails(base.glob('*.log'))}")
    assert rc == 0, f"{what} exited {rc}:\n{tails(base.glob('*.log'))}"


def records(path: Path) -> list[dict[str, Any]]:
    """The trainer's record file ``path`` (one JSON line per batch; a torn last line skipped)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def rest(port: int, path: str, body: dict[str, Any] | None = None) -> Any:
    """GET (or, with ``body``, POST) ``path`` of the job's REST API on ``port``, as JSON."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="GET" if body is None else "POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def stop_with_savepoint(port: int, target: Path) -> str:
    """``POST /jobs/<id>/stop`` (no drain) on the only job; the savepoint's path."""
    (job,) = rest(port, "/jobs/overview")["jobs"]
    trigger = rest(port, f"/jobs/{job['jid']}/stop", {"targetDirectory": target.as_uri()})
    url = f"/jobs/{job['jid']}/savepoints/{trigger['request-id']}"
    status = wait(
        "the savepoint",
        lambda: (s := rest(port, url))["status"]["id"] != "IN_PROGRESS" and s,
        timeout_s=120,
    )
    assert "location" in status["operation"], f"the savepoint failed: {status}"
    return str(status["operation"]["location"])


def generation(job_dir: Path) -> str | None:
    """The generation ``job_dir/manifest.json`` names (``None``: no readable manifest yet)."""
    try:
        return str(json.loads((job_dir / "manifest.json").read_text())["generation"])
    except (OSError, ValueError, KeyError):
        return None


def by_rank(records: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """``records`` per rank (0 .. W-1), each in its order."""
    out: dict[int, list[dict[str, Any]]] = {r: [] for r in range(W)}
    for rec in records:
        out[rec["rank"]].append(rec)
    return out


def batch(rec: dict[str, Any]) -> tuple[Any, ...]:
    """What identifies the batch a record trained on: step, rank, rows, samples, tensor bytes."""
    return (rec["step"], rec["rank"], rec["rows"], tuple(rec["sample_index"]), rec["sha256"])


def assert_same_training(got: list[dict[str, Any]], want: list[dict[str, Any]], what: str) -> None:
    """``got`` trained on ``want``'s batches in order, with the same tokens and losses."""
    assert [batch(r) for r in got] == [batch(r) for r in want], what
    for g, w in zip(got, want, strict=True):
        assert g["tokens"] == w["tokens"], (what, g["step"])
        if w["loss"] is not None:
            assert g["loss"] == pytest.approx(w["loss"], rel=1e-6), (what, g["step"])


def trained_samples(records: list[dict[str, Any]]) -> dict[int, str]:
    """Slot index -> location of every sample trained on (back-filled copies left out)."""
    out: dict[int, str] = {}
    for rec in records:
        for row, (index, location) in enumerate(
            zip(rec["sample_index"], rec["location"], strict=True)
        ):
            if row not in rec["backfilled"]:
                assert index not in out, f"sample {index} trained on twice"
                out[index] = location
    return out
