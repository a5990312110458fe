"""Batch files and manifests written with pyarrow exactly as the protocol (format_version 4) and
``schema/batch-schema.json`` describe, for the reader's tests.

A job directory ``root`` holds ``manifest.json`` naming the current generation; batches are in
``root/gen-<generation>/rank-<r>/``. The helpers default to generation :data:`GEN`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc

from stoker import BatchReader
from stoker.schema import arrow_schema

PATCH_DIM = 1176
#: The vision settings of the Qwen2-VL preset as the job writes them into manifest.json
#: (the Hugging Face Qwen2-VL preprocessor_config.json: OpenAI CLIP mean and std).
MANIFEST_VISION: dict[str, object] = {
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "rescale_factor": 0.00392156862745098,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
}
PAD = 151643
#: The inputs the Hugging Face Qwen-VL processors return for images (transformers 5.23.0), plus
#: labels: what ``Batch.arrays()`` / ``to_torch()`` must hold, by these names.
MODEL_INPUT_NAMES = frozenset(
    {"input_ids", "labels", "attention_mask", "mm_token_type_ids", "pixel_values", "image_grid_thw"}
)
IMAGE_PAD = 151655
VIDEO_PAD = 151656
GEN = "g1"


def bf16_rne(x: np.ndarray) -> np.ndarray:
    """Reference: float32 -> bfloat16 bits, round to nearest even, NaN -> 0x7FC0."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


def rank_dir(root: Path, rank: int, generation: str = GEN) -> Path:
    """``root/gen-<generation>/rank-<rank>``."""
    return root / f"gen-{generation}" / f"rank-{rank}"


def source_of(position: int) -> str:
    """The mixture source of a test sample: ``"chat"`` at even slots or indices, ``"ocr"`` at odd
    ones (two sources, so a test sees a sample's own source, not one for the whole batch)."""
    return ("chat", "ocr")[position % 2]


def make_samples(
    step: int,
    rank: int,
    n: int,
    *,
    patch_dim: int = PATCH_DIM,
    seed: int = 0,
    world_size: int = 1,
):
    """n deterministic samples of batch (step, rank): dicts with index, source, location, ids,
    grids, patches.

    ``index`` is the slot index ``(step * world_size + rank) * n + slot`` (micro-batch size n);
    ``source`` the mixture source, :func:`source_of` ``(slot)``.
    """
    rng = np.random.default_rng(seed * 1_000_003 + step * 1009 + rank)
    out = []
    for slot in range(n):
        length = int(rng.integers(3, 12))
        n_img = int(rng.integers(0, 3))
        grids = [
            [1, int(rng.integers(1, 4)) * 2, int(rng.integers(1, 4)) * 2] for _ in range(n_img)
        ]
        p = sum(t * h * w for t, h, w in grids)
        out.append(
            {
                "index": (step * world_size + rank) * n + slot,
                "source": source_of(slot),
                "location": f"s3://bucket/sft/a.jsonl:{slot + 1}",
                "ids": rng.integers(0, 150000, size=length).tolist(),
                "grids": grids,
                "patches": rng.standard_normal((p, patch_dim), dtype=np.float32),
            }
        )
    return out


def build_record_batch(
    samples, *, patch_dim: int = PATCH_DIM, pixel_dtype: str = "float32"
) -> pa.RecordBatch:
    """A batch of ``samples``; with ``pixel_dtype="bfloat16"`` their patches are uint16 bits,
    with ``"uint8"`` uint8 samples."""
    L = max((len(s["ids"]) for s in samples), default=0)
    B = len(samples)
    ids = np.full((B, L), PAD, dtype=np.int64)
    labels = np.full((B, L), -100, dtype=np.int64)
    mask = np.zeros((B, L), dtype=np.int64)
    for i, s in enumerate(samples):
        n = len(s["ids"])
        ids[i, :n] = s["ids"]
        labels[i, n // 2 : n] = s["ids"][n // 2 :]
        mask[i, :n] = 1
    schema = arrow_schema(L, patch_dim, pixel_dtype)
    if B == 0:  # a step whose samples were all dead-lettered: L = 0
        return pa.RecordBatch.from_pylist([], schema=schema)

    def fsl(mat, width, typ):
        return pa.FixedSizeListArray.from_arrays(pa.array(mat.reshape(-1), typ), width)

    def list_of_fsl(rows, width, typ, np_dtype):
        counts = [len(r) for r in rows]
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        flat = (
            np.concatenate([np.asarray(r, dtype=np_dtype).reshape(-1, width) for r in rows])
            if rows and sum(counts)
            else np.zeros((0, width), np_dtype)
        )
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), fsl(flat, width, typ))

    cols = [
        pa.array([s["index"] for s in samples], pa.int64()),
        pa.array([s["source"] for s in samples], pa.string()),
        pa.array([s["location"] for s in samples], pa.string()),
        fsl(ids, L, pa.int64()),
        fsl(labels, L, pa.int64()),
        fsl(mask, L, pa.int64()),
        list_of_fsl(
            [s["patches"] for s in samples],
            patch_dim,
            *{
                "bfloat16": (pa.uint16(), np.uint16),
                "uint8": (pa.uint8(), np.uint8),
            }.get(pixel_dtype, (pa.float32(), np.float32)),
        ),
        list_of_fsl([s["grids"] for s in samples], 3, pa.int64(), np.int64),
        list_of_fsl(
            [s.get("video_patches", np.zeros((0, patch_dim), np.float32)) for s in samples],
            patch_dim,
            *{
                "bfloat16": (pa.uint16(), np.uint16),
                "uint8": (pa.uint8(), np.uint8),
            }.get(pixel_dtype, (pa.float32(), np.float32)),
        ),
        list_of_fsl([s.get("video_grids", []) for s in samples], 3, pa.int64(), np.int64),
        pa.ListArray.from_arrays(
            pa.array(
                np.concatenate(
                    [[0], np.cumsum([len(s.get("seconds", [])) for s in samples])]
                ).astype(np.int32),
                pa.int32(),
            ),
            pa.array([v for s in samples for v in s.get("seconds", [])], pa.float32()),
        ),
    ]
    # from_arrays infers nullable child fields; cast to the exact schema (no-op on the data).
    cols = [c.cast(f.type) for c, f in zip(cols, schema, strict=True)]
    return pa.RecordBatch.from_arrays(cols, schema=schema)


VISION_START, VISION_END = 151652, 151653


def mrope_positions(ids, grids, merge: int = 2) -> np.ndarray:
    """``(4, n)`` int64 positions of one sample alone: text ``0 .. n-1``, then the M-RoPE
    temporal, height and width positions as batch-schema.json's ``position_ids`` describes them
    (each text token one on from the last, an image of grid ``(t, h, w)`` at ``p + (ti, hi,
    wi)`` over its ``t x h/merge x w/merge`` tokens, then ``p + max(h, w)/merge``). The
    real-model test checks the job's against transformers' ``get_rope_index``."""
    ids = np.asarray(ids, np.int64)
    n = len(ids)
    pos = np.zeros((4, n), np.int64)
    pos[0] = np.arange(n)
    nxt, t, image = 0, 0, 0
    while t < n:
        if ids[t] != IMAGE_PAD:
            pos[1:, t] = nxt
            nxt, t = nxt + 1, t + 1
            continue
        gt, gh, gw = grids[image]
        gh, gw = gh // merge, gw // merge
        ti, hi, wi = np.meshgrid(np.arange(gt), np.arange(gh), np.arange(gw), indexing="ij")
        k = gt * gh * gw
        pos[1, t : t + k] = nxt + ti.reshape(-1)
        pos[2, t : t + k] = nxt + hi.reshape(-1)
        pos[3, t : t + k] = nxt + wi.reshape(-1)
        nxt, t, image = nxt + max(gh, gw), t + k, image + 1
    return pos


def make_packed_samples(
    count: int, *, first_index: int = 0, seed: int = 0, patch_dim: int = PATCH_DIM
) -> list[dict]:
    """``count`` samples as :func:`make_samples` gives them, whose ``ids`` hold each image's
    ``<|vision_start|>``, ``t*h*w/4`` image tokens and ``<|vision_end|>`` between text."""
    rng = np.random.default_rng(seed * 7919 + first_index)
    out = []
    for k in range(count):
        grids = [
            [1, int(rng.integers(1, 3)) * 2, int(rng.integers(1, 3)) * 2]
            for _ in range(int(rng.integers(0, 3)))
        ]
        ids = rng.integers(0, 150000, size=int(rng.integers(2, 6))).tolist()
        for t, h, w in grids:
            ids += [VISION_START, *[IMAGE_PAD] * (t * h * w // 4), VISION_END]
            ids += rng.integers(0, 150000, size=int(rng.integers(1, 4))).tolist()
        p = sum(t * h * w for t, h, w in grids)
        out.append(
            {
                "index": first_index + k,
                "source": source_of(first_index + k),
                "location": f"file:///data/a.jsonl:{first_index + k + 1}",
                "ids": ids,
                "grids": grids,
                "patches": rng.standard_normal((p, patch_dim), dtype=np.float32),
            }
        )
    return out


def packed_arrays(rows: list[list[dict]], *, patch_dim: int = PATCH_DIM) -> dict[str, Any]:
    """The columns of a packed batch of ``rows`` (each a list of samples, :func:`make_packed_samples`),
    as the sink writes them: numpy ``ids``, ``labels``, ``mask`` ``(R, L)`` and ``positions``
    ``(R, 4, L)``; per-row lists ``cu``, ``index``, ``source``, ``location``, ``patches``,
    ``grids``. Labels:
    each sample's second half trained, -100 on its first token and the padding. Tests break them
    before :func:`packed_record_batch`."""
    lengths = [sum(len(s["ids"]) for s in row) for row in rows]
    L = max(lengths, default=0)
    R = len(rows)
    ids = np.full((R, L), PAD, np.int64)
    labels = np.full((R, L), -100, np.int64)
    mask = np.zeros((R, L), np.int64)
    positions = np.zeros((R, 4, L), np.int64)
    cu = []
    for r, row in enumerate(rows):
        t, bounds = 0, [0]
        for s in row:
            n = len(s["ids"])
            ids[r, t : t + n] = s["ids"]
            labels[r, t + n // 2 : t + n] = s["ids"][n // 2 :]
            labels[r, t] = -100
            mask[r, t : t + n] = 1
            positions[r, :, t : t + n] = mrope_positions(s["ids"], s["grids"])
            t += n
            bounds.append(t)
        positions[r, :, t:] = np.arange(L - t)
        if t < L:
            bounds.append(L)
        cu.append(bounds)
    return {
        "ids": ids,
        "labels": labels,
        "mask": mask,
        "positions": positions,
        "cu": cu,
        "index": [[s["index"] for s in row] for row in rows],
        "source": [[s["source"] for s in row] for row in rows],
        "location": [[s["location"] for s in row] for row in rows],
        "patches": [
            np.concatenate([s["patches"] for s in row])
            if any(len(s["patches"]) for s in row)
            else np.zeros((0, patch_dim), np.float32)
            for row in rows
        ],
        "grids": [[g for s in row for g in s["grids"]] for row in rows],
    }


def packed_record_batch(a: dict[str, Any], *, patch_dim: int = PATCH_DIM) -> pa.RecordBatch:
    """The record batch of :func:`packed_arrays`' columns ``a`` (float32 pixels)."""
    R, L = a["ids"].shape
    schema = arrow_schema(L, patch_dim, packed=True)
    if R == 0:  # a step without samples: L = 0
        return pa.RecordBatch.from_pylist([], schema=schema)

    def fsl(mat, width, typ):
        return pa.FixedSizeListArray.from_arrays(pa.array(np.asarray(mat).reshape(-1), typ), width)

    def offsets(rows):
        counts = np.array([len(r) for r in rows], np.int64)
        return pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32), pa.int32())

    def list_of_fsl(rows, width, typ, np_dtype):
        flat = [np.asarray(r, np_dtype).reshape(-1, width) for r in rows]
        values = np.concatenate(flat) if flat else np.zeros((0, width), np_dtype)
        return pa.ListArray.from_arrays(offsets(rows), fsl(values, width, typ))

    def list_of(rows, typ):
        return pa.ListArray.from_arrays(offsets(rows), pa.array([v for r in rows for v in r], typ))

    cols = [
        list_of(a["index"], pa.int64()),
        list_of(a["source"], pa.string()),
        list_of(a["location"], pa.string()),
        fsl(a["ids"], L, pa.int64()),
        fsl(a["labels"], L, pa.int64()),
        fsl(a["mask"], L, pa.int64()),
        list_of_fsl(a["patches"], patch_dim, pa.float32(), np.float32),
        list_of_fsl(a["grids"], 3, pa.int64(), np.int64),
        list_of_fsl(
            [np.zeros((0, patch_dim), np.float32)] * R, patch_dim, pa.float32(), np.float32
        ),
        list_of_fsl([[]] * R, 3, pa.int64(), np.int64),
        list_of([[]] * R, pa.float32()),
        fsl(a["positions"], 4 * L, pa.int64()),
        list_of(a["cu"], pa.int32()),
    ]
    cols = [c.cast(f.type) for c, f in zip(cols, schema, strict=True)]
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def write_batch(
    root: Path,
    step: int,
    rank: int,
    rb: pa.RecordBatch,
    *,
    slots: int = 4,
    metadata: dict[str, str] | None = None,
    generation: str = GEN,
) -> Path:
    """Publish per the protocol: write gen-<g>/rank-<r>/.step-*.arrow.tmp, then atomic rename."""
    rdir = rank_dir(root, rank, generation)
    rdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    meta = {
        "stoker.format_version": "4",
        "stoker.step": str(step),
        "stoker.rank": str(rank),
        "stoker.slots": str(slots),
        "stoker.backfilled_slots": "",
        "stoker.pad_token_id": str(PAD),
        "stoker.image_token_id": str(IMAGE_PAD),
        "stoker.video_token_id": str(VIDEO_PAD),
    }
    if metadata is not None:
        meta.update(metadata)
    schema = rb.schema.with_metadata(meta)
    name = f"step-{step:010d}.arrow"
    tmp = rdir / f".{name}.tmp"
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, schema) as w:
        w.write_batch(pa.RecordBatch.from_arrays(rb.columns, schema=schema))
    os.chmod(tmp, 0o600)
    final = rdir / name
    os.rename(tmp, final)
    return final


def write_manifest(
    root: Path,
    *,
    world_size: int,
    num_steps: int,
    micro_batch_size: int = 4,
    patch_dim: int = PATCH_DIM,
    job_name: str = "test-job",
    generation: str = GEN,
    first_step: int = 0,
    epochs: int = 1,
    shuffle_seed: int | None = 0,
    dataset_fingerprint: str | None = None,
    model_preset: str | None = None,
    vision: dict[str, object] | None = None,
    packing_max_tokens: int | None = None,
    mixture_start_step: int = 0,
    mixture_start_position: int = 0,
    plan_history: list[dict[str, object]] | None = None,
) -> None:
    """Like the sink: create gen-<generation>/, then publish manifest.json by atomic rename.

    ``dataset_fingerprint`` and ``model_preset`` are written when given; ``vision`` (the
    manifest's vision fields) defaults to :data:`MANIFEST_VISION`; ``packing_max_tokens`` is
    written always (``null``: unpacked); ``plan_history`` defaults to the one stage of these
    fields.
    """
    (root / f"gen-{generation}").mkdir(mode=0o700, parents=True, exist_ok=True)
    steps_per_epoch = num_steps // epochs
    tmp = root / ".manifest.json.tmp"
    optional = {"dataset_fingerprint": dataset_fingerprint, "model_preset": model_preset}
    sequence = {
        "dataset_fingerprint": dataset_fingerprint,
        "num_records": world_size * steps_per_epoch * micro_batch_size,
        "shuffle_seed": shuffle_seed,
        "world_size": world_size,
        "micro_batch_size": micro_batch_size,
        "epochs": epochs,
        "model_preset": model_preset,
        "packing_max_tokens": packing_max_tokens,
        "mixture_start_step": mixture_start_step,
        "mixture_start_position": mixture_start_position,
    }
    tmp.write_text(
        json.dumps(
            {
                **{k: v for k, v in optional.items() if v is not None},
                "format_version": 4,
                "job_name": job_name,
                "generation": generation,
                "world_size": world_size,
                "micro_batch_size": micro_batch_size,
                "num_records": world_size * steps_per_epoch * micro_batch_size,
                "epochs": epochs,
                "steps_per_epoch": steps_per_epoch,
                "num_steps": num_steps,
                "first_step": first_step,
                "shuffle_seed": shuffle_seed,
                "patch_dim": patch_dim,
                **(MANIFEST_VISION if vision is None else vision),
                "packing_max_tokens": packing_max_tokens,
                "mixture_start_step": mixture_start_step,
                "mixture_start_position": mixture_start_position,
                "plan_history": (
                    [{"mixture": None, **sequence}] if plan_history is None else plan_history
                ),
            }
        )
    )
    os.rename(tmp, root / "manifest.json")


def write_steps(
    root: Path,
    steps,
    *,
    world_size: int,
    micro_batch_size: int = 4,
    patch_dim: int = PATCH_DIM,
    generation: str = GEN,
) -> dict[tuple[int, int], list]:
    """Publish full batches of ``steps`` for every rank; returns the samples per (step, rank)."""
    written = {}
    for step in steps:
        for rank in range(world_size):
            samples = make_samples(
                step, rank, micro_batch_size, patch_dim=patch_dim, world_size=world_size
            )
            write_batch(
                root,
                step,
                rank,
                build_record_batch(samples, patch_dim=patch_dim),
                slots=micro_batch_size,
                generation=generation,
            )
            written[(step, rank)] = samples
    return written


def make_job(
    root: Path,
    *,
    world_size: int,
    num_steps: int,
    micro_batch_size: int = 4,
    patch_dim: int = PATCH_DIM,
    generation: str = GEN,
    first_step: int = 0,
    **manifest: Any,
) -> dict[tuple[int, int], list]:
    """A complete generation: manifest and steps ``first_step .. num_steps-1`` of every rank;
    ``manifest`` are more :func:`write_manifest` fields.

    Returns the samples per (step, rank).
    """
    write_manifest(
        root,
        world_size=world_size,
        num_steps=num_steps,
        micro_batch_size=micro_batch_size,
        patch_dim=patch_dim,
        generation=generation,
        first_step=first_step,
        **manifest,
    )
    return write_steps(
        root,
        range(first_step, num_steps),
        world_size=world_size,
        micro_batch_size=micro_batch_size,
        patch_dim=patch_dim,
        generation=generation,
    )


def video_samples(dtype=np.float32):
    """Two samples: the first with two videos (grids (2, 2, 2) and (1, 2, 4): 8 + 8 rows) and
    their pads in its ids, the second with none."""
    samples = make_samples(0, 0, 2)
    rng = np.random.default_rng(7)
    if dtype == np.uint8:
        patches = rng.integers(0, 256, size=(16, PATCH_DIM), dtype=np.uint8)
    else:
        patches = rng.standard_normal((16, PATCH_DIM), dtype=np.float32)
    samples[0]["ids"] = [151644, 872, 198, 151652, *[VIDEO_PAD] * 2, 151653]
    samples[0]["ids"] += [151652, *[VIDEO_PAD] * 2, 151653, IMAGE_PAD, 151645]
    samples[0]["video_patches"] = patches
    samples[0]["video_grids"] = [[2, 2, 2], [1, 2, 4]]
    samples[0]["seconds"] = [1.0, 2.002]
    return samples


def video_reference(u):
    """TorchvisionBackend's fused rescale_and_normalize (transformers 5.23.0), per channel."""
    m = np.array(MANIFEST_VISION["image_mean"]).astype(np.float32) * np.float32(255.0)
    s = np.array(MANIFEST_VISION["image_std"]).astype(np.float32) * np.float32(255.0)
    c = np.repeat(np.arange(3), PATCH_DIM // 3)
    return (u.astype(np.float32) - m[c]) / s[c]


def write_and_read_one(shm_root: Path, samples: list[dict], pixel_dtype: str = "float32") -> Any:
    """``samples`` written as the one batch (step 0, rank 0, 2 slots) of a one-step job under
    ``shm_root`` in ``pixel_dtype`` ("float32", "bfloat16" or "uint8"), read back through
    ``BatchReader``: the ``stoker.Batch``."""
    write_manifest(shm_root, world_size=1, num_steps=1, micro_batch_size=2)
    rb = build_record_batch(samples, pixel_dtype=pixel_dtype)
    meta = {} if pixel_dtype == "float32" else {"stoker.pixel_dtype": pixel_dtype}
    write_batch(shm_root, 0, 0, rb, slots=2, metadata=meta)
    return next(BatchReader(shm_root, 0, timeout_s=5))
