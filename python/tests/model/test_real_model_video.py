"""Real-model tier, video: Stoker's batches of video conversations as the transformers Qwen-VL
models see them, against the Hugging Face processor's own output (issue 36).

The dataset is generated here: two small clips encoded with PyAV exactly as the video goldens
encode theirs (``scripts/golden/make_video_golden.py``'s ``Clip`` and ``encode``: H.264 in mp4 at
10 fps, VP9 in mp4 at 25 fps, an odd frame count) and four messages-style records: one video, an
image and a video in one turn, a video in the first of two user turns, and a video on its own
with no text. For each preset the real job (embedded Flink) writes the batches with its default
video settings (2 fps, the processor's rule) and a small pixel budget; the reference is the
preset's processor (transformers 5.23.0, PyAV backend as the goldens load it) over the same
records: ``apply_chat_template`` then ``processor(text, images, videos, fps=2)``.

Asserted per batch: ``input_ids``, ``labels``, ``attention_mask``, ``mm_token_type_ids``,
``video_grid_thw``, ``image_grid_thw`` (and ``second_per_grid_ts`` for Qwen2.5-VL) equal;
``pixel_values_videos`` and ``pixel_values`` within float32 rounding (1e-5); the model's M-RoPE
positions and rope deltas (``get_rope_index``) equal; the loss within 1e-5 relative; forward,
backward and one AdamW step train on a video batch (the vision tower's parameters change). The
same records packed (``stoker.packing.enabled``): each sample's tokens the processor's and its
``position_ids`` the model's ``get_rope_index`` of the sample alone.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from fractions import Fraction
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from harness.paths import REPO_ROOT, SHARED, TOKENIZER_DIR
from harness.real_model import LOSS_RTOL, hf, padded_batch, read_all, run_job, tiny_model
from PIL import Image
from transformers import AutoTokenizer, Qwen2VLImageProcessorPil

sys.path.insert(0, str(REPO_ROOT / "scripts" / "golden"))
import make_video_golden as hfv  # noqa: E402  (the video goldens' clip encoder and PyAV loading)

#: Per-frame (Qwen2/2.5-VL) or all-frames (Qwen3-VL) pixel budget of the run, small so that a
#: CPU forward pass stays fast; images keep the tier's image budget.
VIDEO_MAX_PIXELS = {"qwen2-vl": 28 * 28 * 12, "qwen2.5-vl": 28 * 28 * 12, "qwen3-vl": 32 * 32 * 48}
IMAGE_MAX_PIXELS = {"qwen2-vl": 28 * 28 * 16, "qwen2.5-vl": 28 * 28 * 16, "qwen3-vl": 32 * 32 * 80}
FPS = 2.0
CLIPS = [
    hfv.Clip("walk.mp4", "H.264, 10 fps", width=112, height=84, rate=Fraction(10), frames=25,
             options=hfv.X264),
    hfv.Clip("spin.mp4", "VP9, 25 fps, odd frames", codec="libvpx-vp9", width=96, height=72,
             rate=Fraction(25), frames=53, options=hfv.VP9),
]  # fmt: skip
IMAGE = "llava-style/images/photos/rocket.jpg"


def _records() -> list[list[dict[str, Any]]]:
    video = {"type": "video", "video": "clips/walk.mp4"}
    spin = {"type": "video", "video": "clips/spin.mp4"}
    return [
        [
            {"role": "user", "content": [video, {"type": "text", "text": "What moves here?"}]},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "A square, left to right."}],
            },
        ],
        [
            {
                "role": "user",
                "content": [
                    {"type": "image", "image": "images/rocket.jpg"},
                    spin,
                    {"type": "text", "text": "Does the clip show the rocket?"},
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "No, a zone plate."}]},
        ],
        [
            {"role": "user", "content": [spin, {"type": "text", "text": "Describe it."}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Rings and a square."}]},
            {"role": "user", "content": [{"type": "text", "text": "How long is it?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "About two seconds."}]},
        ],
        [
            {"role": "user", "content": [video]},
            {"role": "assistant", "content": [{"type": "text", "text": "A moving square."}]},
        ],
    ]


@pytest.fixture(scope="module")
def video_dataset() -> Iterator[tuple[Path, list[list[dict[str, Any]]]]]:
    root = Path(tempfile.mkdtemp(prefix="stoker-video-data-"))
    try:
        (root / "clips").mkdir()
        for clip in CLIPS:
            hfv.encode(clip, root / "clips" / clip.name)
        (root / "images").mkdir()
        shutil.copy(SHARED / IMAGE, root / "images" / "rocket.jpg")
        records = _records()
        (root / "videos.jsonl").write_text(
            "".join(json.dumps({"messages": m}) + "\n" for m in records), encoding="utf-8"
        )
        yield root, records
    finally:
        shutil.rmtree(root, ignore_errors=True)


class VideoReference:
    """The preset's HF processor over one record (its video processor loading with PyAV)."""

    def __init__(self, preset: Any, root: Path) -> None:
        self.preset = preset
        self.root = root
        tokenizer = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
        video_processor = preset.video_processor_class(
            **{
                **hfv.video_config(preset),
                "size": {
                    "shortest_edge": hfv.VIDEO_PIXELS[preset.key][0],
                    "longest_edge": VIDEO_MAX_PIXELS[preset.key],
                },
                "fps": FPS,
            }
        )
        video_processor.fetch_videos = partial(hfv.pyav_fetch, [], [])
        self.processor = preset.processor_class(
            # the image budget set on the image processor: a size given to the processor's call
            # would bound the videos of that call too
            image_processor=Qwen2VLImageProcessorPil(
                **{
                    **preset.image_config(),
                    "size": {
                        "shortest_edge": preset.min_pixels,
                        "longest_edge": IMAGE_MAX_PIXELS[preset.key],
                    },
                }
            ),
            tokenizer=tokenizer,
            video_processor=video_processor,
            chat_template=preset.template,
        )
        self.pad_token_id = tokenizer.pad_token_id

    def record(self, messages: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        text = self.processor.apply_chat_template(messages, tokenize=False)
        parts = [p for m in messages for p in m["content"]]
        images = [Image.open(self.root / p["image"]) for p in parts if p["type"] == "image"]
        videos = [str(self.root / p["video"]) for p in parts if p["type"] == "video"]
        kwargs: dict[str, Any] = {"videos": videos, "fps": FPS}
        if images:
            kwargs["images"] = images
        out = self.processor(text=[text], return_tensors="np", **kwargs)
        ids = np.asarray(out["input_ids"][0], np.int64)
        patch_dim = 3 * 2 * self.preset.patch_size**2
        got = {
            "input_ids": ids,
            "labels": np.where(hf.label_mask(ids), ids, -100),
            "attention_mask": np.asarray(out["attention_mask"][0], np.int64),
            "mm_token_type_ids": np.asarray(out["mm_token_type_ids"][0], np.int64),
            "pixel_values_videos": np.asarray(out["pixel_values_videos"], np.float32),
            "video_grid_thw": np.asarray(out["video_grid_thw"], np.int64).reshape(-1, 3),
            "pixel_values": np.asarray(out["pixel_values"], np.float32).reshape(-1, patch_dim)
            if images
            else np.zeros((0, patch_dim), np.float32),
            "image_grid_thw": np.asarray(out["image_grid_thw"], np.int64).reshape(-1, 3)
            if images
            else np.zeros((0, 3), np.int64),
        }
        if "second_per_grid_ts" in out:
            got["second_per_grid_ts"] = np.asarray(out["second_per_grid_ts"], np.float32)
        return got

    def batch(self, rows: list[list[dict[str, Any]]]) -> dict[str, torch.Tensor]:
        """The rows' outputs as one right-padded batch, media concatenated in row order."""
        batch = padded_batch(
            [self.record(r) for r in rows],
            self.pad_token_id,
            (
                "pixel_values",
                "image_grid_thw",
                "pixel_values_videos",
                "video_grid_thw",
                "second_per_grid_ts",
            ),
        )
        return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in batch.items()}


def _pixel_options(preset_key: str) -> tuple[str, ...]:
    """The run's image and video pixel budgets (the reference's), as job options."""
    return (
        "--stoker.image.max-pixels",
        str(IMAGE_MAX_PIXELS[preset_key]),
        "--stoker.video.max-pixels",
        str(VIDEO_MAX_PIXELS[preset_key]),
        "--stoker.video.min-pixels",
        str(hfv.VIDEO_PIXELS[preset_key][0]),
    )


def _rope_index(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> Any:
    kwargs = {}
    if "second_per_grid_ts" in inputs:
        kwargs["second_per_grid_ts"] = inputs["second_per_grid_ts"]
    return model.model.get_rope_index(
        inputs["input_ids"],
        inputs["mm_token_type_ids"],
        image_grid_thw=inputs.get("image_grid_thw"),
        video_grid_thw=inputs.get("video_grid_thw"),
        attention_mask=inputs["attention_mask"],
        **kwargs,
    )


@pytest.mark.parametrize("preset_key", [p.key for p in hf.PRESETS])
def test_video_batches_are_the_processors_and_train_the_real_model(video_dataset, preset_key):
    root, records = video_dataset
    preset = next(p for p in hf.PRESETS if p.key == preset_key)
    out_root = Path(tempfile.mkdtemp(prefix="stoker-model-video-", dir="/dev/shm"))
    try:
        batches = read_all(
            run_job(
                root,
                preset_key,
                out_root,
                *_pixel_options(preset_key),
                name="video",
            )
        )
        assert sum(b.num_samples - len(b.backfilled_slots) for b in batches) == len(records)
        reference = VideoReference(preset, root)
        model = tiny_model(preset_key)
        model.eval()
        video_batches = 0
        for batch in batches:
            if batch.num_samples == 0:
                continue
            where = f"{preset_key} step {batch.step} rank {batch.rank} ({batch.location})"
            rows = [records[int(loc.rpartition(":")[2]) - 1] for loc in batch.location]
            full = batch.to_torch()  # what a trainer passes: second_per_grid_ts for every model
            theirs = reference.batch(rows)
            ours = {
                k: v
                for k, v in full.items()
                if k != "second_per_grid_ts" or preset_key == "qwen2.5-vl"
            }
            assert sorted(ours) == sorted(theirs), where
            for name in (
                "input_ids",
                "labels",
                "attention_mask",
                "mm_token_type_ids",
                "image_grid_thw",
                "video_grid_thw",
            ):
                if name not in theirs:
                    continue
                assert torch.equal(ours[name], theirs[name]), f"{name} differs: {where}"
            if "second_per_grid_ts" in theirs:
                assert torch.equal(ours["second_per_grid_ts"], theirs["second_per_grid_ts"]), where
            for name in ("pixel_values", "pixel_values_videos"):
                if name not in theirs:
                    continue
                assert ours[name].shape == theirs[name].shape, f"{name}: {where}"
                if ours[name].numel():
                    diff = float((ours[name] - theirs[name]).abs().max())
                    assert diff <= 1e-5, f"{name} differ by {diff}: {where}"
            positions, deltas = _rope_index(model, ours)
            ref_positions, ref_deltas = _rope_index(model, theirs)
            assert torch.equal(positions, ref_positions), where
            assert torch.equal(deltas, ref_deltas), where
            with torch.no_grad():
                loss = model(**full).loss
                ref_loss = model(**theirs).loss
            assert torch.isfinite(loss), where
            assert abs(float(loss) - float(ref_loss)) <= LOSS_RTOL * abs(float(ref_loss)), where
            video_batches += int(ours["video_grid_thw"].shape[0] > 0)
        assert video_batches > 0
        _train_one_step(model, next(b for b in batches if b.num_samples))
        _check_packed_positions(root, records, reference, model, preset_key, out_root, batches)
    finally:
        shutil.rmtree(out_root, ignore_errors=True)


def _check_packed_positions(
    root: Path,
    records: list[list[dict[str, Any]]],
    reference: VideoReference,
    model: torch.nn.Module,
    preset_key: str,
    out_root: Path,
    unpacked: list[Any],
) -> None:
    """The same records packed (every sample in a row of T tokens): each sample's tokens are the
    processor's and its M-RoPE positions the model's ``get_rope_index`` of it alone (the
    preset's video time: patch index, absolute time, timestamped patches)."""
    longest = max(int(n) for b in unpacked for n in b.attention_mask.sum(axis=1))
    packed = read_all(
        run_job(
            root,
            preset_key,
            out_root,
            *_pixel_options(preset_key),
            "--stoker.max-seq-len",
            str(longest),
            "--stoker.packing.enabled",
            "true",
            "--stoker.packing.max-tokens",
            str(2 * longest),
            name="video-packed",
        )  # fmt: skip
    )
    checked = 0
    for b in packed:
        assert b.packed
        for k, (row, start, end) in enumerate(b.sample_spans.tolist()):
            line = int(b.location[k].rpartition(":")[2])
            ref = reference.batch([records[line - 1]])
            where = f"{preset_key} packed step {b.step} rank {b.rank} sample {k} (line {line})"
            assert np.array_equal(b.input_ids[row, start:end], ref["input_ids"][0].numpy()), where
            rope, _ = _rope_index(model, ref)
            got = torch.from_numpy(b.position_ids[1:, row, start:end].copy())
            assert torch.equal(got, rope[:, 0]), where
            checked += k not in b.backfilled_slots
    assert checked == len(records)


def _train_one_step(model: torch.nn.Module, batch: Any) -> None:
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    vision = next(p for n, p in model.named_parameters() if "visual" in n and p.ndim > 1)
    before = vision.detach().clone()
    loss = model(**batch.to_torch()).loss
    loss.backward()
    assert vision.grad is not None and float(vision.grad.abs().sum()) > 0
    optimizer.step()
    assert not torch.equal(before, vision.detach())
