"""Exactly once, as the trainers and the sink see it: every (step, rank) read once with the
batch an uninterrupted reference run gave, and no batch file left behind."""

from __future__ import annotations

import collections
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def assert_read_once_as(
    reference: Iterable[dict[str, Any]], run: Iterable[dict[str, Any]], *, what: str = "reference"
) -> None:
    """The trainers' records of ``run`` hold every (step, rank) of ``reference`` exactly once,
    each with the reference's SHA-256 (records: :func:`harness.trainers.read_record`)."""
    run = list(run)
    counts = collections.Counter((r["step"], r["rank"]) for r in run)
    assert [k for k, n in counts.items() if n > 1] == [], "batches read more than once"
    want = {(r["step"], r["rank"]): r["sha256"] for r in reference}
    got = {(r["step"], r["rank"]): r["sha256"] for r in run}
    assert sorted(got) == sorted(want), f"(step, rank) read: missing {sorted(set(want) - set(got))}"
    differ = sorted(k for k in want if got[k] != want[k])
    assert differ == [], f"batches that differ from the {what}: {differ}"


def assert_only_generation_left(job_dir: Path, gen: str) -> None:
    """Exactly once on the sink's side: older generations are gone, and no batch file is left in
    ``gen`` (a batch published again after the trainer consumed it would stay behind as a file
    nobody reads)."""
    assert sorted(p.name for p in job_dir.glob("gen-*")) == [f"gen-{gen}"]
    left = sorted(str(p.relative_to(job_dir)) for p in job_dir.glob(f"gen-{gen}/rank-*/step-*"))
    assert left == [], f"batch files left in generation {gen}: {left}"
