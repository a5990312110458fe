"""Build the JPEG sets of bench/transform-ceiling.sh from the photos in ../shared/data.

``hd``: each source photo centre-cropped to 16:9 and resized (Lanczos) to 1920x1080, saved at
quality 90 with 4:2:0 chroma subsampling (what cameras and the web use). ``large``: the shared
photos of 2 MP and more, as they are (1800x1200 up to 4080x3072). Deterministic: the same files
on every run.

Usage: ``make_jpeg_sets.py <shared data dir> <output dir>``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from PIL import Image

SOURCES = (
    "qwen-messages/images/photos/landmark.jpg",
    "qwen-messages/images/photos/birds.jpg",
    "qwen-messages/images/photos/origamis.jpg",
    "qwen-messages/images/screens/desktop.jpeg",
    "llava-style/images/exif/landscape_orient1.jpg",
    "llava-style/images/photos/retina.jpg",
)
LARGE = SOURCES[:4] + ("qwen-messages/images/docs/ocr_photo.jpg",)


def main() -> None:
    data, out = Path(sys.argv[1]), Path(sys.argv[2])
    hd, large = out / "hd", out / "large"
    for d in (hd, large):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    for i, rel in enumerate(SOURCES):
        img = Image.open(data / rel).convert("RGB")
        w, h = img.size
        cw, ch = (w, w * 9 // 16) if w * 9 <= h * 16 else (h * 16 // 9, h)
        box = ((w - cw) // 2, (h - ch) // 2, (w - cw) // 2 + cw, (h - ch) // 2 + ch)
        img = img.crop(box).resize((1920, 1080), Image.Resampling.LANCZOS)
        img.save(hd / f"hd_{i}.jpg", quality=90, subsampling=2)
    for i, rel in enumerate(LARGE):
        shutil.copyfile(data / rel, large / f"large_{i}{Path(rel).suffix}")


if __name__ == "__main__":
    main()
