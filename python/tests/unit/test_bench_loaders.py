"""bench/loaders/common.py: the benchmark's dataset and batch layout (no torch needed)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
from harness.paths import REPO_ROOT

_spec = importlib.util.spec_from_file_location(
    "bench_loaders_common", REPO_ROOT / "bench" / "loaders" / "common.py"
)
assert _spec and _spec.loader
common = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = common  # dataclasses look their module up
_spec.loader.exec_module(common)


def test_dataset_has_one_distinct_image_object_per_record(tmp_path: Path) -> None:
    n = len(common.POOL) + 5
    root = common.make_dataset(tmp_path / "ds", n)
    records = common.read_records(root)
    keys = [r["image"] for r in records]
    assert [r["line"] for r in records] == list(range(1, n + 1))
    assert len(set(keys)) == n  # nothing to cache: every sample its own object
    for i, rec in enumerate(records):
        pool_image = common.SHARED / common.POOL[i % len(common.POOL)]
        assert (root / rec["image"]).read_bytes() == pool_image.read_bytes()
        assert rec["conversations"][0]["value"].startswith("<image>\n")
    # reused as is when complete
    stamp = (root / "train.jsonl").stat().st_mtime_ns
    common.make_dataset(tmp_path / "ds", n)
    assert (root / "train.jsonl").stat().st_mtime_ns == stamp
    assert json.loads((root / "train.jsonl").read_text().splitlines()[0])["id"] == "s000000"


def _sample(line: int, length: int, patches: int) -> dict:
    rng = np.random.default_rng(line)
    ids = rng.integers(0, 150000, length)
    return {
        "line": line,
        "input_ids": ids,
        "labels": np.where(np.arange(length) > length // 2, ids, -100),
        "pixel_values": rng.standard_normal((patches, 1176)).astype(np.float32),
        "image_grid_thw": np.array([[1, 2, patches // 2]]),
    }


def test_collate_pads_like_stoker_and_splits_back() -> None:
    samples = [_sample(3, 7, 4), _sample(9, 12, 8), _sample(4, 5, 2)]
    batch = common.collate(samples)
    assert batch["lines"] == [3, 9, 4]
    assert batch["input_ids"].shape == (3, 12)
    assert batch["pixel_values"].shape == (14, 1176)
    assert (batch["input_ids"][0, 7:] == common.PAD_TOKEN_ID).all()
    assert (batch["labels"][2, 5:] == -100).all()
    assert batch["attention_mask"].sum(axis=1).tolist() == [7, 12, 5]
    back = common.split_samples(batch)
    for s in samples:
        for key in ("input_ids", "labels", "pixel_values", "image_grid_thw"):
            np.testing.assert_array_equal(back[s["line"]][key], s[key])


def test_micro_batches_keep_order_and_size() -> None:
    samples = [_sample(i, 3, 2) for i in range(1, 11)]
    batches = list(common.micro_batches(iter(samples), 4))
    assert [b["lines"] for b in batches] == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]


def test_a_gap_with_idle_cores_is_a_stall_and_a_busy_or_short_one_is_not() -> None:
    arrivals = [100.0, 101.0, 131.0, 132.0, 160.0, 161.0]
    busy = {(132.0, 160.0)}  # the contender computed through the second long gap

    def utilization(t0: float, t1: float) -> float:
        return 0.9 if (t0, t1) in busy else (float("nan") if t0 == 131.0 else 0.1)

    stalls = common.find_stalls(arrivals, utilization, stall_s=20)
    assert stalls == [{"from_unix": 101.0, "gap_s": 30.0, "cpu_utilization": 0.1}]
    # a gap that was not sampled counts as idle
    assert len(common.find_stalls([0.0, 25.0], lambda a, b: float("nan"), 20)) == 1
    assert common.find_stalls(arrivals, utilization, stall_s=40) == []


def test_the_pause_recovery_compares_the_rates_around_it_and_owns_only_its_gaps() -> None:
    # 8 samples every 0.1 s up to t=100, the server stopped 100-115, the first batch at 116, then
    # 8 samples every 0.2 s (half the rate) from 116 on
    arrivals = [round(0.1 * i, 3) for i in range(1, 1001)] + [
        round(116 + 0.2 * i, 3) for i in range(200)
    ]
    sizes = [8] * len(arrivals)
    gap = {"from_unix": 100.0, "gap_s": 16.0, "cpu_utilization": 0.05}
    r = common.pause_recovery(arrivals, sizes, 100.0, 115.0, [gap], stall_s=10)
    assert r["rate_before"] == 80.0  # 200 batches of 8 in (80, 100]
    assert r["rate_after"] == 40.0  # 100 batches in (120, 140]
    assert r["recovered"] == 0.5
    assert r["longest_gap_s"] == 16.0
    assert r["pause_gaps"] == [gap] and r["stalls"] == []
    # a gap that goes on for more than stall_s after the resume is a stall all the same
    long_gap = {"from_unix": 100.0, "gap_s": 30.0, "cpu_utilization": 0.05}
    r = common.pause_recovery([*arrivals[:1000], 130.0], [8] * 1001, 100.0, 115.0, [long_gap], 10)
    assert r["stalls"] == [long_gap] and r["pause_gaps"] == []
    assert np.isnan(r["rate_after"])  # the run ended within the window
    # a gap before the pause is not the pause's
    early = {"from_unix": 10.0, "gap_s": 30.0, "cpu_utilization": 0.0}
    assert common.pause_recovery(arrivals, sizes, 100.0, 115.0, [early], 10)["stalls"] == [early]


def test_the_results_name_the_unanswered_gets_the_options_and_the_samples_not_delivered() -> None:
    sys.path.insert(0, str(REPO_ROOT))
    try:
        from bench.loaders.run import delivery_lines
    finally:
        sys.path.remove(str(REPO_ROOT))
    rows = [
        {"contender": "stoker-embedded", "samples_rounds": [3996, 4000]},
        {"contender": "dataloader", "samples_rounds": [4000, 4000]},
    ]
    meta = {
        "samples": 4000,
        "s3_unanswered": [0.1, 60.0],
        "job_options": {"stoker.s3.read-timeout": "30s"},
    }
    text = "\n".join(delivery_lines(rows, meta))
    assert "10% of the GETs (drawn per GET; the JSONL's included" in text
    assert "without a first byte for 60 s" in text
    assert "`stoker.s3.read-timeout=30s`" in text
    assert "* **stoker-embedded**, round 1: 3996 of 4000" in text
    assert "round 2" not in text and "dataloader" not in text
    # a healthy run without injected faults or options says nothing
    assert delivery_lines([{"contender": "x", "samples_rounds": [4000]}], {"samples": 4000}) == []
