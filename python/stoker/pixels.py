"""Pixel values: normalising a uint8 batch's ``pixel_values`` as the Java sink does, and
widening bfloat16 bits to float32.

A job with ``stoker.image.pixel-dtype: UINT8`` writes the resized uint8 samples; these functions
compute the float32 values a FLOAT32 job writes from them, bit for bit (batch-schema.json,
``pixel_values``), with numpy or with torch on any device.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .protocol import VisionSettings

__all__ = ["bfloat16_to_float32", "normalize_uint8", "normalize_uint8_torch"]


def _normalization(vision: VisionSettings, d: int) -> tuple[float, np.ndarray, np.ndarray]:
    """``(rescale_factor, mean, std)``: the factor as a float64, mean and std as float32 ``(C,)``
    (each rounded from its float64 value, as the sink's ``(float) mean[c]``)."""
    c = len(vision.image_mean)
    if len(vision.image_std) != c or c == 0 or d % c:
        raise ValueError(
            f"pixel_values rows of {d} values cannot be split into the {c} channels of "
            f"image_mean {vision.image_mean} / image_std {vision.image_std}"
        )
    mean = np.asarray(vision.image_mean, np.float64).astype(np.float32)
    std = np.asarray(vision.image_std, np.float64).astype(np.float32)
    return float(vision.rescale_factor), mean, std


def normalize_uint8(pixels: np.ndarray, vision: VisionSettings) -> np.ndarray:
    """Normalize uint8 ``pixel_values`` (a ``stoker.pixel_dtype=uint8`` batch's) with numpy.

    Value ``j`` of a row belongs to channel ``c = j // (D / C)`` (C = 3 channels), and becomes,
    in this order, each step rounded to float32 as the Java sink computes it
    (``Patchifier``: ``((float) (u * rescale_factor) - (float) mean[c]) / (float) std[c]``)::

        x = float32(float64(u) * rescale_factor)   # the product in float64, then rounded
        x = x - float32(image_mean[c])             # float32 subtraction
        x = x / float32(image_std[c])              # float32 division

    Separate IEEE operations (no fused multiply-add), so the result is bit for bit the float32
    ``pixel_values`` of a FLOAT32 job.

    Args:
        pixels: ``(P, D)`` uint8.
        vision: the job's vision settings (``Manifest.vision``): ``rescale_factor``,
            ``image_mean``, ``image_std``.

    Returns:
        A new ``(P, D)`` float32 array.

    Raises:
        ValueError: ``pixels`` is not 2-D uint8, or D is not a multiple of the channels.
    """
    u = np.asarray(pixels)
    if u.dtype != np.uint8 or u.ndim != 2:
        raise ValueError(f"pixels must be (P, D) uint8, got {u.dtype} {u.shape}")
    scale, mean, std = _normalization(vision, u.shape[1])
    c = mean.shape[0]
    x = (u.astype(np.float64) * scale).astype(np.float32)
    channels = x.reshape(u.shape[0], c, u.shape[1] // c)
    channels -= mean[None, :, None]
    channels /= std[None, :, None]
    return x


def normalize_uint8_torch(pixels: Any, vision: VisionSettings, *, dtype: Any = None) -> Any:
    """:func:`normalize_uint8` with torch, on ``pixels``' device (CPU, CUDA, ...).

    The same operations in the same order as :func:`normalize_uint8` (a float64 multiply
    rounded to float32, then a float32 subtraction and a float32 division, each its own
    kernel), so on the CPU the float32 result is bit for bit the FLOAT32 job's; ``dtype``
    ``torch.bfloat16`` then rounds it to nearest even (``Tensor.to``), as the BFLOAT16 sink
    does. Temporary memory: 8 bytes per value (the float64 product).

    Args:
        pixels: ``(P, D)`` torch.uint8 tensor.
        vision: the job's vision settings (``Manifest.vision``).
        dtype: ``torch.float32`` (default) or ``torch.bfloat16``.

    Returns:
        A new ``(P, D)`` tensor of ``dtype`` on ``pixels.device``.

    Raises:
        ValueError: ``pixels`` is not a 2-D uint8 tensor, D is not a multiple of the channels,
            or ``dtype`` is neither float32 nor bfloat16.
    """
    import torch

    dtype = torch.float32 if dtype is None else dtype
    if dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"dtype must be torch.float32 or torch.bfloat16, got {dtype!r}")
    if not isinstance(pixels, torch.Tensor) or pixels.dtype != torch.uint8 or pixels.dim() != 2:
        got = f"{pixels.dtype} {tuple(pixels.shape)}" if hasattr(pixels, "dtype") else type(pixels)
        raise ValueError(f"pixels must be a (P, D) torch.uint8 tensor, got {got}")
    p, d = pixels.shape
    scale, mean, std = _normalization(vision, d)
    c = mean.shape[0]
    x = pixels.to(torch.float64).mul_(scale).to(torch.float32)
    channels = x.view(p, c, d // c)
    channels.sub_(torch.from_numpy(mean).to(pixels.device).view(1, c, 1))
    channels.div_(torch.from_numpy(std).to(pixels.device).view(1, c, 1))
    return x if dtype == torch.float32 else x.to(dtype)


def _video_normalization(vision: VisionSettings, d: int) -> tuple[np.ndarray, np.ndarray]:
    """``(m, s)`` float32 ``(C,)``: the Hugging Face video processors' fused mean and std,
    ``float32(mean) * float32(1 / rescale_factor)`` (and the same for std), a float32 product."""
    scale, mean, std = _normalization(vision, d)
    inv = np.float32(1.0 / scale)
    return mean * inv, std * inv


def normalize_uint8_video(pixels: np.ndarray, vision: VisionSettings) -> np.ndarray:
    """``(PV, D)`` uint8 video samples (``Batch.pixel_values_videos`` of a uint8 batch) to the
    float32 values a FLOAT32 job writes, bit for bit: the video processors' arithmetic
    (transformers 5.23.0 ``TorchvisionBackend`` fused ``rescale_and_normalize``), which differs
    from :func:`normalize_uint8`'s::

        x = (float32(u) - m[c]) / s[c]    # float32; m, s from _video_normalization

    Raises:
        ValueError: ``pixels`` is not 2-D uint8, or D is not a multiple of the channels.
    """
    u = np.asarray(pixels)
    if u.dtype != np.uint8 or u.ndim != 2:
        raise ValueError(f"pixels must be (P, D) uint8, got {u.dtype} {u.shape}")
    m, s = _video_normalization(vision, u.shape[1])
    c = m.shape[0]
    x = u.astype(np.float32)
    channels = x.reshape(u.shape[0], c, u.shape[1] // c)
    channels -= m[None, :, None]
    channels /= s[None, :, None]
    return x


def normalize_uint8_video_torch(pixels: Any, vision: VisionSettings, *, dtype: Any = None) -> Any:
    """:func:`normalize_uint8_video` with torch on ``pixels``' device; ``dtype``
    ``torch.bfloat16`` rounds the float32 result to nearest even.

    Raises:
        ValueError: ``pixels`` is not a 2-D uint8 tensor, or ``dtype`` is neither float32 nor
            bfloat16.
    """
    import torch

    dtype = torch.float32 if dtype is None else dtype
    if dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"dtype must be torch.float32 or torch.bfloat16, got {dtype!r}")
    if not isinstance(pixels, torch.Tensor) or pixels.dtype != torch.uint8 or pixels.dim() != 2:
        got = f"{pixels.dtype} {tuple(pixels.shape)}" if hasattr(pixels, "dtype") else type(pixels)
        raise ValueError(f"pixels must be a (P, D) torch.uint8 tensor, got {got}")
    p, d = pixels.shape
    m, s = _video_normalization(vision, d)
    c = m.shape[0]
    x = pixels.to(torch.float32)
    channels = x.view(p, c, d // c)
    channels.sub_(torch.from_numpy(m).to(pixels.device).view(1, c, 1))
    channels.div_(torch.from_numpy(s).to(pixels.device).view(1, c, 1))
    return x if dtype == torch.float32 else x.to(dtype)


def bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    """Widen bfloat16 values given as their uint16 bits (``Batch.pixel_values`` of a bfloat16
    batch) to float32, exactly (bfloat16 is the upper half of a float32). Returns a new array."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
