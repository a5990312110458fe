"""The real-model tier's shared parts (``python/tests/model``; the model venv: imports torch and
transformers): the dataset of the three shared datasets side by side with the Hugging Face
reference's view of each record, tiny randomly initialised transformers Qwen-VL models, and the
real job run over that dataset."""

from __future__ import annotations

import contextlib
import copy
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import (
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
)

from harness.jobs import job_command, run_to_end
from harness.paths import REPO_ROOT, SHARED, require_shared
from stoker import Batch, BatchReader

sys.path.insert(0, str(REPO_ROOT / "scripts" / "golden"))
import make_golden as hf  # noqa: E402  (the HF reference: presets, templates, record mapping)

#: The pixel bound of the run: 256 merged tokens (1024 patches) per image at factor 28, so a
#: CPU forward pass over a batch takes well under a second. Per-image overrides in the records
#: are clamped to it (see :func:`dataset`).
MAX_PIXELS = 200704
WORLD_SIZE = 2
MICRO_BATCH = 2
#: B of the tier's plain run per preset (the ``plain_run`` fixture), which the real-model and
#: packing tests share: four samples a row give packing two to four samples per packed row.
PLAIN_MICRO_BATCH = 4
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


@contextlib.contextmanager
def model_dataset() -> Iterator[tuple[Path, dict[tuple[str, int], Record]]]:
    """A dataset root holding the three shared datasets side by side (one JSONL file each, image
    paths prefixed with the dataset's folder, images copied), per-image ``max_pixels`` clamped
    to :data:`MAX_PIXELS` and the records of :data:`DEVIATING_IMAGE_DIRS` left out."""
    require_shared()
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
                # the checkpoints' (Qwen/Qwen2.5-VL-*-Instruct config.json) and Stoker's preset's,
                # not transformers' class default of 4
                "tokens_per_second": 2,
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
    command = job_command(
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
    )
    run_to_end(command, out_root / f"{name}.log", f"{name} job", timeout_s=JOB_TIMEOUT_S)
    return out_root / name


def read_all(job_dir: Path) -> list[Batch]:
    """Every batch of every rank of ``job_dir``, in (rank, step) order."""
    batches = []
    for rank in range(WORLD_SIZE):
        batches.extend(BatchReader(job_dir, rank, timeout_s=60))
    return batches


def padded_batch(
    outs: list[dict[str, np.ndarray]], pad_token_id: int, media: tuple[str, ...]
) -> dict[str, np.ndarray]:
    """One batch of per-record processor outputs as the processor's ``padding=True`` gives it.

    ``input_ids`` (pad id), ``labels`` (-100), ``attention_mask`` and ``mm_token_type_ids`` (0)
    right-padded to the longest row, int64 ``(rows, length)``; each array named in ``media``
    (pixel values, grids, ``second_per_grid_ts``) concatenated in row order, when the outputs
    have it; ``pixel_values`` and ``image_grid_thw`` left out when no row has an image, as the
    processor gives none.
    """
    length = max(len(o["input_ids"]) for o in outs)

    def pad(name: str, value: int) -> np.ndarray:
        mat = np.full((len(outs), length), value, np.int64)
        for i, o in enumerate(outs):
            mat[i, : len(o[name])] = o[name]
        return mat

    batch = {
        "input_ids": pad("input_ids", pad_token_id),
        "labels": pad("labels", -100),
        "attention_mask": pad("attention_mask", 0),
        "mm_token_type_ids": pad("mm_token_type_ids", 0),
    }
    for name in media:
        if name in outs[0]:
            batch[name] = np.concatenate([o[name] for o in outs])
    if "image_grid_thw" in batch and not len(batch["image_grid_thw"]):
        del batch["pixel_values"], batch["image_grid_thw"]
    return batch
