"""The three ``stoker.image.pixel-dtype`` layouts of the real job over the same data agree. A
UINT8 job's batches hold uint8 views of the file; the reader's float32 from them is bit for bit
the FLOAT32 job's ``pixel_values`` and its bfloat16 rounding the BFLOAT16 job's bits, on the
numpy path (``Batch.pixel_values_float32``) and normalized by torch (``Batch.to_torch``,
``StokerDataset``): the trainer's device does the sink's arithmetic, in the sink's order.

The references are the other jobs' files: the Java sink normalised those pixels itself
(``Patchifier``, checked against Hugging Face's processor in HfPixelParityTest). The three jobs
run once for both paths. Runs in the model venv (torch), as the real-model tier.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from harness.batches import MODEL_INPUT_NAMES, PATCH_DIM, bf16_rne
from harness.jobs import run_pixel_dtype_jobs
from harness.paths import require_shared

from stoker import Batch, BatchReader
from stoker.torch import StokerDataset

DTYPES = ("FLOAT32", "BFLOAT16", "UINT8")


@pytest.fixture(scope="module")
def jobs():
    """Each job's directory and rank 0's batches, by dtype (the mappings stay valid while held)."""
    require_shared()
    out_root = Path(tempfile.mkdtemp(prefix="stoker-uint8-torch-", dir="/dev/shm"))
    try:
        dirs = run_pixel_dtype_jobs(out_root, DTYPES)
        # the UINT8 job's files as written, for StokerDataset to read again (a reader unlinks)
        shutil.copytree(dirs["UINT8"], out_root / "pristine")
        batches = {d: list(BatchReader(dirs[d], 0, timeout_s=60)) for d in DTYPES}
        yield {"root": out_root, **batches}
    finally:
        shutil.rmtree(out_root, ignore_errors=True)


def twin(jobs, name: str) -> Path:
    """A fresh copy of the UINT8 job's directory, unread."""
    return Path(shutil.copytree(jobs["root"] / "pristine", jobs["root"] / name))


def bits(t: torch.Tensor) -> np.ndarray:
    """The raw bits of a float32 (uint32) or bfloat16 (uint16) CPU tensor."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    assert t.dtype == torch.float32
    return t.numpy().view(np.uint32)


def assert_pixels_are_the_jobs(ours: torch.Tensor, reference: Batch) -> None:
    ref = reference.pixel_values
    want = ref.view(np.uint16) if ref.dtype == np.uint16 else ref.view(np.uint32)
    got = bits(ours.cpu())
    assert got.shape == want.shape
    assert np.array_equal(got, want), (
        f"step {reference.step}: {np.count_nonzero(got != want)} of {want.size} values differ"
    )


def test_uint8_batches_hold_uint8_views_of_the_file(jobs) -> None:
    u8: list[Batch] = jobs["UINT8"]
    assert u8, "the job wrote no batch"
    for b in u8:
        assert b.pixel_dtype == "uint8" and b.metadata["stoker.pixel_dtype"] == "uint8"
        assert b.pixel_values.dtype == np.uint8 and b.pixel_values.shape[1] == PATCH_DIM
        assert b.pixel_values.shape[0] == int(np.prod(b.image_grid_thw, axis=1).sum())
        lo, size = b.mapping_range
        if b.pixel_values.size:
            assert lo <= b.pixel_values.ctypes.data < lo + size  # no copy
        assert not b.pixel_values.flags.writeable
    assert sum(b.pixel_values.shape[0] for b in u8) > 0


def test_the_three_jobs_wrote_the_same_samples(jobs) -> None:
    f32, bf16, u8 = (jobs[d] for d in DTYPES)
    assert [b.step for b in f32] == [b.step for b in bf16] == [b.step for b in u8]
    for a, b, c in zip(f32, bf16, u8, strict=True):
        assert a.sample_index.tolist() == b.sample_index.tolist() == c.sample_index.tolist()
        assert np.array_equal(a.input_ids, c.input_ids) and np.array_equal(b.input_ids, c.input_ids)
        assert np.array_equal(a.image_grid_thw, c.image_grid_thw)
        assert a.pixel_values.shape == b.pixel_values.shape == c.pixel_values.shape
        # a quarter of the float32 bytes
        assert c.pixel_values.nbytes * 4 == a.pixel_values.nbytes


def test_float32_from_uint8_is_the_float32_jobs_bit_for_bit(jobs) -> None:
    for a, c in zip(jobs["FLOAT32"], jobs["UINT8"], strict=True):
        ours = c.pixel_values_float32()
        assert ours.dtype == np.float32 and ours.shape == a.pixel_values.shape
        assert np.array_equal(ours.view(np.uint32), a.pixel_values.view(np.uint32)), (
            f"step {c.step}: {np.count_nonzero(ours.view(np.uint32) != a.pixel_values.view(np.uint32))}"
            " values differ"
        )


def test_bfloat16_from_uint8_is_the_bfloat16_jobs_bit_for_bit(jobs) -> None:
    for b, c in zip(jobs["BFLOAT16"], jobs["UINT8"], strict=True):
        assert b.pixel_values.dtype == np.uint16
        assert np.array_equal(bf16_rne(c.pixel_values_float32()), b.pixel_values), f"step {c.step}"


@pytest.mark.parametrize("device", [None, "cpu"])
def test_to_torch_float32_and_bfloat16_are_the_float32_and_bfloat16_jobs(jobs, device):
    for f32, bf16, u8 in zip(*(jobs[d] for d in DTYPES), strict=True):
        t = u8.to_torch(device)
        assert set(t) == MODEL_INPUT_NAMES
        assert t["pixel_values"].dtype == torch.float32
        assert_pixels_are_the_jobs(t["pixel_values"], f32)
        # the other inputs are the file's, as from the FLOAT32 job
        for k in MODEL_INPUT_NAMES - {"pixel_values"}:
            assert torch.equal(t[k], f32.to_torch()[k]), k
        half = u8.to_torch(device, pixel_dtype=torch.bfloat16)["pixel_values"]
        assert half.dtype == torch.bfloat16
        assert_pixels_are_the_jobs(half, bf16)
        # a float32 job's values rounded by to_torch are the BFLOAT16 job's bits too
        assert_pixels_are_the_jobs(f32.to_torch(pixel_dtype=torch.bfloat16)["pixel_values"], bf16)


@pytest.mark.parametrize(
    ("device", "pixel_dtype", "reference"),
    [(None, None, "FLOAT32"), ("cpu", None, "FLOAT32"), ("cpu", torch.bfloat16, "BFLOAT16")],
)
def test_stoker_dataset_normalizes_a_uint8_job(jobs, device, pixel_dtype, reference):
    ds = StokerDataset(
        twin(jobs, f"twin-{device}-{pixel_dtype}"),
        rank=0,
        world_size=1,
        timeout_s=30,
        device=device,
        pixel_dtype=pixel_dtype,
    )
    got = list(ds)
    assert [b.step for b in got] == [b.step for b in jobs[reference]]
    for ours, ref in zip(got, jobs[reference], strict=True):
        assert ours["pixel_values"].dtype == (pixel_dtype or torch.float32)
        assert_pixels_are_the_jobs(ours["pixel_values"], ref)


def test_a_uint8_batch_without_vision_settings_or_with_another_dtype_is_an_error(jobs):
    u8 = jobs["UINT8"][0]
    with pytest.raises(ValueError, match="pixel_dtype must be torch.float32 or torch.bfloat16"):
        u8.to_torch(pixel_dtype=torch.float16)
    bare = dataclasses.replace(u8, vision=None)
    with pytest.raises(ValueError, match=r"uint8 \(stoker.pixel_dtype=uint8\) and need the job"):
        bare.to_torch()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_values_are_the_float32_and_bfloat16_jobs(jobs):
    for f32, bf16, u8 in zip(*(jobs[d] for d in DTYPES), strict=True):
        t = u8.to_torch("cuda")["pixel_values"]
        assert t.device.type == "cuda" and t.dtype == torch.float32
        assert_pixels_are_the_jobs(t, f32)
        assert_pixels_are_the_jobs(
            u8.to_torch("cuda", pixel_dtype=torch.bfloat16)["pixel_values"], bf16
        )
    ds = StokerDataset(
        twin(jobs, "twin-cuda"), rank=0, world_size=1, timeout_s=30, device="cuda", pin_memory=True
    )
    for ours, ref in zip(ds, jobs["FLOAT32"], strict=True):
        assert ours["pixel_values"].device.type == "cuda"
        assert_pixels_are_the_jobs(ours["pixel_values"], ref)
