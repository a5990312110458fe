"""The simulated trainer (``python -m stoker_tools.simulate --record``) as a child process, and
what it and the sink leave in a job directory (``manifest.json``, ``ack.json``, batch files)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def start_trainer(
    root: Path | str,
    record: Path,
    procs: list[subprocess.Popen[str]],
    *,
    ranks: str | None = None,
    step_time_ms: int = 10,
    timeout_s: int = 120,
    start_step: int | None = None,
    stop_after_step: int | None = None,
    popen: Callable[..., subprocess.Popen[str]] = subprocess.Popen,
) -> subprocess.Popen[str]:
    """A recording simulated trainer over the job directory ``root`` in the background: it
    writes one JSON line per batch read (step, rank, sha256, wait, ...) to ``record``. Started
    with ``popen(args, stdout=..., stderr=..., text=True)`` (default: on this machine) and
    appended to ``procs``, which the test's clean-up kills."""
    args = [
        sys.executable,
        "-m",
        "stoker_tools.simulate",
        "--root",
        str(root),
        *(("--ranks", ranks) if ranks is not None else ()),
        "--record",
        str(record),
        "--step-time-ms",
        str(step_time_ms),
        "--timeout-s",
        str(timeout_s),
        "--progress-interval-s",
        "5",
    ]
    if start_step is not None:
        args += ["--start-step", str(start_step)]
    if stop_after_step is not None:
        args += ["--stop-after-step", str(stop_after_step)]
    proc = popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    procs.append(proc)
    return proc


def finish(proc: subprocess.Popen[str], timeout_s: float) -> str:
    """Wait for a trainer; it must end with exit code 0 and ``result: OK``. Its output."""
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"the simulated trainer did not finish within {timeout_s}s:\n{out[-3000:]}")
    assert proc.returncode == 0, f"the simulated trainer failed:\n{out[-3000:]}"
    assert "result: OK" in out, out[-3000:]
    return out


def read_record(path: Path) -> list[dict[str, Any]]:
    """A trainer's record: one dict per batch it read."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def generation(job_dir: Path) -> str | None:
    """The generation ``manifest.json`` names, or ``None`` before there is one."""
    try:
        return str(json.loads((job_dir / "manifest.json").read_text())["generation"])
    except (OSError, ValueError, KeyError):
        return None


def manifest(job_dir: Path) -> dict[str, Any]:
    return dict(json.loads((job_dir / "manifest.json").read_text()))


def consumed(rank_dir: Path) -> int:
    """``consumed_step`` of the rank's ``ack.json`` (-1 before the first acknowledgement)."""
    try:
        return int(json.loads((rank_dir / "ack.json").read_text())["consumed_step"])
    except (OSError, ValueError, KeyError):
        return -1


def steps_on_disk(rank_dir: Path) -> list[int]:
    """The steps of the batch files in ``rank_dir``, ascending."""
    return sorted(int(p.name[5:15]) for p in rank_dir.glob("step-*.arrow"))
