"""The three ``stoker.image.pixel-dtype`` layouts of the real job over the same data agree: the
reader's float32 from a UINT8 job's batches is bit for bit the FLOAT32 job's ``pixel_values``, and
its bfloat16 rounding the BFLOAT16 job's bits (numpy path; the torch path is in
``tests/model/test_uint8_pixels.py``).

The references are the other jobs' files: the Java sink normalised those pixels itself
(``Patchifier``, checked against Hugging Face's processor in HfPixelParityTest).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import PATCH_DIM, SHARED, bf16_rne, run_pixel_dtype_jobs

from stoker import Batch, BatchReader

DTYPES = ("FLOAT32", "BFLOAT16", "UINT8")


@pytest.fixture(scope="module")
def batches():
    """Every batch of rank 0 of each job, by dtype (the mappings stay valid while held)."""
    if not SHARED.is_dir():
        pytest.fail(f"{SHARED} is missing; tests need ../shared beside the repository")
    out_root = Path(tempfile.mkdtemp(prefix="stoker-pixel-dtypes-", dir="/dev/shm"))
    try:
        dirs = run_pixel_dtype_jobs(out_root, DTYPES)
        yield {d: list(BatchReader(dirs[d], 0, timeout_s=60)) for d in DTYPES}
    finally:
        shutil.rmtree(out_root, ignore_errors=True)


def test_uint8_batches_hold_uint8_views_of_the_file(batches) -> None:
    u8: list[Batch] = batches["UINT8"]
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


def test_the_three_jobs_wrote_the_same_samples(batches) -> None:
    f32, bf16, u8 = (batches[d] for d in DTYPES)
    assert [b.step for b in f32] == [b.step for b in bf16] == [b.step for b in u8]
    for a, b, c in zip(f32, bf16, u8, strict=True):
        assert a.sample_index.tolist() == b.sample_index.tolist() == c.sample_index.tolist()
        assert np.array_equal(a.input_ids, c.input_ids) and np.array_equal(b.input_ids, c.input_ids)
        assert np.array_equal(a.image_grid_thw, c.image_grid_thw)
        assert a.pixel_values.shape == b.pixel_values.shape == c.pixel_values.shape
        # a quarter of the float32 bytes
        assert c.pixel_values.nbytes * 4 == a.pixel_values.nbytes


def test_float32_from_uint8_is_the_float32_jobs_bit_for_bit(batches) -> None:
    for a, c in zip(batches["FLOAT32"], batches["UINT8"], strict=True):
        ours = c.pixel_values_float32()
        assert ours.dtype == np.float32 and ours.shape == a.pixel_values.shape
        assert np.array_equal(ours.view(np.uint32), a.pixel_values.view(np.uint32)), (
            f"step {c.step}: {np.count_nonzero(ours.view(np.uint32) != a.pixel_values.view(np.uint32))}"
            " values differ"
        )


def test_bfloat16_from_uint8_is_the_bfloat16_jobs_bit_for_bit(batches) -> None:
    for b, c in zip(batches["BFLOAT16"], batches["UINT8"], strict=True):
        assert b.pixel_values.dtype == np.uint16
        assert np.array_equal(bf16_rne(c.pixel_values_float32()), b.pixel_values), f"step {c.step}"
