"""The real job on embedded Flink with the tests' defaults (the jar ``./stoker test`` built; its
command line from :func:`stoker_tools.job.embedded_command`), and generated datasets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from stoker_tools.job import JobBuildMissing, embedded_command

from harness.paths import DATASET, REPO_ROOT, TOKENIZER_DIR, require_shared


def job_options(
    out_root: Path,
    job_name: str,
    *extra: str,
    dataset: Path = DATASET,
    world_size: int = 2,
    micro_batch_size: int = 4,
) -> dict[str, str]:
    """The tests' job options over ``dataset`` with the real tokenizer, writing to
    ``out_root/job_name``: pixel budget 1003520, a free REST port, a checkpoint a second, no
    restart; ``extra`` are more ``--key value`` pairs (they win over these)."""
    if len(extra) % 2 or not all(k.startswith("--") for k in extra[::2]):
        raise ValueError(f"extra options are --key value pairs: {extra}")
    return {
        "stoker.dataset.path": str(dataset),
        "stoker.tokenizer.path": str(TOKENIZER_DIR),
        "stoker.output.root": str(out_root),
        "stoker.job-name": job_name,
        "stoker.dp-world-size": str(world_size),
        "stoker.micro-batch-size": str(micro_batch_size),
        "stoker.image.max-pixels": "1003520",
        "rest.port": "0",
        "execution.checkpointing.interval": "1s",
        "restart-strategy.type": "none",
        **{k[2:]: v for k, v in zip(extra[::2], extra[1::2], strict=True)},
    }


def job_command(out_root: Path, job_name: str, *extra: str, **shape: Any) -> list[str]:
    """Command line of the real job (embedded Flink) with :func:`job_options` (``shape``: its
    ``dataset``, ``world_size`` and ``micro_batch_size``). Fails the test if the jar, its
    classpath file or ``../shared`` is missing.

    ``./stoker test`` passes the jar and its classpath file as ``STOKER_JAR`` and
    ``STOKER_CLASSPATH_FILE`` (:class:`stoker_tools.job.JobBuild`).
    """
    require_shared()
    options = job_options(out_root, job_name, *extra, **shape)
    try:
        return embedded_command(options)
    except JobBuildMissing as e:
        pytest.fail(f"{e}: run ./stoker test")


def run_to_end(command: list[str], log: Path, what: str, timeout_s: float = 600) -> None:
    """Run the job ``command`` to its end, its output in ``log``; fail the test with the log's
    tail if it exits non-zero."""
    with log.open("w") as out:
        proc = subprocess.run(
            command, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s, check=False
        )
    if proc.returncode != 0:
        pytest.fail(f"{what} failed (exit {proc.returncode}):\n{log.read_text()[-6000:]}")


def run_pixel_dtype_jobs(
    out_root: Path, dtypes: tuple[str, ...], *, world_size: int = 1, micro_batch_size: int = 4
) -> dict[str, Path]:
    """Run the real job once per ``stoker.image.pixel-dtype`` in ``dtypes`` over the same data
    (:data:`~harness.paths.DATASET`, the default seed), each to completion with no prefetch bound
    (every batch is written without a reader), and return each run's job directory by dtype."""
    dirs = {}
    for dtype in dtypes:
        name = f"px-{dtype.lower()}"
        command = job_command(
            out_root,
            name,
            "--stoker.image.pixel-dtype",
            dtype,
            "--stoker.prefetch-depth",
            "0",
            world_size=world_size,
            micro_batch_size=micro_batch_size,
        )
        run_to_end(command, out_root / f"{name}.log", f"{dtype} job")
        dirs[dtype] = out_root / name
    return dirs


def generate_records(directory: Path, records: int) -> None:
    """``records`` generated records (``scripts/make_sample_dataset.py``) in ``directory``."""
    subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "make_sample_dataset.py"),
            str(directory),
            "--records",
            str(records),
        ],
        check=True,
        capture_output=True,
    )
