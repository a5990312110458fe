"""Video columns of a batch (``pixel_values_videos``, ``video_grid_thw``, ``second_per_grid_ts``):
read as views with their grids, ``mm_token_type_ids`` 2 on the video token, in the model inputs
only when the batch holds videos, and uint8 samples normalised with the video processors'
arithmetic (batch-schema.json)."""

import numpy as np
import pytest
from harness.batches import (
    IMAGE_PAD,
    PATCH_DIM,
    VIDEO_PAD,
    make_samples,
    video_reference,
    video_samples,
    write_and_read_one,
)

from stoker import BatchFormatError


def test_videos_are_read_with_their_grids_and_marked_in_mm_token_type_ids(shm_root):
    samples = video_samples()
    b = write_and_read_one(shm_root, samples)
    assert b.num_videos == 2
    np.testing.assert_array_equal(b.pixel_values_videos, samples[0]["video_patches"])
    assert not b.pixel_values_videos.flags.writeable  # a view of the file
    np.testing.assert_array_equal(b.video_grid_thw, [[2, 2, 2], [1, 2, 4]])
    assert b.second_per_grid_ts.dtype == np.float32
    np.testing.assert_array_equal(b.second_per_grid_ts, np.float32([1.0, 2.002]))
    assert b.video_token_id == VIDEO_PAD
    types = b.mm_token_type_ids
    ids = b.input_ids
    np.testing.assert_array_equal(types, np.where(ids == VIDEO_PAD, 2, ids == IMAGE_PAD))
    assert (types == 2).sum() == 4
    arrays = b.arrays()
    for name in ("pixel_values_videos", "video_grid_thw", "second_per_grid_ts"):
        assert name in arrays


def test_a_batch_without_videos_gives_no_video_inputs(shm_root):
    b = write_and_read_one(shm_root, make_samples(0, 0, 2))
    assert b.num_videos == 0
    assert b.pixel_values_videos.shape == (0, PATCH_DIM)
    assert not {"pixel_values_videos", "video_grid_thw", "second_per_grid_ts"} & set(b.arrays())


def test_uint8_video_samples_normalise_as_the_video_processor(shm_root):
    samples = video_samples(np.uint8)
    b = write_and_read_one(shm_root, samples, "uint8")
    got = b.pixel_values_videos_float32()
    assert got.dtype == np.float32
    np.testing.assert_array_equal(
        got.view(np.uint32), video_reference(samples[0]["video_patches"]).view(np.uint32)
    )


def test_video_patches_that_do_not_match_the_grids_are_refused(shm_root):
    samples = video_samples()
    samples[0]["video_grids"] = [[2, 2, 2], [1, 2, 2]]
    with pytest.raises(BatchFormatError, match="pixel_values_videos has 16 patches"):
        write_and_read_one(shm_root, samples)
