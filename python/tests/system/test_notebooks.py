"""The notebooks in ``notebooks/`` run: each is executed with nbclient on this venv's kernel.

* ``benchmark-results.ipynb`` on small CSV files written here (made-up numbers, never measured):
  every chart is drawn, only the three required columns are needed, a missing one is named.
* ``batch-viewer.ipynb`` on real batches: the job runs once for this module (embedded Flink,
  the llava-style dataset, the real tokenizer, no prefetch gate and no trainer, so every batch
  stays on disk); the notebook must show every sample's images and its conversation, with the
  assistant's turns (and only those) marked as trained.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import nbformat
import numpy as np
import pytest
from harness.jobs import job_command
from harness.paths import DATASET, REPO_ROOT, TOKENIZER_DIR
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from PIL import Image

from stoker import Manifest, read_batch_file
from stoker.images import split_images, unpatchify

NOTEBOOKS = REPO_ROOT / "notebooks"
JOB_TIMEOUT_S = 600
TRAINED_SPAN = re.compile(r'<span style="background:#c7e9c0">(.*?)</span>', re.S)


def execute(
    name: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> nbformat.NotebookNode:
    """Run ``notebooks/<name>`` in its folder on the ``python3`` kernel (this interpreter) with
    ``env`` added to the environment; returns the executed notebook."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("MPLBACKEND", raising=False)
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(
        nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    client.execute()
    return nb


def outputs(nb: nbformat.NotebookNode) -> list[dict]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def pngs(nb: nbformat.NotebookNode) -> list[dict]:
    return [o for o in outputs(nb) if "image/png" in o.get("data", {})]


def plain(html_text: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", html_text))


# ------------------------------------------------------------------ benchmark-results.ipynb
def write_csv(path: Path, rows: list[dict[str, object]]) -> Path:
    columns = list(dict.fromkeys(k for r in rows for k in r))
    lines = [",".join(columns)] + [",".join(str(r.get(c, "")) for c in columns) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_benchmark_notebook_draws_every_chart(tmp_path, monkeypatch) -> None:
    # made-up numbers: only the shape of the file matters here
    full = {
        "time_to_first_batch_s": 1.5,
        "peak_rss_mb": 900,
        "cpu_util": 1.8,
        "wait_time_ratio": 0.4,
        "step_time_ms": 20,
    }
    rows = [
        {"contender": "alpha", "samples_per_s": 10, "images_per_s": 12, **full},
        {"contender": "beta", "samples_per_s": 30, "images_per_s": 33, **full},
        {"contender": "beta", "samples_per_s": 34, "images_per_s": 37, **full},
        {"contender": "gamma", "samples_per_s": 20, "images_per_s": 22, **full, "peak_rss_mb": ""},
    ]
    csv = write_csv(tmp_path / "loaders.csv", rows)
    nb = execute("benchmark-results.ipynb", {"STOKER_BENCH_RESULTS": str(csv)}, monkeypatch)
    # throughput, time to first batch, memory, wait ratio, then cpu_util + step_time_ms
    assert len(pngs(nb)) == 5
    figures = [o["data"]["text/plain"] for o in pngs(nb)]
    assert figures[0].endswith("with 2 Axes>") and figures[4].endswith("with 2 Axes>")
    tables = [
        o["data"]["text/html"]
        for o in outputs(nb)
        if "<table>" in o.get("data", {}).get("text/html", "")
    ]
    assert len(tables) == 1
    table = plain(tables[0])
    assert all(name in table for name in ("alpha", "beta", "gamma"))


def test_benchmark_notebook_needs_only_the_required_columns(tmp_path, monkeypatch) -> None:
    rows = [
        {"contender": "alpha", "samples_per_s": 10, "images_per_s": 12, "notes": "first"},
        {"contender": "beta", "samples_per_s": 30, "images_per_s": 33, "notes": "second"},
    ]
    csv = write_csv(tmp_path / "loaders.csv", rows)
    nb = execute("benchmark-results.ipynb", {"STOKER_BENCH_RESULTS": str(csv)}, monkeypatch)
    assert len(pngs(nb)) == 1  # throughput only; the text column is in the table, not charted


def test_benchmark_notebook_names_a_missing_column(tmp_path, monkeypatch) -> None:
    csv = write_csv(tmp_path / "loaders.csv", [{"contender": "alpha", "samples_per_s": 10}])
    with pytest.raises(CellExecutionError, match=r"missing column\(s\) \['images_per_s'\]"):
        execute("benchmark-results.ipynb", {"STOKER_BENCH_RESULTS": str(csv)}, monkeypatch)


# ------------------------------------------------------------------ batch-viewer.ipynb
@pytest.fixture(scope="module")
def job_dir():
    """A finished job's directory with every batch still on disk (nothing consumed them)."""
    out_root = Path(tempfile.mkdtemp(prefix="stoker-notebooks-", dir="/dev/shm"))
    log = out_root / "job.log"
    try:
        cmd = job_command(out_root, "viewer", "--stoker.prefetch-depth", "0")
        with log.open("w") as out:
            try:
                rc = subprocess.run(
                    cmd, stdout=out, stderr=subprocess.STDOUT, timeout=JOB_TIMEOUT_S
                ).returncode
            except subprocess.TimeoutExpired:
                pytest.fail(f"job did not finish in {JOB_TIMEOUT_S}s:\n{log.read_text()[-6000:]}")
        if rc != 0:
            pytest.fail(f"job failed (exit {rc}):\n{log.read_text()[-6000:]}")
        yield out_root / "viewer"
    finally:
        shutil.rmtree(out_root, ignore_errors=True)


def records() -> dict[int, dict]:
    """The dataset's records by 1-based line number."""
    lines = (DATASET / "train.jsonl").read_text().splitlines()
    return {i + 1: json.loads(line) for i, line in enumerate(lines) if line.strip()}


def images_of(record: dict) -> list[str]:
    image = record.get("image")
    return [] if image is None else [image] if isinstance(image, str) else list(image)


def batches(job: Path):
    m = Manifest.load(job / "manifest.json")
    for path in sorted((job / f"gen-{m.generation}").glob("rank-*/step-*.arrow")):
        yield read_batch_file(path)


def samples_of(nb: nbformat.NotebookNode) -> dict[int, list[dict]]:
    """Outputs of the samples cell, grouped by the row whose ``<h3>row k</h3>`` header starts them."""
    rows: dict[int, list[dict]] = {}
    current = None
    for o in outputs(nb):
        m = re.match(r"<h3>row (\d+)</h3>", o.get("data", {}).get("text/html", ""))
        if m:
            current = int(m.group(1))
            rows[current] = []
        if current is not None:
            rows[current].append(o)
    return rows


def check_viewer(nb: nbformat.NotebookNode, batch) -> None:
    recs = records()
    rows = samples_of(nb)
    assert sorted(rows) == list(range(batch.num_samples))
    for row, outs in rows.items():
        header = plain(outs[0]["data"]["text/html"])
        assert batch.location[row] in header and f"sample_index {batch.sample_index[row]}" in header
        assert f"source {batch.source[row]} " in header
        assert ("back-filled" in header) == (row in batch.backfilled_slots)
        record = recs[int(batch.location[row].rsplit(":", 1)[1])]
        figures = [o for o in outs if "image/png" in o.get("data", {})]
        n_images = len(images_of(record))
        if n_images:  # one figure per sample, one panel per image
            assert len(figures) == 1, (row, record["id"])
            axes = "1 Axes" if n_images == 1 else f"{n_images} Axes"
            assert figures[0]["data"]["text/plain"].endswith(f"with {axes}>"), record["id"]
        else:
            assert not figures and any("no image" in o["data"].get("text/html", "") for o in outs)
        chat_html = outs[-1]["data"]["text/html"]
        text = plain(chat_html)
        trained = plain("".join(TRAINED_SPAN.findall(chat_html)))
        assert text.count("<|vision_start|>") == n_images
        for turn in record["conversations"]:
            for piece in turn["value"].split("<image>"):
                piece = piece.strip()
                assert piece in text, (record["id"], piece)
                if turn["from"] == "gpt":
                    assert piece in trained, (record["id"], piece)
                elif piece:
                    assert piece not in trained, (record["id"], piece)


def test_batch_viewer_shows_every_sample_of_a_batch(job_dir, monkeypatch) -> None:
    # the batch with the most images, so that multi-image rows are drawn
    chosen = max(batches(job_dir), key=lambda b: (b.num_images, -b.step, -b.rank))
    nb = execute(
        "batch-viewer.ipynb",
        {
            "STOKER_JOB_DIR": str(job_dir),
            "STOKER_RANK": str(chosen.rank),
            "STOKER_STEP": str(chosen.step),
            "STOKER_TOKENIZER": str(TOKENIZER_DIR),
        },
        monkeypatch,
    )
    check_viewer(nb, chosen)
    assert len(pngs(nb)) == 1 + sum(
        1 for r in samples_of(nb).values() if any("image/png" in o.get("data", {}) for o in r)
    )  # the token map, then one figure per sample with images


def test_batch_viewer_defaults_to_the_earliest_step_on_disk(job_dir, monkeypatch) -> None:
    """No STOKER_RANK / STOKER_STEP: rank 0's earliest step still on disk, here step 0."""
    monkeypatch.delenv("STOKER_STEP", raising=False)
    monkeypatch.delenv("STOKER_RANK", raising=False)
    nb = execute(
        "batch-viewer.ipynb",
        {"STOKER_JOB_DIR": str(job_dir), "STOKER_TOKENIZER": str(TOKENIZER_DIR)},
        monkeypatch,
    )
    m = Manifest.load(job_dir / "manifest.json")
    batch = read_batch_file(job_dir / f"gen-{m.generation}" / "rank-0" / "step-0000000000.arrow")
    check_viewer(nb, batch)
    # nothing was consumed: every batch is still there, no ack written
    assert len(list(job_dir.glob("gen-*/rank-*/step-*.arrow"))) == m.num_steps * m.world_size
    assert not list(job_dir.glob("gen-*/rank-*/ack.json"))


def test_unpatchify_of_the_job_output_matches_pillow(job_dir) -> None:
    """The job's pixel_values, unpatchified, are the record's photo resized as Pillow does
    (bicubic to the grid's size): the inverse fits the Java patch order, not just the
    reference in test_images.py."""
    recs = records()
    compared = 0
    vision = Manifest.load(job_dir / "manifest.json").vision  # what the job wrote
    for batch in batches(job_dir):
        images = split_images(batch.pixel_values, batch.image_grid_thw)
        per_row = (batch.input_ids == 151652).sum(axis=1)  # <|vision_start|>
        first = np.concatenate([[0], np.cumsum(per_row)])
        for row in range(batch.num_samples):
            record = recs[int(batch.location[row].rsplit(":", 1)[1])]
            if record["id"] not in ("llava-0001", "llava-0003") or row in batch.backfilled_slots:
                continue
            i = int(first[row])
            got = unpatchify(images[i], batch.image_grid_thw[i], vision)
            with Image.open(DATASET / images_of(record)[0]) as src:
                ref = np.asarray(
                    src.convert("RGB").resize((got.shape[1], got.shape[0]), Image.BICUBIC)
                )
            diff = np.abs(got.astype(np.int16) - ref.astype(np.int16))
            assert diff.mean() < 1.0 and diff.max() <= 8, (record["id"], diff.mean(), diff.max())
            compared += 1
    assert compared == 2


def test_the_notebooks_are_committed_without_outputs() -> None:
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, path.name
