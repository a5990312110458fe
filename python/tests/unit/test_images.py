"""stoker.images: unpatchify is the exact inverse of Hugging Face's Qwen2-VL patchify."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from stoker import VisionSettings
from stoker.images import denormalize, split_images, unpatchify, unpatchify_frames

#: OpenAI CLIP mean and std (transformers' OPENAI_CLIP_MEAN / OPENAI_CLIP_STD): the Qwen2-VL and
#: Qwen2.5-VL preprocessor configs; Qwen3-VL's is 0.5 for both.
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
QWEN2_VL = VisionSettings(14, 2, 2, 1 / 255, CLIP_MEAN, CLIP_STD)
QWEN3_VL = VisionSettings(16, 2, 2, 1 / 255, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


def hf_preprocess(
    frames_u8: np.ndarray,
    *,
    patch_size: int = 14,
    temporal_patch_size: int = 2,
    merge_size: int = 2,
    image_mean=CLIP_MEAN,
    image_std=CLIP_STD,
) -> tuple[np.ndarray, tuple[int, int, int]]:
    """Reference: ``Qwen2VLImageProcessor._preprocess`` after the resize, on ``(T, H, W, 3)``
    uint8 frames whose sides are multiples of ``patch_size * merge_size``.

    Rescale and normalise in float32 (channels last, as HF's ``rescale``/``normalize``), make
    the frames channel-first, repeat the last frame up to a multiple of
    ``temporal_patch_size``, then reshape/transpose/reshape.
    """
    images = [
        ((f.astype(np.float32) * np.float32(1 / 255)) - np.asarray(image_mean, np.float32))
        / np.asarray(image_std, np.float32)
        for f in frames_u8
    ]
    patches = np.array([img.transpose(2, 0, 1) for img in images])  # (T, C, H, W)
    if patches.shape[0] % temporal_patch_size != 0:
        repeats = np.repeat(
            patches[-1][np.newaxis], temporal_patch_size - patches.shape[0] % temporal_patch_size, 0
        )
        patches = np.concatenate([patches, repeats], axis=0)
    channel = patches.shape[1]
    grid_t = patches.shape[0] // temporal_patch_size
    grid_h, grid_w = patches.shape[2] // patch_size, patches.shape[3] // patch_size
    patches = patches.reshape(
        grid_t,
        temporal_patch_size,
        channel,
        grid_h // merge_size,
        merge_size,
        patch_size,
        grid_w // merge_size,
        merge_size,
        patch_size,
    )
    patches = patches.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    flatten_patches = patches.reshape(
        grid_t * grid_h * grid_w, channel * temporal_patch_size * patch_size * patch_size
    )
    return flatten_patches, (grid_t, grid_h, grid_w)


def _image(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(h, w, 3), dtype=np.uint8)


@pytest.mark.parametrize("h, w", [(28, 28), (56, 84), (112, 28), (28 * 5, 28 * 3)])
def test_round_trip_of_a_still_image_is_exact(h: int, w: int) -> None:
    img = _image(h, w, seed=h * 1000 + w)
    pv, thw = hf_preprocess(img[np.newaxis])
    assert pv.dtype == np.float32 and pv.shape == (h * w // 196, 1176)
    assert thw == (1, h // 14, w // 14)
    out = unpatchify(pv, np.array(thw), QWEN2_VL)
    assert out.dtype == np.uint8 and out.shape == (h, w, 3)
    np.testing.assert_array_equal(out, img)


def test_every_8_bit_value_of_every_channel_comes_back() -> None:
    img = np.zeros((28, 280, 3), np.uint8)
    img.reshape(-1, 3)[:256] = np.arange(256, dtype=np.uint8)[:, None]  # 0..255 in each channel
    img.reshape(-1, 3)[256:512] = np.arange(255, -1, -1, dtype=np.uint8)[:, None]
    for preset in (QWEN2_VL, QWEN3_VL):
        vision = dataclasses.replace(preset, patch_size=14)  # the normalisation of each preset
        pv, thw = hf_preprocess(
            img[np.newaxis], image_mean=vision.image_mean, image_std=vision.image_std
        )
        out = unpatchify(pv, thw, vision)
        np.testing.assert_array_equal(out, img, err_msg=str(preset))


def test_frames_hold_the_normalised_values_in_hwc_order() -> None:
    img = _image(56, 28, seed=3)
    pv, thw = hf_preprocess(img[np.newaxis])
    frames = unpatchify_frames(pv, thw, QWEN2_VL)
    assert frames.dtype == np.float32 and frames.shape == (2, 56, 28, 3)
    expected = (img.astype(np.float32) * np.float32(1 / 255) - np.float32(CLIP_MEAN)) / np.float32(
        CLIP_STD
    )
    np.testing.assert_array_equal(frames[0], expected)
    np.testing.assert_array_equal(frames[1], frames[0])  # a still image is repeated in time


def test_several_frames_and_qwen3_geometry() -> None:
    """grid_t > 1 (three frames, padded to four) and patch_size 16 (D = 1536)."""
    clip = np.stack([_image(64, 96, seed=s) for s in range(3)])
    mean, std = QWEN3_VL.image_mean, QWEN3_VL.image_std
    pv, thw = hf_preprocess(clip, patch_size=16, image_mean=mean, image_std=std)
    assert thw == (2, 4, 6) and pv.shape[1] == 1536 == QWEN3_VL.patch_dim
    frames = unpatchify_frames(pv, thw, QWEN3_VL)
    assert frames.shape == (4, 64, 96, 3)
    got = denormalize(frames, mean, std)
    np.testing.assert_array_equal(got[:3], clip)
    np.testing.assert_array_equal(got[3], clip[2])  # HF repeats the last frame
    np.testing.assert_array_equal(unpatchify(pv, thw, QWEN3_VL, frame=1), clip[1])


def test_split_images_gives_views_per_image() -> None:
    imgs = [_image(28, 56, 1), _image(84, 28, 2), _image(28, 28, 3)]
    parts = [hf_preprocess(i[np.newaxis]) for i in imgs]
    pv = np.concatenate([p for p, _ in parts])
    grids = np.array([g for _, g in parts], dtype=np.int64)
    pieces = split_images(pv, grids)
    assert [p.shape[0] for p in pieces] == [8, 12, 4]
    for piece, g, img in zip(pieces, grids, imgs, strict=True):
        assert np.shares_memory(piece, pv)
        np.testing.assert_array_equal(unpatchify(piece, g, QWEN2_VL), img)
    assert split_images(np.zeros((0, 1176), np.float32), np.zeros((0, 3), np.int64)) == []


def test_split_images_rejects_grids_that_do_not_add_up() -> None:
    pv = np.zeros((8, 1176), np.float32)
    with pytest.raises(ValueError, match="implies 12 patches"):
        split_images(pv, np.array([[1, 2, 6]]))
    with pytest.raises(ValueError, match=r"\(I, 3\)"):
        split_images(pv, np.array([1, 2, 4]))
    with pytest.raises(ValueError, match="positive integers"):
        split_images(pv, np.array([[0, 2, 4]]))
    with pytest.raises(ValueError, match=r"\(P, D\)"):
        split_images(pv.reshape(-1), np.array([[1, 2, 4]]))


@pytest.mark.parametrize(
    "shape, thw, vision, message",
    [
        ((8, 1176), (1, 2, 2), QWEN2_VL, "implies 4"),
        ((4, 1000), (1, 2, 2), QWEN2_VL, "expected channels x"),
        ((4, 1176), (1, 2, 2), QWEN3_VL, "expected channels x"),
        ((3, 1176), (1, 1, 3), QWEN2_VL, "multiples of merge_size"),
        ((4, 1176), (1, 2), QWEN2_VL, "3 integers"),
        ((4, 1176), (1.0, 2.0, 2.0), QWEN2_VL, "3 integers"),
        ((0, 1176), (0, 2, 2), QWEN2_VL, "positive"),
        ((4,), (1, 2, 2), QWEN2_VL, "must be"),
        ((4, 1176), (1, 2, 2), dataclasses.replace(QWEN2_VL, merge_size=0), "must be >= 1"),
    ],
)
def test_unpatchify_names_what_does_not_fit(shape, thw, vision, message) -> None:
    with pytest.raises(ValueError, match=message):
        unpatchify_frames(np.zeros(shape, np.float32), np.array(thw), vision)


def test_unpatchify_rejects_a_missing_frame_and_bad_normalisation() -> None:
    pv, thw = hf_preprocess(_image(28, 28)[np.newaxis])
    with pytest.raises(ValueError, match="frame 2 out of range"):
        unpatchify(pv, thw, QWEN2_VL, frame=2)
    with pytest.raises(ValueError, match="per channel"):
        denormalize(unpatchify_frames(pv, thw, QWEN2_VL), (0.5, 0.5), CLIP_STD)
    with pytest.raises(ValueError, match="positive"):
        unpatchify(pv, thw, dataclasses.replace(QWEN2_VL, image_std=(0.5, 0.0, 0.5)))


def test_denormalize_clips_out_of_range_values() -> None:
    x = np.array([[-10.0, 0.0, 10.0]], np.float32)
    assert denormalize(x, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)).tolist() == [[0, 128, 255]]
