"""Java writer -> Python reader on real files in /dev/shm.

Runs the real job (the shaded jar built by ``./stoker test``, on embedded Flink) over the shared
LLaVA-style dataset, then reads every batch of every rank with ``BatchReader`` and checks the
documented shapes and dtypes and the relations between the columns.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from stoker.dead_letters import read_dead_letters
from stoker.reader import BatchReader

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED = REPO_ROOT.parent / "shared" / "data"
IMAGE_PAD = 151655
VISION_START = 151652
WORLD_SIZE = 2
MICRO_BATCH = 4


def _job_command(dataset: Path, out_root: Path) -> list[str]:
    jar = os.environ.get("STOKER_JAR", str(REPO_ROOT / "job/target/stoker-job.jar"))
    cp_file = os.environ.get(
        "STOKER_CLASSPATH_FILE", str(REPO_ROOT / "job/target/runtime-classpath.txt")
    )
    if not Path(jar).is_file() or not Path(cp_file).is_file():
        pytest.fail(
            f"the job jar ({jar}) and its classpath file ({cp_file}) are missing: run ./stoker test"
        )
    opens = shlex.split(
        os.environ.get("STOKER_JVM_OPENS", "--add-opens=java.base/java.nio=ALL-UNNAMED")
    )
    classpath = jar + ":" + Path(cp_file).read_text().strip()
    return [
        "java",
        *opens,
        "-cp",
        classpath,
        "dev.stoker.job.StokerJob",
        "--stoker.dataset.path",
        str(dataset),
        "--stoker.tokenizer.path",
        str(SHARED / "tokenizers" / "qwen3"),
        "--stoker.output.root",
        str(out_root),
        "--stoker.job-name",
        "e2e",
        "--stoker.dp-world-size",
        str(WORLD_SIZE),
        "--stoker.micro-batch-size",
        str(MICRO_BATCH),
        "--stoker.image.max-pixels",
        "1003520",
        "--rest.port",
        "0",
        "--execution.checkpointing.interval",
        "1s",
        "--restart-strategy.type",
        "none",
    ]


@pytest.fixture(scope="module")
def job_output():
    if not SHARED.is_dir():
        pytest.fail(f"{SHARED} is missing; tests need ../shared beside the repository")
    out_root = Path(tempfile.mkdtemp(prefix="stoker-e2e-", dir="/dev/shm"))
    try:
        proc = subprocess.run(
            _job_command(SHARED / "llava-style", out_root),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, f"job failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        yield out_root / "e2e"
    finally:
        shutil.rmtree(out_root, ignore_errors=True)


def test_every_rank_reads_every_step_with_documented_shapes(job_output: Path) -> None:
    manifest = json.loads((job_output / "manifest.json").read_text())
    assert manifest["world_size"] == WORLD_SIZE
    records = sum(
        1
        for line in (SHARED / "llava-style" / "train.jsonl").read_text().splitlines()
        if line.strip()
    )
    assert manifest["num_records"] == records

    seen: list[int] = []
    for rank in range(WORLD_SIZE):
        steps = 0
        for batch in BatchReader(job_output, rank, timeout_s=30):
            steps += 1
            b, seq_len = batch.input_ids.shape
            assert batch.input_ids.dtype == np.int64 and batch.labels.dtype == np.int64
            assert batch.attention_mask.dtype == np.int64
            assert batch.labels.shape == (b, seq_len) and batch.attention_mask.shape == (b, seq_len)
            assert batch.pixel_values.dtype == np.float32 and batch.pixel_values.shape[1] == 1176
            assert batch.image_grid_thw.dtype == np.int64 and batch.image_grid_thw.shape[1] == 3
            assert b <= MICRO_BATCH
            assert batch.pixel_values.shape[0] == int(np.prod(batch.image_grid_thw, axis=1).sum())
            # every image becomes <|vision_start|> + t*h*w/4 image pads + <|vision_end|>
            pads = int((batch.input_ids == IMAGE_PAD).sum())
            assert pads == int(np.prod(batch.image_grid_thw, axis=1).sum()) // 4
            assert int((batch.input_ids == VISION_START).sum()) == batch.image_grid_thw.shape[0]
            # labels are ids or -100; nothing is trained on padding or image pads
            trained = batch.labels != -100
            assert np.array_equal(batch.labels[trained], batch.input_ids[trained])
            assert not np.any(trained & (batch.attention_mask == 0))
            assert not np.any(trained & (batch.input_ids == IMAGE_PAD))
            assert np.all(trained.sum(axis=1) > 0)
            # pixel values are normalised with the CLIP mean/std: roughly within [-1.8, 2.2]
            assert batch.pixel_values.min() >= -1.8 and batch.pixel_values.max() <= 2.2
            seen.extend(int(i) for i in batch.sample_index)
        assert steps == manifest["num_steps"]

    dead = read_dead_letters(job_output / "dead-letters")
    assert len(seen) + len(dead) == records
    assert sorted(seen + [d["sample_index"] for d in dead]) == list(range(records))
    for d in dead:
        assert d["file"].endswith("train.jsonl") and d["line"] >= 1 and d["reason"] and d["message"]
