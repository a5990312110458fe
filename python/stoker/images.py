"""Turn a batch's ``pixel_values`` back into pictures: the inverse of the Qwen-VL patchify.

The job preprocesses each image as Hugging Face's ``Qwen2VLImageProcessor._preprocess`` does:
resize, rescale by 1/255, normalise per channel with ``image_mean``/``image_std``, repeat the
frame to ``temporal_patch_size`` frames, and reorder the ``(T, C, H, W)`` frames into patches::

    patches.reshape(grid_t, tps, C, grid_h // m, m, ps, grid_w // m, m, ps)
           .transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
           .reshape(grid_t * grid_h * grid_w, C * tps * ps * ps)

(``ps`` = ``patch_size``, ``tps`` = ``temporal_patch_size``, ``m`` = ``merge_size``). The
functions here undo that, for looking at batches (notebooks, debugging), never on the training
path::

    from pathlib import Path

    from stoker import Manifest, read_batch_file
    from stoker.images import split_images, unpatchify

    manifest = Manifest.load(Path("/dev/shm/stoker/my-job/manifest.json"))
    batch = read_batch_file("/dev/shm/stoker/my-job/gen-.../rank-0/step-0000000000.arrow")
    for patches, thw in zip(split_images(batch.pixel_values, batch.image_grid_thw),
                            batch.image_grid_thw):
        rgb = unpatchify(patches, thw, manifest.vision)  # (H, W, 3) uint8, H = grid_h * 14

The patch geometry and ``image_mean``/``image_std`` are the job's, from its ``manifest.json``
(:attr:`stoker.Manifest.vision`, a :class:`~stoker.protocol.VisionSettings`): what its
``stoker.model.preset`` sets, or what the job overrode.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .protocol import VisionSettings

__all__ = [
    "denormalize",
    "split_images",
    "unpatchify",
    "unpatchify_frames",
]

# axes of the patchified array after HF's transpose(0, 3, 6, 4, 7, 2, 1, 5, 8) ...
_PATCHIFY_ORDER = (0, 3, 6, 4, 7, 2, 1, 5, 8)
# ... and the transpose that undoes it
_UNPATCHIFY_ORDER = tuple(int(i) for i in np.argsort(_PATCHIFY_ORDER))


def split_images(pixel_values: npt.ArrayLike, image_grid_thw: npt.ArrayLike) -> list[np.ndarray]:
    """Split a batch's concatenated patches into one ``(t*h*w, D)`` array per image.

    Args:
        pixel_values: ``(P, D)`` patches of all images of the batch, in row order
            (``Batch.pixel_values``).
        image_grid_thw: ``(I, 3)`` integer ``(grid_t, grid_h, grid_w)`` per image
            (``Batch.image_grid_thw``).

    Returns:
        ``I`` arrays; each a view of ``pixel_values`` (no copy when it is a numpy array).

    Raises:
        ValueError: ``pixel_values`` is not 2-D, ``image_grid_thw`` is not ``(I, 3)`` with
            positive entries, or the grids do not add up to ``P`` patches.
    """
    pv = np.asarray(pixel_values)
    grids = np.asarray(image_grid_thw)
    if pv.ndim != 2:
        raise ValueError(f"pixel_values must be (P, D), got shape {pv.shape}")
    if grids.ndim != 2 or grids.shape[1] != 3:
        raise ValueError(f"image_grid_thw must be (I, 3), got shape {grids.shape}")
    if grids.size and (not np.issubdtype(grids.dtype, np.integer) or grids.min() < 1):
        raise ValueError(f"image_grid_thw must hold positive integers: {grids.tolist()}")
    counts = [int(t * h * w) for t, h, w in grids.tolist()]
    if sum(counts) != pv.shape[0]:
        raise ValueError(
            f"image_grid_thw implies {sum(counts)} patches ({grids.tolist()}), "
            f"pixel_values has {pv.shape[0]}"
        )
    out = []
    start = 0
    for n in counts:
        out.append(pv[start : start + n])
        start += n
    return out


def _grid(grid_thw: npt.ArrayLike) -> tuple[int, int, int]:
    g = np.asarray(grid_thw)
    if g.shape != (3,) or not np.issubdtype(g.dtype, np.integer):
        raise ValueError(f"grid_thw must be 3 integers (grid_t, grid_h, grid_w), got {g!r}")
    t, h, w = (int(x) for x in g)
    if min(t, h, w) < 1:
        raise ValueError(f"grid_thw must be positive, got {(t, h, w)}")
    return t, h, w


def unpatchify_frames(
    pixel_values: npt.ArrayLike,
    grid_thw: npt.ArrayLike,
    vision: VisionSettings,
) -> np.ndarray:
    """Undo the patch reorder of one image: patches back to normalised frames.

    The exact inverse of the reorder in the module docstring; values are not changed.

    Args:
        pixel_values: ``(t*h*w, channels * temporal_patch_size * patch_size**2)`` patches of
            one image (e.g. an item of :func:`split_images`), any float dtype.
        grid_thw: ``(grid_t, grid_h, grid_w)`` of that image, in patches.
        vision: the job's patch geometry (``manifest.vision``): ``patch_size``,
            ``temporal_patch_size``, ``merge_size``; one channel per ``image_mean`` value.

    Returns:
        float32 ``(grid_t * temporal_patch_size, grid_h * patch_size, grid_w * patch_size,
        channels)``: frames in height-width-channel order, still normalised. A still image has
        ``grid_t = 1`` and its frames are identical copies.

    Raises:
        ValueError: a shape that does not fit the geometry: ``pixel_values`` not 2-D or not
            ``t*h*w`` rows, ``D`` not ``channels * temporal_patch_size * patch_size**2``,
            ``grid_h`` or ``grid_w`` not a multiple of ``merge_size``, or a ``grid_thw`` that is
            not 3 positive integers.
    """
    pv = np.asarray(pixel_values)
    t, h, w = _grid(grid_thw)
    if pv.ndim != 2:
        raise ValueError(f"pixel_values must be (patches, D), got shape {pv.shape}")
    d = pv.shape[1]
    ps, tps, m = vision.patch_size, vision.temporal_patch_size, vision.merge_size
    c = len(vision.image_mean)
    if min(ps, tps, m, c) < 1:
        raise ValueError(
            f"patch_size, temporal_patch_size, merge_size and channels must be >= 1, got "
            f"{ps}, {tps}, {m}, {c}"
        )
    if c * tps * ps * ps != d:
        raise ValueError(
            f"pixel_values has D = {d} values per patch, expected channels x "
            f"temporal_patch_size x patch_size**2 = {c} x {tps} x {ps}**2 = {c * tps * ps * ps}"
        )
    if pv.shape[0] != t * h * w:
        raise ValueError(
            f"pixel_values has {pv.shape[0]} patches, grid_thw {(t, h, w)} implies {t * h * w}"
        )
    if h % m or w % m:
        raise ValueError(f"grid_h and grid_w of {(t, h, w)} must be multiples of merge_size {m}")
    x = pv.reshape(t, h // m, w // m, m, m, c, tps, ps, ps).transpose(_UNPATCHIFY_ORDER)
    # (t, tps, c, h/m, m, ps, w/m, m, ps) -> (t * tps, c, H, W) -> (t * tps, H, W, c)
    frames = x.reshape(t * tps, c, h * ps, w * ps).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(frames, dtype=np.float32)


def denormalize(
    frames: npt.ArrayLike,
    image_mean: Sequence[float],
    image_std: Sequence[float],
) -> np.ndarray:
    """Undo the normalisation: ``round((x * std + mean) * 255)``, clipped to ``0..255``.

    Args:
        frames: ``(..., C)`` normalised values, channels last (output of
            :func:`unpatchify_frames`).
        image_mean, image_std: the ``C`` per-channel values the job normalised with, on the
            0..1 scale (``manifest.vision.image_mean`` / ``image_std``).

    Returns:
        uint8 array of the same shape. For values the job computed from 8-bit pixels this gives
        back those pixels exactly.

    Raises:
        ValueError: ``image_mean``/``image_std`` do not have one value per channel, or a std
            is not positive.
    """
    x = np.asarray(frames, dtype=np.float64)
    mean = np.asarray(image_mean, dtype=np.float64)
    std = np.asarray(image_std, dtype=np.float64)
    if x.ndim < 1 or mean.shape != (x.shape[-1],) or std.shape != (x.shape[-1],):
        raise ValueError(
            f"need one image_mean and image_std value per channel: frames {x.shape}, "
            f"mean {mean.shape}, std {std.shape}"
        )
    if np.any(std <= 0):
        raise ValueError(f"image_std must be positive, got {std.tolist()}")
    return np.clip(np.rint((x * std + mean) * 255.0), 0, 255).astype(np.uint8)


def unpatchify(
    pixel_values: npt.ArrayLike,
    grid_thw: npt.ArrayLike,
    vision: VisionSettings,
    *,
    frame: int = 0,
) -> np.ndarray:
    """One image's patches back to an RGB picture, as the job saw it after resizing.

    :func:`unpatchify_frames` then :func:`denormalize`, keeping one frame.

    Args:
        pixel_values: ``(t*h*w, D)`` patches of one image (an item of :func:`split_images`).
        grid_thw: ``(grid_t, grid_h, grid_w)`` of that image (a row of ``image_grid_thw``).
        vision: the job's vision settings (``manifest.vision``): the patch geometry, as in
            :func:`unpatchify_frames`, and the normalisation ``image_mean``/``image_std``.
        frame: which of the ``grid_t * temporal_patch_size`` frames (a still image's are all
            the same).

    Returns:
        uint8 ``(grid_h * patch_size, grid_w * patch_size, 3)``, RGB.

    Raises:
        ValueError: as :func:`unpatchify_frames` and :func:`denormalize`, or ``frame`` out of
            range.
    """
    frames = unpatchify_frames(pixel_values, grid_thw, vision)
    if not 0 <= frame < frames.shape[0]:
        raise ValueError(f"frame {frame} out of range: the image has {frames.shape[0]} frames")
    return denormalize(frames[frame], vision.image_mean, vision.image_std)
