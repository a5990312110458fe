"""The video columns through ``Batch.to_torch()`` (torch, so in this tier): tensors named as the
models take them, a bfloat16 batch's bits viewed as ``torch.bfloat16``, a uint8 batch's samples
normalised on the CPU bit for bit as the video processor (and the FLOAT32 sink) does. No job, no
model: cheap."""

import numpy as np
import torch
from harness.batches import (
    bf16_rne,
    video_reference,
    video_samples,
    write_and_read_one,
)

from stoker.torch import StokerDataset


def test_video_inputs_as_tensors(shm_root):
    t = write_and_read_one(shm_root, video_samples()).to_torch()
    assert t["pixel_values_videos"].dtype == torch.float32
    assert t["video_grid_thw"].dtype == torch.int64
    assert t["second_per_grid_ts"].dtype == torch.float32


def test_uint8_video_samples_normalise_in_torch_as_in_numpy(shm_root):
    samples = video_samples(np.uint8)
    b = write_and_read_one(shm_root, samples, "uint8")
    want = video_reference(samples[0]["video_patches"])
    t = b.to_torch()["pixel_values_videos"]
    np.testing.assert_array_equal(t.numpy().view(np.uint32), want.view(np.uint32))
    bf = b.to_torch(pixel_dtype=torch.bfloat16)["pixel_values_videos"]
    np.testing.assert_array_equal(bf.view(torch.int16).numpy().view(np.uint16), bf16_rne(want))


def test_bfloat16_video_bits_are_viewed_as_bfloat16(shm_root):
    samples = video_samples()
    bits = bf16_rne(samples[0]["video_patches"])
    samples[0]["video_patches"] = bits
    t = write_and_read_one(shm_root, samples, "bfloat16").to_torch()["pixel_values_videos"]
    assert t.dtype == torch.bfloat16
    np.testing.assert_array_equal(t.view(torch.int16).numpy().view(np.uint16), bits)


def test_stoker_dataset_normalises_deferred_uint8_videos_on_the_device(shm_root):
    """StokerDataset keeps a uint8 batch's pixels uint8 until they reach the device (here the
    CPU) and normalises the videos there with the video processor's arithmetic."""
    samples = video_samples(np.uint8)
    write_and_read_one(shm_root, samples, "uint8")
    (batch,) = list(StokerDataset(shm_root, rank=0, world_size=1, device="cpu", timeout_s=5))
    want = video_reference(samples[0]["video_patches"])
    got = batch["pixel_values_videos"]
    np.testing.assert_array_equal(got.numpy().view(np.uint32), want.view(np.uint32))


def test_a_batch_without_images_gives_no_image_inputs_and_still_normalises_its_videos(shm_root):
    """As the processors return no ``pixel_values`` for a text without images (the models run
    their vision tower on any given), and StokerDataset's deferred uint8 path still normalises
    the videos of such a batch."""
    samples = video_samples(np.uint8)
    for s in samples:
        s["grids"] = []
        s["patches"] = np.zeros((0, s["patches"].shape[1]), np.uint8)
        s["ids"] = [i for i in s["ids"] if i != 151655]
    b = write_and_read_one(shm_root, samples, "uint8")
    t = b.to_torch()
    assert "pixel_values" not in t and "image_grid_thw" not in t
    want = video_reference(samples[0]["video_patches"])
    np.testing.assert_array_equal(
        t["pixel_values_videos"].numpy().view(np.uint32), want.view(np.uint32)
    )
    (batch,) = list(StokerDataset(shm_root, rank=0, world_size=1, device="cpu", timeout_s=5))
    assert "pixel_values" not in batch
    got = batch["pixel_values_videos"]
    np.testing.assert_array_equal(got.numpy().view(np.uint32), want.view(np.uint32))
