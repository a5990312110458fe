"""A UINT8 job's pixels normalized by torch (``Batch.to_torch``, ``StokerDataset``) are bit for
bit the FLOAT32 job's ``pixel_values`` over the same data, and with ``torch.bfloat16`` the
BFLOAT16 job's bits: the trainer's device does the sink's arithmetic, in the sink's order.

The references are the other jobs' files (the Java sink normalised those pixels itself).
Runs in the model venv (torch), as the real-model tier; the numpy path is
``tests/test_pixel_dtypes.py``.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import MODEL_INPUT_NAMES, SHARED, run_pixel_dtype_jobs

from stoker import Batch, BatchReader
from stoker.torch import StokerDataset

DTYPES = ("FLOAT32", "BFLOAT16", "UINT8")


@pytest.fixture(scope="module")
def jobs():
    """Each job's directory and rank 0's batches, by dtype (the mappings stay valid while held)."""
    if not SHARED.is_dir():
        pytest.fail(f"{SHARED} is missing; tests need ../shared beside the repository")
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
