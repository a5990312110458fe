"""Real-model tier: packed batches (``stoker.packing.enabled``) train the transformers Qwen-VL
models exactly as the same samples unpacked do.

The real job (embedded Flink, the jar ``./stoker test`` built) runs twice over the dataset of
``test_real_model`` (the three shared datasets side by side), once unpacked and once packed into
rows of ``stoker.packing.max-tokens`` tokens (chosen from the unpacked run's sample lengths so
that rows hold several samples), with the same seed, W and B. Per preset, asserted:

* the same samples: per step, the multiset of ``sample_index`` over the ranks' batches is the
  unpacked run's (back-fills aside), and each packed sample's ``input_ids``,
  ``mm_token_type_ids``, ``image_grid_thw`` and ``pixel_values`` are the unpacked row's (its
  unpadded tokens, its images), its ``labels`` too but for its first token (-100 when packed);
* positions: over each sample's tokens, the packed batch's ``position_ids`` text axis is
  ``0 .. n-1`` and its three M-RoPE axes equal the model's ``get_rope_index`` on that sample
  alone (the unpacked row's unpadded tokens and its images);
* loss (Qwen2-VL and Qwen2.5-VL, the issue's two): with the tiny seeded model in eval mode
  (float32; attention ``sdpa`` and ``eager``),
  each sample's per-token losses from the packed forward (``model(**batch.to_torch())``, no
  ``attention_mask``) equal the unpacked forward's (its trained positions',
  :func:`token_losses`) within 1e-5 relative, each sample's mean loss
  and the packed batch's ``.loss`` (token mean) within 1e-5 relative of the unpacked per-sample
  losses' (token-weighted) mean. As controls, the first packed batch with a row of several
  samples, with ``attention_mask`` passed or with the model's default ``use_cache=True``
  (``to_torch()`` turns it off), moves some per-token loss by more than :data:`CONTROL_MIN`: in
  transformers 5.23 either makes attention cross the samples of a row. The controls are per token because the randomly
  initialised model's losses are all near ln(vocabulary) = 11.93: attention across samples
  moves single tokens' losses by ~1e-2 but the batch mean by less than 1e-5.

Runs in the model venv (``.stoker/model-venv``), as ``test_real_model``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from harness.real_model import PLAIN_MICRO_BATCH, read_all, run_job, tiny_model

from stoker import Batch

MICRO_BATCH = PLAIN_MICRO_BATCH  # B of the unpacked run (the plain run); W = 2
RTOL = 1e-5
IGNORE = -100
PRESET_KEYS = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl")
#: the presets whose losses are compared (the issue's two; Qwen3-VL's positions are checked)
LOSS_PRESETS = ("qwen2-vl", "qwen2.5-vl")
CHUNK = 256  # positions per float64 cross-entropy in token_losses
#: what attention crossing the samples must move some per-token loss by (relative), at least; it
#: moves them by ~1e-2 with this model (packed vs unpacked differ by ~1e-8)
CONTROL_MIN = 1e-3
MERGE = 2


def samples_of(batch: Batch) -> list[dict[str, Any]]:
    """Each sample of ``batch``: its ``sample_index``, where it lies (``row``, ``start``,
    ``end``), its tokens, labels and (packed) positions, and its images' grids and patches."""
    grids = batch.image_grid_thw
    patches = np.split(batch.pixel_values, np.cumsum(grids.prod(axis=1))[:-1]) if len(grids) else []
    image_tokens = (grids.prod(axis=1) // MERGE**2).tolist()
    out, image = [], 0
    for k, (row, start, end) in enumerate(batch.sample_spans.tolist()):
        ids = batch.input_ids[row, start:end]
        n_tokens = int((ids == batch.image_token_id).sum())
        first = image
        while n_tokens > 0:
            n_tokens -= image_tokens[image]
            image += 1
        assert n_tokens == 0, f"{batch.path}: sample {k}'s image tokens do not match its grids"
        out.append(
            {
                "index": int(batch.sample_index[k]),
                "backfilled": k in batch.backfilled_slots,
                "row": row,
                "start": start,
                "end": end,
                "ids": ids,
                "labels": batch.labels[row, start:end],
                "types": batch.mm_token_type_ids[row, start:end],
                "grids": grids[first:image],
                "patches": patches[first:image],
                "positions": None
                if batch.position_ids is None
                else batch.position_ids[:, row, start:end],
            }
        )
    assert image == len(grids), f"{batch.path}: images left over after the last sample"
    return out


def token_losses(
    model: torch.nn.Module, inputs: dict[str, torch.Tensor], *, model_loss: bool = False
) -> tuple[torch.Tensor, float | None]:
    """``(B, L)`` float64: the next-token loss of position ``t`` (its logits against
    ``labels[t+1]``), NaN where that label is -100 (and at the last position); and, with
    ``model_loss``, the model's own ``.loss`` (else ``None``).

    With ``model_loss`` the whole model runs (``model(**inputs)``), whose float32 logits,
    ``(B, L, V)`` over the real vocabulary, and their cross-entropy over every position are the
    forward's largest costs. Without it the decoder runs without the labels (``model.model``) and
    ``model.lm_head`` maps only the trained positions' hidden states to logits, as the model's
    forward maps all of them: the loss test of one preset and attention took 31 instead of 93 s
    with the whole model on every forward. Either way only the trained positions' logits are taken
    to float64, :data:`CHUNK` at a time."""
    labels = inputs["labels"]
    loss = None
    with torch.no_grad():
        if model_loss:
            out = model(**inputs)
            logits, loss = out.logits, float(out.loss)
            del out
        else:
            unlabelled = {k: v for k, v in inputs.items() if k != "labels"}
            hidden = model.model(**unlabelled).last_hidden_state
        ce = torch.full(labels.shape, torch.nan, dtype=torch.float64)
        target = labels[:, 1:]
        rows, cols = torch.nonzero(target != IGNORE, as_tuple=True)
        for start in range(0, len(rows), CHUNK):
            r, c = rows[start : start + CHUNK], cols[start : start + CHUNK]
            chunk = logits[r, c] if model_loss else model.lm_head(hidden[r, c])
            ce[r, c] = torch.nn.functional.cross_entropy(
                chunk.double(), target[r, c], reduction="none"
            )
    return ce, loss


def rel_diff(losses: torch.Tensor, sample: dict[str, Any], reference: np.ndarray) -> float:
    """The largest relative difference of ``sample``'s trained per-token losses in ``losses``
    (a packed forward's, :func:`token_losses`) from its unpacked ``reference``; 0 if none."""
    mine = losses[sample["row"], sample["start"] : sample["end"]].numpy()
    trained = ~np.isnan(reference)
    if not trained.any():
        return 0.0
    return float(np.max(np.abs(mine[trained] - reference[trained]) / np.abs(reference[trained])))


def close(a: float, b: float) -> bool:
    return abs(a - b) <= RTOL * abs(b)


@pytest.fixture(scope="module")
def runs(request, dataset, plain_run):  # noqa: F811  (the fixture imported above)
    """The preset (``request.param``), its unpacked (the session's plain run, which the
    real-model test reads too) and packed runs' batches and T. Module scoped and parametrized
    indirectly, so pytest runs one preset's tests together and removes its packed batch files
    before the next preset's jobs run."""
    preset = request.param
    root, _ = dataset
    out_root = Path(tempfile.mkdtemp(prefix="stoker-packing-", dir="/dev/shm"))
    try:
        unpacked = plain_run(preset)
        lengths = [int(n) for b in unpacked for n in b.attention_mask.sum(axis=1)]
        # every sample fits (T >= the longest, which max-seq-len must allow), and a row takes
        # two to four typical samples
        t = max(max(lengths), 3 * int(np.median(lengths)))
        packed = read_all(
            run_job(
                root,
                preset,
                out_root,
                "--stoker.max-seq-len",
                str(max(lengths)),
                "--stoker.packing.enabled",
                "true",
                "--stoker.packing.max-tokens",
                str(t),
                name="packed",
                micro_batch_size=MICRO_BATCH,
            )  # fmt: skip
        )
        yield preset, unpacked, packed, t
    finally:
        shutil.rmtree(out_root, ignore_errors=True)


@pytest.mark.parametrize("runs", PRESET_KEYS, indirect=True)
def test_packed_batches_hold_the_same_samples_with_each_ones_own_positions(runs):
    preset, unpacked, packed, t = runs
    assert all(b.packed and b.packing_max_tokens == t for b in packed)
    assert not any(b.packed for b in unpacked)
    steps = sorted({b.step for b in unpacked})
    assert sorted(b.step for b in packed) == sorted(b.step for b in unpacked), (
        "every rank, every step"
    )

    # (c) the same samples per step, back-fills aside
    def per_step(batches: list[Batch]) -> dict[int, Counter[int]]:
        out: dict[int, Counter[int]] = {s: Counter() for s in steps}
        for b in batches:
            for s in samples_of(b):
                if not s["backfilled"]:
                    out[b.step][s["index"]] += 1
        return out

    assert per_step(packed) == per_step(unpacked)
    per_row = [int(n) for b in packed for n in np.diff(b.row_offsets)]
    assert max(per_row) >= 2 and sum(per_row) > len(per_row), f"rows hold {per_row} samples"
    assert all(b.seq_len <= t for b in packed)

    reference = {s["index"]: s for b in unpacked for s in samples_of(b) if not s["backfilled"]}
    model = tiny_model(preset).eval()
    checked = 0
    for b in packed:
        for s in samples_of(b):
            ref = reference[s["index"]]
            n = ref["end"]
            where = f"{preset} step {b.step} rank {b.rank} sample {s['index']} ({b.path})"
            assert np.array_equal(s["ids"], ref["ids"]), where
            assert s["labels"][0] == IGNORE and np.array_equal(s["labels"][1:], ref["labels"][1:])
            assert np.array_equal(s["types"], ref["types"]), where
            assert np.array_equal(s["grids"], ref["grids"]), where
            assert all(
                np.array_equal(p, q) for p, q in zip(s["patches"], ref["patches"], strict=True)
            )
            # (a) positions: text axis 0 .. n-1, M-RoPE axes the model's for the sample alone
            assert s["positions"][0].tolist() == list(range(n)), where
            rope, _ = model.model.get_rope_index(
                torch.from_numpy(ref["ids"].copy())[None],
                torch.from_numpy(ref["types"].copy())[None],
                image_grid_thw=torch.from_numpy(ref["grids"].copy()) if len(ref["grids"]) else None,
                attention_mask=torch.ones(1, n, dtype=torch.int64),
            )
            assert torch.equal(torch.from_numpy(s["positions"][1:].copy()), rope[:, 0]), where
            checked += 1
    assert checked == sum(b.num_samples for b in packed)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("runs", LOSS_PRESETS, indirect=True)
def test_the_packed_loss_is_the_token_weighted_mean_of_the_unpacked_per_sample_losses(runs, attn):
    preset, unpacked, packed, _ = runs
    model = tiny_model(preset).eval()
    model.set_attn_implementation(attn)
    # each sample's per-token losses in the unpacked forward
    reference: dict[int, np.ndarray] = {}
    for b in unpacked:
        if b.num_rows == 0:
            continue
        losses, _ = token_losses(model, b.to_torch())
        for s in samples_of(b):
            if not s["backfilled"]:
                reference[s["index"]] = losses[s["row"], : s["end"]].numpy()
    crossing = 0
    for b in packed:
        if b.num_rows == 0:
            continue
        inputs = b.to_torch()
        assert "attention_mask" not in inputs
        losses, loss = token_losses(model, inputs, model_loss=True)
        assert loss is not None
        total = count = 0.0
        for s in samples_of(b):
            where = f"{preset} {attn} step {b.step} rank {b.rank} sample {s['index']}"
            mine = losses[s["row"], s["start"] : s["end"]].numpy()
            ref = reference[s["index"]]
            trained = ~np.isnan(ref)
            assert np.array_equal(trained, ~np.isnan(mine)), where
            np.testing.assert_allclose(mine[trained], ref[trained], rtol=RTOL, err_msg=where)
            if trained.any():
                assert close(float(mine[trained].mean()), float(ref[trained].mean())), where
            total += float(ref[trained].sum())
            count += int(trained.sum())
        where = f"{preset} {attn} step {b.step} rank {b.rank}"
        assert count > 0, where
        assert close(loss, total / count), f"loss {loss!r} vs {total / count!r}: {where}"
        # the controls, on the first batch with a row of several samples (they show that this
        # comparison sees attention crossing samples): with the attention_mask, or with the
        # cache on, it does, and the later samples' per-token losses move far past RTOL
        assert inputs["use_cache"] is False, where
        if crossing == 0 and int(np.diff(b.row_offsets).max()) > 1:
            masked, _ = token_losses(
                model, dict(inputs, attention_mask=torch.from_numpy(b.attention_mask))
            )
            cached, _ = token_losses(model, dict(inputs, use_cache=True))
            for name, leaky in (("attention_mask passed", masked), ("use_cache=True", cached)):
                moved = max(rel_diff(leaky, s, reference[s["index"]]) for s in samples_of(b))
                assert moved > CONTROL_MIN, f"{name}: per-token losses moved only {moved}: {where}"
            crossing += 1
    assert crossing > 0, "no packed row with more than one sample"
