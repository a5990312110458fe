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
positions and rope deltas (``get_rope_index``) equal; the loss equal within 1e-5 relative (the
processor's forward runs only for a batch whose inputs are not the same bytes as Stoker's: the
same model on the same tensors is the same computation; on 2026-12-03 every batch with samples
(15 of each preset's 16) was byte-identical, which the test prints); and forward, backward and one
AdamW step train on the Stoker batch (finite loss and gradients, the vision tower's parameters
change). Runs in the model venv (``.stoker/model-venv``,
``python/requirements-model.txt``), not the dev venv: ``./stoker test`` runs it as its own tier.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from harness.paths import TOKENIZER_DIR
from harness.real_model import (
    LOSS_RTOL,
    MAX_PIXELS,
    Record,
    hf,
    padded_batch,
    tiny_model,
)
from PIL import Image, ImageOps
from transformers import AutoTokenizer, Qwen2VLImageProcessorPil

from stoker import Batch

# ------------------------------------------------------------------ the HF reference


class Reference:
    """The HF processor of one preset, applied to records one at a time (cached)."""

    def __init__(self, preset: Any, root: Path) -> None:
        self.preset = preset
        self.root = root
        tokenizer = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
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
        return padded_batch(
            [self.record(r) for r in rows], self.pad_token_id, ("pixel_values", "image_grid_thw")
        )


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
        image_grid_thw=inputs.get("image_grid_thw"),
        attention_mask=inputs["attention_mask"],
    )


@pytest.mark.parametrize("preset_key", [p.key for p in hf.PRESETS])
def test_batches_train_the_real_model_as_the_processor_output_does(dataset, plain_run, preset_key):
    root, records = dataset
    preset = next(p for p in hf.PRESETS if p.key == preset_key)
    batches = plain_run(preset_key)
    assert sum(b.num_samples - len(b.backfilled_slots) for b in batches) == len(records)
    reference = Reference(preset, root)
    model = tiny_model(preset_key)
    model.eval()
    image_tokens = wrong_1d = identical = 0
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
            if name in theirs:  # a batch without images has no image inputs
                assert torch.equal(ours[name], theirs[name]), f"{name} differs: {where}"
        if "pixel_values" in theirs:
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
            if all(torch.equal(ours[k], theirs[k]) for k in theirs):
                identical += 1
                ref_loss = loss  # the same model on the same tensors
            else:
                ref_loss = model(**theirs).loss
        assert torch.isfinite(loss), where
        assert abs(float(loss) - float(ref_loss)) <= LOSS_RTOL * abs(float(ref_loss)), (
            f"loss {float(loss)!r} vs processor's {float(ref_loss)!r}: {where}"
        )
    assert image_tokens > 0
    print(
        f"{preset_key}: {len(batches)} batches, {identical} of them byte-identical to the "
        f"processor's; {wrong_1d} of {image_tokens} image tokens would get another position "
        "without mm_token_type_ids"
    )
    _train_one_step(preset_key, model, next(b for b in batches if b.num_images))


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
