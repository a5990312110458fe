"""The Pillow + NumPy peer of Stoker's image stage, timed like TransformCeilingBench.

Hugging Face transformers' ``Qwen2VLImageProcessor`` slow path for one still image, written out
with the same libraries it uses (transformers itself is not in the project's venv): Pillow decode
and ``convert("RGB")``, ``ImageOps.exif_transpose``, ``smart_resize``, ``Image.resize(BICUBIC)``,
rescale by 1/255 and normalise with the CLIP mean/std in float32, repeat the frame to
``temporal_patch_size`` and patchify into ``(grid_h * grid_w, 1176)``.

Time is the process's CPU time (``time.process_time``), as in the Java benchmark, with wall time
beside it. Usage: ``pillow_peer.py <set name> <folder> <max_pixels> <warm-up s> <repeat s> <repeats>``; prints
``RESULT set=... mode=pillow threads=1 ...`` lines in the Java benchmark's format.
"""

from __future__ import annotations

import io
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

PATCH, TEMPORAL, MERGE = 14, 2, 2
FACTOR = PATCH * MERGE
MIN_PIXELS = 56 * 56
MAX_PIXELS = 28 * 28 * 16384  # the preset default; main() sets the benchmark's value
MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)


def smart_resize(height: int, width: int) -> tuple[int, int]:
    """transformers' ``smart_resize`` (Qwen2-VL) for ``MIN_PIXELS`` / ``MAX_PIXELS``."""
    h_bar = round(height / FACTOR) * FACTOR
    w_bar = round(width / FACTOR) * FACTOR
    if h_bar * w_bar > MAX_PIXELS:
        beta = math.sqrt((height * width) / MAX_PIXELS)
        h_bar = max(FACTOR, math.floor(height / beta / FACTOR) * FACTOR)
        w_bar = max(FACTOR, math.floor(width / beta / FACTOR) * FACTOR)
    elif h_bar * w_bar < MIN_PIXELS:
        beta = math.sqrt(MIN_PIXELS / (height * width))
        h_bar = math.ceil(height * beta / FACTOR) * FACTOR
        w_bar = math.ceil(width * beta / FACTOR) * FACTOR
    return h_bar, w_bar


def preprocess(data: bytes) -> np.ndarray:
    img = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB")
    h, w = smart_resize(img.height, img.width)
    img = img.resize((w, h), Image.Resampling.BICUBIC)
    pixels = np.asarray(img, dtype=np.float32) * np.float32(1 / 255)
    pixels = (pixels - MEAN) / STD
    patches = np.tile(pixels.transpose(2, 0, 1)[None], (TEMPORAL, 1, 1, 1))
    gh, gw = h // PATCH, w // PATCH
    patches = patches.reshape(1, TEMPORAL, 3, gh // MERGE, MERGE, PATCH, gw // MERGE, MERGE, PATCH)
    patches = patches.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return patches.reshape(gh * gw, 3 * TEMPORAL * PATCH * PATCH)


def main() -> None:
    global MAX_PIXELS
    set_name, folder, MAX_PIXELS = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    warmup, repeat_s, repeats = float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
    images = [p.read_bytes() for p in sorted(folder.iterdir())]
    src = out = 0
    for data in images:
        img = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
        src += img.width * img.height
        h, w = smart_resize(img.height, img.width)
        out += h * w
    ms, wall = [], []
    for phase in range(-1, repeats):
        seconds = warmup if phase < 0 else repeat_s
        done = 0
        start, cpu_start = time.perf_counter(), time.process_time()
        while time.perf_counter() - start < seconds:
            for data in images:
                preprocess(data)
            done += len(images)
        if phase >= 0:
            ms.append((time.process_time() - cpu_start) * 1000 / done)
            wall.append((time.perf_counter() - start) * 1000 / done)
    median = statistics.median(ms)
    per_s = 1000 / median
    n = len(images)
    print(
        f"RESULT set={set_name} mode=pillow threads=1 ms_per_img={median:.3f} min_ms={min(ms):.3f}"
        f" wall_ms={statistics.median(wall):.3f} img_s={per_s:.2f} src_mp_s={per_s * src / n / 1e6:.1f}"
        f" out_mp_s={per_s * out / n / 1e6:.1f} spread={(max(ms) - min(ms)) / median:.2f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
