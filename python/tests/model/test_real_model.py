"""Real-model tier: Stoker's batches as the transformers Qwen-VL models see them.

For each preset (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) the real job (embedded Flink, the jar
``./stoker test`` built) writes batches of a dataset built from the shared samples; this test
reads them through :class:`stoker.BatchReader` and feeds them, as ``model(**batch.to_torch())``,
to a tiny randomly initialised model of the preset's transformers class (2 text and 2 vision
layers, the real vocabulary size and special-token ids, patch 14/16, temporal patch 2, merge 2,
3 channels; seeded, no weights downloaded). The reference is the Hugging Face processor's own
output for the same records (``scripts/golden/make_golden.py``'s presets, chat templates and
record mapping; transformers 5.23.0, with the Pillow image processor ``Qwen2VLImageProcessorPil``,
to which Stoker is pixel-exact, see docs/parity.md), padded to the batch as ``padding=True``
pads on the right, with labels from the qwen-vl-finetune mask (``make_golden.label_mask``).

Asserted per batch: ``input_ids``, ``labels``, ``attention_mask``, ``mm_token_type_ids`` and
``image_grid_thw`` equal; ``pixel_values`` equal within float32 rounding; the model's M-RoPE
positions and rope deltas (``get_rope_index``) equal; the loss equal within 1e-5 relative; and
forward, backward and one AdamW step train on the Stoker batch (finite loss and gradients, the
vision tower's parameters change). Runs in the model venv (``.stoker/model-venv``,
``python/requirements-model.txt``), not the dev venv: ``./stoker test`` runs it as its own tier.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, SHARED, job_command
from PIL import Image, ImageOps
from transformers import (
    AutoTokenizer,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen2VLImageProcessorPil,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
)

from stoker import Batch, BatchReader

sys.path.insert(0, str(REPO_ROOT / "scripts" / "golden"))
import make_golden as hf  # noqa: E402  (the HF reference: presets, templates, record mapping)

#: The pixel bound of the run: 256 merged tokens (1024 patches) per image at factor 28, so a
#: CPU forward pass over a batch takes well under a second. Per-image overrides in the records
#: are clamped to it (see :func:`dataset`).
MAX_PIXELS = 200704
WORLD_SIZE = 2
MICRO_BATCH = 2
JOB_TIMEOUT_S = 600
LOSS_RTOL = 1e-5
IMAGE_PAD, VISION_START, VISION_END = 151655, 151652, 151653
VOCAB_SIZE = 151936  # Qwen2-VL-2B / Qwen2.5-VL / Qwen3-VL text vocabulary (>= the tokenizer's)

#: llava-style images that decode to other pixels than Pillow by design or documented rounding
#: (docs/parity.md): 16-bit PNGs are scaled to 8 bits (Pillow clips), CMYK rounds differently.
#: Their records are left out so the loss can be compared at 1e-5.
DEVIATING_IMAGE_DIRS = ("images/16bit/", "images/cmyk/")

SOURCES = ("qwen-messages", "llamafactory-sharegpt", "llava-style")


@dataclass
class Record:
    """One JSONL line of the test dataset and the HF reference's view of it."""

    file: str
    line: int
    obj: dict[str, Any]
    rec: Any  # make_golden.Record


@pytest.fixture(scope="module")
def dataset() -> Iterator[tuple[Path, dict[tuple[str, int], Record]]]:
    """A dataset root holding the three shared datasets side by side (one JSONL file each, image
    paths prefixed with the dataset's folder, images copied), per-image ``max_pixels`` clamped
    to :data:`MAX_PIXELS` and the records of :data:`DEVIATING_IMAGE_DIRS` left out."""
    if not SHARED.is_dir():
        pytest.fail(f"{SHARED} is missing; tests need ../shared beside the repository")
    root = Path(tempfile.mkdtemp(prefix="stoker-model-data-"))
    records: dict[tuple[str, int], Record] = {}
    try:
        for name in SOURCES:
            shutil.copytree(SHARED / name / "images", root / name / "images")
            out_lines = []
            for text in (SHARED / name / "train.jsonl").read_text(encoding="utf-8").splitlines():
                if not text.strip():
                    continue
                obj = _prefix_paths(json.loads(text), name)
                rec = hf.read_record(name, len(out_lines) + 1, obj)
                if any(
                    use.path.startswith(f"{name}/{d}")
                    for use in rec.images
                    for d in DEVIATING_IMAGE_DIRS
                ):
                    continue
                out_lines.append(json.dumps(obj, ensure_ascii=False))
                records[(f"{name}.jsonl", len(out_lines))] = Record(
                    f"{name}.jsonl", len(out_lines), obj, rec
                )
            (root / f"{name}.jsonl").write_text("\n".join(out_lines) + "\n", encoding="utf-8")
        yield root, records
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _prefix_paths(obj: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The record with every image path under ``prefix/`` and per-image ``max_pixels`` at most
    :data:`MAX_PIXELS` (``min_pixels`` likewise)."""
    obj = copy.deepcopy(obj)
    for key in ("image", "images"):
        if isinstance(obj.get(key), str):
            obj[key] = f"{prefix}/{obj[key]}"
        elif isinstance(obj.get(key), list):
            obj[key] = [f"{prefix}/{p}" for p in obj[key]]
    for turn in obj.get("messages", []):
        if isinstance(turn.get("content"), list):
            for part in turn["content"]:
                for k in ("image", "image_url"):
                    if isinstance(part.get(k), str):
                        part[k] = f"{prefix}/{part[k]}"
                    elif isinstance(part.get(k), dict):
                        part[k]["url"] = f"{prefix}/{part[k]['url']}"
                for k in ("max_pixels", "min_pixels"):
                    if k in part:
                        part[k] = min(int(part[k]), MAX_PIXELS)
    return obj


# ------------------------------------------------------------------ tiny models


def _text_config(**extra: Any) -> dict[str, Any]:
    return {
        "vocab_size": VOCAB_SIZE,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        **extra,
    }


def tiny_model(preset: str) -> torch.nn.Module:
    """A seeded, randomly initialised transformers model of ``preset``'s class, float32, on CPU.

    head_dim 16, so ``mrope_section`` [2, 3, 3] (temporal, height, width) splits its 8 rotary
    frequencies as the real models' [16, 24, 24] split 64.
    """
    torch.manual_seed(0)
    ids = {
        "image_token_id": IMAGE_PAD,
        "vision_start_token_id": VISION_START,
        "vision_end_token_id": VISION_END,
    }
    rope = {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]}
    if preset == "qwen2-vl":
        config = Qwen2VLConfig(
            text_config=_text_config(rope_parameters=rope),
            vision_config={
                "depth": 2,
                "embed_dim": 32,
                "hidden_size": 64,
                "num_heads": 4,
                "patch_size": 14,
                "temporal_patch_size": 2,
                "spatial_merge_size": 2,
            },
            **ids,
        )
        model = Qwen2VLForConditionalGeneration(config)
    elif preset == "qwen2.5-vl":
        config = Qwen2_5_VLConfig(
            text_config=_text_config(rope_parameters=rope),
            vision_config={
                "depth": 2,
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_heads": 4,
                "out_hidden_size": 64,
                "patch_size": 14,
                "temporal_patch_size": 2,
                "spatial_merge_size": 2,
                "window_size": 56,
                "fullatt_block_indexes": [1],
            },
            **ids,
        )
        model = Qwen2_5_VLForConditionalGeneration(config)
    else:
        config = Qwen3VLConfig(
            text_config=_text_config(
                head_dim=16,
                rope_parameters=dict(rope, rope_theta=5000000.0, mrope_interleaved=True),
            ),
            vision_config={
                "depth": 2,
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_heads": 4,
                "out_hidden_size": 64,
                "patch_size": 16,
                "temporal_patch_size": 2,
                "spatial_merge_size": 2,
                "num_position_embeddings": 64,
                "deepstack_visual_indexes": [0],
            },
            **ids,
        )
        model = Qwen3VLForConditionalGeneration(config)
    return model.float()


# ------------------------------------------------------------------ the HF reference


class Reference:
    """The HF processor of one preset, applied to records one at a time (cached)."""

    def __init__(self, preset: Any, root: Path) -> None:
        self.preset = preset
        self.root = root
        tokenizer = AutoTokenizer.from_pretrained(str(SHARED / "tokenizers" / "qwen3"))
        self.image_processor = Qwen2VLImageProcessorPil(**preset.image_config())
        self.processor = preset.processor_class(
            image_processor=self.image_processor,
            tokenizer=tokenizer,
            video_processor=preset.video_processor_class(**preset.image_config()),
            chat_template=preset.template,
        )
        self.pad_token_id = tokenizer.pad_token_id
        self._cache: dict[tuple[str, int], dict[str, np.ndarray]] = {}

    def record(self, record: Record) -> dict[str, np.ndarray]:
        key = (record.file, record.line)
        if key not in self._cache:
            self._cache[key] = self._process(record.rec)
        return self._cache[key]

    def _process(self, rec: Any) -> dict[str, np.ndarray]:
        text = self.processor.apply_chat_template(rec.messages, tokenize=False)
        images = []
        for use in rec.images:
            image = Image.open(self.root / use.path)
            transposed = ImageOps.exif_transpose(image)
            images.append(transposed if transposed is not None else image)
        sizes = [
            {
                "shortest_edge": use.min_pixels or self.preset.min_pixels,
                "longest_edge": use.max_pixels or MAX_PIXELS,
            }
            for use in rec.images
        ]
        kwargs: dict[str, Any] = {}
        if images:
            assert all(s == sizes[0] for s in sizes), "one size per processor call"
            kwargs = {"images": images, "size": sizes[0]}
        out = self.processor(text=[text], return_tensors="np", **kwargs)
        ids = np.asarray(out["input_ids"][0], np.int64)
        patch_dim = 3 * 2 * self.preset.patch_size**2
        return {
            "input_ids": ids,
            "labels": np.where(hf.label_mask(ids), ids, -100),
            "attention_mask": np.asarray(out["attention_mask"][0], np.int64),
            "mm_token_type_ids": np.asarray(out["mm_token_type_ids"][0], np.int64),
            "pixel_values": np.asarray(out["pixel_values"], np.float32).reshape(-1, patch_dim)
            if images
            else np.zeros((0, patch_dim), np.float32),
            "image_grid_thw": np.asarray(out["image_grid_thw"], np.int64).reshape(-1, 3)
            if images
            else np.zeros((0, 3), np.int64),
        }

    def batch(self, rows: list[Record]) -> dict[str, np.ndarray]:
        """The rows' processor outputs as one batch: right-padded as the processor's
        ``padding=True`` pads (pad id, mask 0, type 0), labels -100 on padding, images
        concatenated in row order."""
        outs = [self.record(r) for r in rows]
        length = max(len(o["input_ids"]) for o in outs)

        def pad(name: str, value: int) -> np.ndarray:
            mat = np.full((len(outs), length), value, np.int64)
            for i, o in enumerate(outs):
                mat[i, : len(o[name])] = o[name]
            return mat

        return {
            "input_ids": pad("input_ids", self.pad_token_id),
            "labels": pad("labels", -100),
            "attention_mask": pad("attention_mask", 0),
            "mm_token_type_ids": pad("mm_token_type_ids", 0),
            "pixel_values": np.concatenate([o["pixel_values"] for o in outs]),
            "image_grid_thw": np.concatenate([o["image_grid_thw"] for o in outs]),
        }


# ------------------------------------------------------------------ the run


def run_job(
    root: Path,
    preset: str,
    out_root: Path,
    *options: str,
    name: str = "model",
    micro_batch_size: int = MICRO_BATCH,
) -> Path:
    """Runs the real job over ``root`` to completion (no prefetch bound: every batch is written)
    with :data:`WORLD_SIZE` ranks, ``preset``, :data:`MAX_PIXELS` and the further ``options``
    (``--key value`` pairs), and returns its job directory ``out_root / name``."""
    log = out_root / f"{name}.log"
    with log.open("w") as out:
        proc = subprocess.run(
            job_command(
                out_root,
                name,
                "--stoker.model.preset",
                preset,
                "--stoker.image.max-pixels",
                str(MAX_PIXELS),
                "--stoker.prefetch-depth",
                "0",
                *options,
                dataset=root,
                world_size=WORLD_SIZE,
                micro_batch_size=micro_batch_size,
            ),
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=JOB_TIMEOUT_S,
            check=False,
        )
    if proc.returncode != 0:
        pytest.fail(f"{name} job failed (exit {proc.returncode}):\n{log.read_text()[-6000:]}")
    return out_root / name


def read_all(job_dir: Path) -> list[Batch]:
    """Every batch of every rank of ``job_dir``, in (rank, step) order."""
    batches = []
    for rank in range(WORLD_SIZE):
        batches.extend(BatchReader(job_dir, rank, timeout_s=60))
    return batches


def row_records(batch: Batch, records: dict[tuple[str, int], Record]) -> list[Record]:
    rows = []
    for location in batch.location:
        uri, _, line = location.rpartition(":")
        rows.append(records[(Path(uri.removeprefix("file:")).name, int(line))])
    return rows


def tensors(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}


def rope_index(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return model.model.get_rope_index(
        inputs["input_ids"],
        inputs["mm_token_type_ids"],
        image_grid_thw=inputs["image_grid_thw"],
        attention_mask=inputs["attention_mask"],
    )


@pytest.mark.parametrize("preset_key", [p.key for p in hf.PRESETS])
def test_batches_train_the_real_model_as_the_processor_output_does(dataset, preset_key):
    root, records = dataset
    preset = next(p for p in hf.PRESETS if p.key == preset_key)
    out_root = Path(tempfile.mkdtemp(prefix="stoker-model-", dir="/dev/shm"))
    try:
        batches = read_all(run_job(root, preset_key, out_root))
        assert sum(b.num_samples - len(b.backfilled_slots) for b in batches) == len(records)
        reference = Reference(preset, root)
        model = tiny_model(preset_key)
        model.eval()
        image_tokens = wrong_1d = 0
        for batch in batches:
            if batch.num_samples == 0:
                continue
            where = f"{preset_key} step {batch.step} rank {batch.rank} ({batch.location})"
            ours = batch.to_torch()
            theirs = tensors(reference.batch(row_records(batch, records)))
            assert sorted(ours) == sorted(theirs), where
            for name in (
                "input_ids",
                "labels",
                "attention_mask",
                "mm_token_type_ids",
                "image_grid_thw",
            ):
                assert torch.equal(ours[name], theirs[name]), f"{name} differs: {where}"
            assert ours["pixel_values"].shape == theirs["pixel_values"].shape, where
            bad = _images_that_differ(ours, theirs, row_records(batch, records))
            assert not bad, f"pixel_values differ (image: max abs diff): {bad}: {where}"

            positions, deltas = rope_index(model, ours)
            ref_positions, ref_deltas = rope_index(model, theirs)
            assert torch.equal(positions, ref_positions), where
            assert torch.equal(deltas, ref_deltas), where
            # what a model without mm_token_type_ids gets: 1-D positions on every axis
            is_image = ours["mm_token_type_ids"].bool()
            flat = (ours["attention_mask"].cumsum(-1) - 1).clamp(min=0)
            image_tokens += int(is_image.sum())
            wrong_1d += int(((positions != flat.unsqueeze(0)).any(0) & is_image).sum())

            with torch.no_grad():
                loss = model(**ours).loss
                ref_loss = model(**theirs).loss
            assert torch.isfinite(loss), where
            assert abs(float(loss) - float(ref_loss)) <= LOSS_RTOL * abs(float(ref_loss)), (
                f"loss {float(loss)!r} vs processor's {float(ref_loss)!r}: {where}"
            )
        assert image_tokens > 0
        print(
            f"{preset_key}: {len(batches)} batches; {wrong_1d} of {image_tokens} image tokens "
            "would get another position without mm_token_type_ids"
        )
        _train_one_step(preset_key, model, next(b for b in batches if b.num_images))
    finally:
        shutil.rmtree(out_root, ignore_errors=True)


def _images_that_differ(
    ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor], rows: list[Record]
) -> dict[str, float]:
    """Each image of the batch whose patches differ by more than float32 rounding (1e-5), with
    its largest difference in normalised units (one uint8 level is about 0.015)."""
    paths = [use.path for r in rows for use in r.rec.images]
    counts = ours["image_grid_thw"].prod(-1).tolist()
    assert len(paths) == len(counts)
    diff = (ours["pixel_values"] - theirs["pixel_values"]).abs()
    out = {}
    for path, part in zip(paths, torch.split(diff, counts), strict=True):
        if float(part.max()) > 1e-5:
            out[path] = round(float(part.max()), 4)
    return out


def _train_one_step(preset_key: str, model: torch.nn.Module, batch: Batch) -> None:
    """Forward, backward and one AdamW step on a Stoker batch with images."""
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    vision = next(p for n, p in model.named_parameters() if "visual" in n and p.ndim > 1)
    before = vision.detach().clone()
    inputs = batch.to_torch()
    loss = model(**inputs).loss
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert vision.grad is not None and float(vision.grad.abs().sum()) > 0, (
        f"{preset_key}: no gradient reaches the vision tower"
    )
    optimizer.step()
    assert not torch.equal(before, vision.detach())
    if preset_key == "qwen2-vl":
        # without mm_token_type_ids (Stoker before it carried them) transformers 5 refuses
        del inputs["mm_token_type_ids"]
        with pytest.raises(ValueError, match="mm_token_type_ids"):
            model(**inputs)
