"""Fixtures of the real-model tier; its shared helpers are in :mod:`harness.real_model`."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harness import train_runs
from harness.real_model import PLAIN_MICRO_BATCH, Record, model_dataset, read_all, run_job

from stoker import Batch


@pytest.fixture(scope="session")
def dataset() -> Iterator[tuple[Path, dict[tuple[str, int], Record]]]:
    """:func:`harness.real_model.model_dataset`, once per session."""
    with model_dataset() as d:
        yield d


@pytest.fixture(scope="session")
def plain_run(dataset) -> Iterator[Callable[[str], list[Batch]]]:
    """Every batch of the job run over :func:`dataset` with a preset and the tier's defaults
    (:func:`harness.real_model.run_job` with B = ``PLAIN_MICRO_BATCH``, no further options): run
    once per preset in the
    session, as the real-model and packing tests both read it; its files (on /dev/shm) stay
    mapped until the session ends."""
    root, _ = dataset
    out_root = Path(tempfile.mkdtemp(prefix="stoker-model-", dir="/dev/shm"))
    runs: dict[str, list[Batch]] = {}

    def run(preset: str) -> list[Batch]:
        if preset not in runs:
            runs[preset] = read_all(
                run_job(root, preset, out_root, name=preset, micro_batch_size=PLAIN_MICRO_BATCH)
            )
        return runs[preset]

    try:
        yield run
    finally:
        runs.clear()
        shutil.rmtree(out_root, ignore_errors=True)


@pytest.fixture(scope="session")
def uninterrupted_job() -> Iterator[Path]:
    """The kill-and-resume tests' job (:mod:`harness.train_runs`) run once to its end with no
    prefetch bound (:func:`harness.train_runs.finished_job`): its job directory, whose batches
    each uninterrupted trainer run of the example trainers and the framework adapters reads from
    a copy of its own. One job for the tier instead of one per trainer."""
    base = Path(tempfile.mkdtemp(prefix="stoker-uninterrupted-", dir="/dev/shm"))
    try:
        yield train_runs.finished_job(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
