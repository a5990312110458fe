#!/usr/bin/env python3
"""Generate the demo's default multimodal SFT dataset (deterministic, seeded).

    python scripts/make_sample_dataset.py OUTDIR [--records 48] [--seed 0] [--distinct-images K]

Writes two JSONL files and their images (paths relative to OUTDIR):

* ``OUTDIR/llava.jsonl``    LLaVA style: ``{"id", "image" | "images", "conversations": [
  {"from": "human", "value": "<image>\\n..."}, {"from": "gpt", "value": "..."}, ...]}``
* ``OUTDIR/messages.jsonl`` messages style: ``{"id", "messages": [{"role", "content": [
  {"type": "image", "image": path}, {"type": "text", "text": ...}]}]}``
* ``OUTDIR/images/img-NNNN.<ext>`` in JPEG, PNG, GIF, WebP and BMP, sizes from 64x48 up to
  1600x1200, some portrait, one very wide (1400x300); content is gradients, shapes and noise.

Records include multi-image (up to 3) and multi-turn (up to 3 turns) ones, a system prompt in a
few messages-style records and one text-only record. A JSON summary is printed on stdout.
Needs numpy and Pillow.

Every image reference is a new image, unless ``--distinct-images K``: then only the first K are
drawn and written (about 65 ms each on one core) and the later references cycle through them
(reference i uses image ``i % K``), so a large dataset (``./stoker demo``'s) is made in seconds;
every record still fetches and decodes its images, which are the same bytes as an earlier
record's. K = 70 draws each of the 14 sizes in each of the 5 formats once.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

SIZES = [
    (64, 48),
    (1600, 1200),
    (480, 640),
    (1400, 300),
    (320, 240),
    (800, 600),
    (600, 900),
    (224, 224),
    (1024, 768),
    (360, 640),
    (96, 128),
    (1280, 720),
    (500, 375),
    (300, 1000),
]
FORMATS = [("JPEG", "jpg"), ("PNG", "png"), ("GIF", "gif"), ("WEBP", "webp"), ("BMP", "bmp")]
SHAPES = ["circle", "square", "triangle", "stripes"]
COLORS = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (235, 200, 40),
    "purple": (140, 60, 170),
    "orange": (240, 130, 30),
}
SYSTEM_PROMPTS = [
    "You are a helpful assistant.",
    "You are a careful visual assistant. Answer briefly and precisely.",
]


def make_image(rng: np.random.Generator, width: int, height: int) -> tuple[Image.Image, str, str]:
    """A natural-ish RGB image: gradient background, a few shapes, mild noise.

    Returns the image, the dominant shape name and its color name (for the captions)."""
    c0 = rng.integers(0, 256, 3)
    c1 = rng.integers(0, 256, 3)
    angle = rng.uniform(0, np.pi)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    t = np.cos(angle) * xx / max(width, 1) + np.sin(angle) * yy / max(height, 1)
    t = (t - t.min()) / max(float(t.max() - t.min()), 1e-6)
    img = c0[None, None, :] * (1 - t[..., None]) + c1[None, None, :] * t[..., None]
    img += rng.normal(0, 6, size=(height, width, 1)).astype(np.float32)
    pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(pil)
    shape = SHAPES[int(rng.integers(len(SHAPES)))]
    color_name = list(COLORS)[int(rng.integers(len(COLORS)))]
    color = COLORS[color_name]
    s = min(width, height)
    for k in range(int(rng.integers(1, 4))):
        r = max(2, int(s * rng.uniform(0.1, 0.3)))
        cx, cy = (
            int(rng.integers(r, max(r + 1, width - r))),
            int(rng.integers(r, max(r + 1, height - r))),
        )
        fill = color if k == 0 else tuple(int(v) for v in rng.integers(0, 256, 3))
        if shape == "circle":
            draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
        elif shape == "square":
            draw.rectangle([cx - r, cy - r, cx + r, cy + r], fill=fill)
        elif shape == "triangle":
            draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=fill)
        else:
            for x in range(cx - r, cx + r, max(2, r // 3)):
                draw.rectangle([x, cy - r, x + max(1, r // 6), cy + r], fill=fill)
    return pil, shape, color_name


def save_image(pil: Image.Image, path: Path, fmt: str) -> None:
    if fmt == "GIF":
        pil = pil.convert("P", palette=Image.Palette.ADAPTIVE, colors=64)
        pil.save(path, fmt)
    elif fmt == "JPEG":
        pil.save(path, fmt, quality=85)
    elif fmt == "WEBP":
        pil.save(path, fmt, quality=80, method=0)
    else:
        pil.save(path, fmt)


class Generator:
    def __init__(self, outdir: Path, seed: int, distinct_images: int | None = None) -> None:
        self.outdir = outdir
        self.rng = np.random.default_rng(seed)
        self.distinct_images = distinct_images
        self.made: list[tuple[str, str, str]] = []
        self.n_refs = 0
        self.n_images = 0
        self.formats: dict[str, int] = {}
        self.sizes: list[tuple[int, int]] = []
        (outdir / "images").mkdir(parents=True, exist_ok=True)

    def image(self) -> tuple[str, str, str]:
        """Create the next image (or, past ``distinct_images``, reuse one); returns (relative
        path, shape, color)."""
        self.n_refs += 1
        if self.distinct_images is not None and self.n_images >= self.distinct_images:
            return self.made[(self.n_refs - 1) % self.distinct_images]
        i = self.n_images
        width, height = SIZES[i % len(SIZES)]
        fmt, ext = FORMATS[i % len(FORMATS)]
        pil, shape, color = make_image(self.rng, width, height)
        rel = f"images/img-{i:04d}.{ext}"
        save_image(pil, self.outdir / rel, fmt)
        self.n_images += 1
        self.formats[fmt] = self.formats.get(fmt, 0) + 1
        self.sizes.append((width, height))
        self.made.append((rel, shape, color))
        return rel, shape, color


QUESTIONS = [
    "What shape stands out in this image?",
    "Describe the picture briefly.",
    "What is the dominant color of the main shape?",
    "Is there anything round in it?",
]
FOLLOW_UPS = [
    ("How many images did you look at?", "I looked at {n} image(s)."),
    ("Is the background plain?", "No, it is a smooth color gradient with a little noise."),
    ("Summarize in three words.", "Gradient, {color}, {shape}."),
]


def plan(i: int, n: int) -> tuple[int, int]:
    """(number of images, number of turns) for the i-th record of a file with n records."""
    n_images = 1 + (i % 3 == 1) + (i % 6 == 4)  # 1, 2 or 3 images
    turns = 1 + (i % 4 == 2) + (i % 8 == 6)  # 1, 2 or 3 turns
    return n_images, turns


def answer(shape: str, color: str) -> str:
    return f"The image shows a {color} {shape} on a gradient background."


def llava_records(g: Generator, n: int) -> list[dict]:
    out = []
    for i in range(n):
        n_img, turns = plan(i, n)
        imgs = [g.image() for _ in range(n_img)]
        conv = [
            {"from": "human", "value": "<image>\n" * n_img + QUESTIONS[i % len(QUESTIONS)]},
            {"from": "gpt", "value": " ".join(answer(s, c) for _, s, c in imgs)},
        ]
        for t in range(1, turns):
            q, a = FOLLOW_UPS[(i + t) % len(FOLLOW_UPS)]
            conv += [
                {"from": "human", "value": q},
                {"from": "gpt", "value": a.format(n=n_img, shape=imgs[0][1], color=imgs[0][2])},
            ]
        rec: dict = {"id": f"llava-{i:04d}"}
        if n_img == 1:
            rec["image"] = imgs[0][0]
        else:
            rec["images"] = [p for p, _, _ in imgs]
        rec["conversations"] = conv
        out.append(rec)
    return out


def messages_records(g: Generator, n: int) -> list[dict]:
    out = []
    for i in range(n):
        n_img, turns = plan(i, n)
        if i == n // 2:
            n_img = 0  # the text-only record
        imgs = [g.image() for _ in range(n_img)]
        msgs: list[dict] = []
        if i % 5 == 0:
            msgs.append(
                {"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPTS[i % 2]}]}
            )
        if imgs:
            user = [{"type": "image", "image": p} for p, _, _ in imgs]
            user.append({"type": "text", "text": QUESTIONS[i % len(QUESTIONS)]})
            reply = " ".join(answer(s, c) for _, s, c in imgs)
        else:
            user = [{"type": "text", "text": "Name three primary colors."}]
            reply = "Red, yellow and blue."
        msgs += [
            {"role": "user", "content": user},
            {"role": "assistant", "content": [{"type": "text", "text": reply}]},
        ]
        for t in range(1, turns):
            q, a = FOLLOW_UPS[(i + t) % len(FOLLOW_UPS)]
            shape, color = (imgs[0][1], imgs[0][2]) if imgs else ("none", "none")
            msgs += [
                {"role": "user", "content": [{"type": "text", "text": q}]},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": a.format(n=n_img, shape=shape, color=color)}
                    ],
                },
            ]
        out.append({"id": f"msg-{i:04d}", "messages": msgs})
    return out


def write_jsonl(path: Path, records: list[dict]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def generate(
    outdir: Path, records: int = 48, seed: int = 0, distinct_images: int | None = None
) -> dict:
    """Generate the dataset into ``outdir``; returns the summary printed by the CLI
    (``images``: image files written, ``image_refs``: image references in the records)."""
    if records < 2:
        raise ValueError("--records must be >= 2 (one record per file at least)")
    if distinct_images is not None and distinct_images < 1:
        raise ValueError("--distinct-images must be >= 1")
    outdir.mkdir(parents=True, exist_ok=True)
    g = Generator(outdir, seed, distinct_images)
    n_llava = records // 2
    llava = llava_records(g, n_llava)
    msgs = messages_records(g, records - n_llava)
    write_jsonl(outdir / "llava.jsonl", llava)
    write_jsonl(outdir / "messages.jsonl", msgs)
    return {
        "outdir": str(outdir),
        "files": {"llava.jsonl": len(llava), "messages.jsonl": len(msgs)},
        "records": len(llava) + len(msgs),
        "images": g.n_images,
        "image_refs": g.n_refs,
        "formats": dict(sorted(g.formats.items())),
        "min_size": list(min(g.sizes, key=lambda s: s[0] * s[1])),
        "max_size": list(max(g.sizes, key=lambda s: s[0] * s[1])),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("outdir", type=Path, help="output directory (created if missing)")
    p.add_argument(
        "--records", type=int, default=48, help="total records over both files (default 48)"
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument(
        "--distinct-images",
        type=int,
        default=None,
        metavar="K",
        help="draw at most K images; later references reuse them in turn (default: all new)",
    )
    args = p.parse_args(argv)
    try:
        summary = generate(args.outdir, args.records, args.seed, args.distinct_images)
    except ValueError as e:
        p.error(str(e))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
