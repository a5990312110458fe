"""bench/faults.py without nodes or a cluster: what it counts as the trainers' prefetch, when it
sees the job deliver again, its exactly-once check and its result table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from harness.paths import REPO_ROOT

from stoker.protocol import batch_file_name

sys.path.insert(0, str(REPO_ROOT))
from bench import faults  # noqa: E402


class ShmOnly:
    """The one thing the bench reads of its nodes here: each node's /dev/shm (a directory)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def shm(self, node: str) -> Path:
        return self.root / node


def _bench(tmp_path: Path) -> faults.Bench:
    bench = faults.Bench.__new__(faults.Bench)  # no nodes are brought up
    bench.nodes = ShmOnly(tmp_path)  # type: ignore[assignment]
    bench.records = [tmp_path / f"trainer-gpu{n}.jsonl" for n in range(faults.GPU_NODES)]
    return bench


def _write(tmp_path: Path, rank: int, steps: list[int], acked: int) -> None:
    job_dir = tmp_path / f"gpu{rank // faults.RANKS_PER_NODE}" / "stoker-faults" / faults.JOB_NAME
    rank_dir = job_dir / "gen-7" / f"rank-{rank}"
    rank_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "manifest.json").write_text(json.dumps({"generation": "7"}))
    for step in steps:
        (rank_dir / batch_file_name(step)).write_bytes(b"")
    (rank_dir / "ack.json").write_text(json.dumps({"consumed_step": acked}))


def test_batches_in_hand_end_at_the_first_missing_step(tmp_path: Path) -> None:
    _write(tmp_path, 0, [11, 12, 13, 14], acked=10)
    _write(tmp_path, 1, [11, 13, 14, 40], acked=10)  # step 12 held up: one batch in hand
    _write(tmp_path, 2, [21, 22], acked=22)  # everything written was consumed
    # rank 3 has no directory yet
    assert _bench(tmp_path).on_disk() == {0: (14, 10, 4), 1: (40, 10, 1), 2: (22, 22, 0)}
    assert _bench(tmp_path).ahead() == {0: 4, 1: 1, 2: 0}


def test_the_job_counts_as_delivering_once_every_rank_passed_its_step_at_the_cut(
    tmp_path: Path,
) -> None:
    for rank in range(faults.WORLD_SIZE):
        _write(tmp_path, rank, [5, 6], acked=4)
    bench = _bench(tmp_path)
    top_at_cut = {rank: 6 for rank in range(faults.WORLD_SIZE)}
    flowing: list[float] = []
    bench.sleep_watching(0.3, top_at_cut, flowing)
    assert flowing == []
    for rank in range(faults.WORLD_SIZE - 1):
        _write(tmp_path, rank, [7], acked=4)
    bench.sleep_watching(0.3, top_at_cut, flowing)
    assert flowing == [], "one rank has no new batch yet"
    _write(tmp_path, faults.WORLD_SIZE - 1, [7], acked=4)
    bench.sleep_watching(0.3, top_at_cut, flowing)
    assert len(flowing) == 1


def _received(tmp_path: Path, rows: list[tuple[int, int]]) -> None:
    """The trainers' records (``stoker_tools.simulate --record``) of these (step, rank)."""
    for node in range(faults.GPU_NODES):
        with (tmp_path / f"trainer-gpu{node}.jsonl").open("w") as f:
            for step, rank in rows:
                if rank // faults.RANKS_PER_NODE == node:
                    f.write(json.dumps({"step": step, "rank": rank}) + "\n")


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([(s, r) for s in range(3, 6) for r in range(4)], "PASS (12 batches)"),
        ([(s, r) for s in range(3, 6) for r in range(4)] + [(4, 2)], "FAIL rank 2: a step"),
        ([(s, r) for s in (3, 5) for r in range(4)], "FAIL rank 0: a gap in steps 3..5"),
        ([(s, r) for s in range(3) for r in range(3)], "FAIL rank 3: nothing received"),
    ],
)
def test_exactly_once_finds_a_duplicate_a_gap_and_a_silent_rank(
    tmp_path: Path, rows: list[tuple[int, int]], expected: str
) -> None:
    _received(tmp_path, rows)
    assert _bench(tmp_path).check_exactly_once().startswith(expected)


def test_the_table_says_when_the_job_ran_before_the_heal(tmp_path: Path) -> None:
    args = faults.parse_args(["--label", "t", "--out", str(tmp_path), "--prefetch-depth", "30"])
    gpu = faults.Fault("gpu1", 20, {0: 29, 1: 30}, 9.5, 35.0, 38.0, 15.0, ["+9.5s lost"])
    gpu.max_wait_s = {0: 0.0, 1: 1.5}
    cpu = faults.Fault("cpu1", 20, {0: 30, 1: 30}, 9.6, 15.5, 18.0, -4.5)
    md = faults.write_results([gpu, cpu], "PASS (9 batches)", args).read_text()
    assert "| gpu1 cut 20 s | 29-30 | 9.5 s | 35.0 s | 15.0 s | 38.0 s | 1 | 1.5 s |" in md
    assert "| cpu1 cut 20 s | 30-30 | 9.6 s | 15.5 s | (before the heal) | 18.0 s | 0 |" in md
    assert "prefetch depth 30 (60 s of steps)" in md
    saved = json.loads((tmp_path / "faults-t.json").read_text())
    assert saved["faults"][0]["failures"] == ["+9.5s lost"]
