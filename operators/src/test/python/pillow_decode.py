#!/usr/bin/env python3
"""Pillow's decoded RGB, the reference of Stoker's differential decode test.

    python pillow_decode.py OUTDIR SHARED_DATA

Run by ``PillowDifferentialDecodeTest`` (operators) with the dev venv (Pillow 12.0.0, numpy).
Writes encoded images and, for each, the RGB that a user of the Hugging Face processor gets from
it: ``PIL.Image.open`` (first frame of an animation), ``ImageOps.exif_transpose`` and
transformers' ``convert_to_rgb`` (RGB as is; anything else ``convert("RGBA")``, alpha-composited
over opaque white with ``Image.alpha_composite``, then ``convert("RGB")``).

``OUTDIR/manifest.jsonl`` has one JSON object per image: ``group``, ``name``, ``file`` (the
encoded file), ``rgb`` (raw interleaved uint8 RGB, row-major, ``height * width * 3`` bytes),
``width``, ``height``, ``bits`` (16 for a 16-bit PNG, else 8) and ``reference``: ``pillow`` (the
conversion above), ``16-bit rule`` (see ``16bit``) or ``pillow high byte`` (a 16-bit colour PNG,
see ``16bit``). Groups:

* ``webp``: WebP written here by Pillow's libwebp: lossy at every ``method`` 0-6 and several
  qualities, odd sizes, lossy with alpha, lossless, animated (first frame) and animations whose
  first frame is smaller than the canvas at an offset, with and without the canvas alpha flag.
* ``shared``: every file under ``SHARED_DATA`` (``shared/data``) that Pillow opens (datasets and
  bad inputs; JSON, JSONL, Markdown and the tokenizer skipped).
* ``sample``: every image of ``scripts/make_sample_dataset.py`` (48 records, seed 0).
* ``16bit``: PNGs with known 16-bit samples (grey ramp, constant dark grey, grey+alpha, RGB,
  RGBA), written here byte by byte. Their reference is Stoker's deliberate rule, not Pillow's
  conversion: each 16-bit sample ``v`` becomes ``round(v / 257)`` (numpy), then Pillow composites
  the 8-bit image as above. ``shared`` 16-bit grey PNGs (Pillow mode ``I;16``, which Pillow's
  ``convert`` clips to 255) get the same rule from Pillow's own 16-bit array, tRNS included;
  16-bit colour PNGs keep Pillow's reference, its high byte ``v >> 8``, which is within one
  level of ``round(v / 257)``.
"""

from __future__ import annotations

import io
import json
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

REPO = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO / "scripts"))
import make_sample_dataset  # noqa: E402

METHODS = range(7)
QUALITIES = (5, 50, 80, 100)
SKIPPED_SUFFIXES = (".json", ".jsonl", ".md")


def to_rgb(image: Image.Image) -> Image.Image:
    """transformers' ``image_transforms.convert_to_rgb``."""
    if image.mode == "RGB":
        return image
    rgba = image.convert("RGBA")
    background = Image.new("RGBA", rgba.size, (255, 255, 255))
    return Image.alpha_composite(background, rgba).convert("RGB")


def reference(image: Image.Image) -> np.ndarray:
    """Open (first frame) + exif_transpose + convert_to_rgb, as (H, W, 3) uint8."""
    transposed = ImageOps.exif_transpose(image)
    rgb = to_rgb(transposed if transposed is not None else image)
    out = np.asarray(rgb, dtype=np.uint8)
    assert out.ndim == 3 and out.shape[2] == 3, out.shape
    return out


def scaled16(samples: np.ndarray) -> np.ndarray:
    """Stoker's 16-to-8-bit rule: round(v / 257) (ties do not occur: v / 257 is never k + 0.5)."""
    return np.round(samples.astype(np.float64) / 257.0).astype(np.uint8)


class Writer:
    def __init__(self, outdir: Path) -> None:
        self.outdir = outdir
        self.manifest = (outdir / "manifest.jsonl").open("w", encoding="utf-8")
        self.count = 0

    def add(
        self,
        group: str,
        name: str,
        file: Path,
        rgb: np.ndarray,
        bits: int = 8,
        reference: str = "pillow",
    ) -> None:
        raw = self.outdir / "rgb" / f"{self.count:05d}.rgb"
        raw.parent.mkdir(parents=True, exist_ok=True)
        raw.write_bytes(np.ascontiguousarray(rgb, dtype=np.uint8).tobytes())
        self.count += 1
        entry = {
            "group": group,
            "name": name,
            "file": str(file),
            "rgb": str(raw),
            "width": int(rgb.shape[1]),
            "height": int(rgb.shape[0]),
            "bits": bits,
            "reference": reference,
        }
        self.manifest.write(json.dumps(entry) + "\n")

    def encoded(self, group: str, name: str, data: bytes) -> Path:
        path = self.outdir / group / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path

    def add_pillow(self, group: str, name: str, data: bytes) -> None:
        path = self.encoded(group, name, data)
        with Image.open(path) as image:
            self.add(group, name, path, reference(image))


def base_image(width: int, height: int, seed: int) -> Image.Image:
    image, _, _ = make_sample_dataset.make_image(np.random.default_rng(seed), width, height)
    return image


def with_alpha(image: Image.Image) -> Image.Image:
    """RGBA: a diagonal alpha ramp 0-255 with a fully transparent and a fully opaque band."""
    w, h = image.size
    yy, xx = np.mgrid[0:h, 0:w]
    alpha = (255 * (xx + yy) / max(w + h - 2, 1)).astype(np.uint8)
    alpha[: h // 6] = 0
    alpha[-(h // 6) :] = 255
    rgba = image.convert("RGBA")
    rgba.putalpha(Image.fromarray(alpha, "L"))
    return rgba


def webp_bytes(image: Image.Image, **options: object) -> bytes:
    buf = io.BytesIO()
    image.save(buf, "WEBP", **options)
    return buf.getvalue()


def riff_chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """(fourcc, payload) of a RIFF/WEBP file's top-level chunks."""
    assert data[:4] == b"RIFF" and data[8:12] == b"WEBP"
    chunks, pos = [], 12
    while pos + 8 <= len(data):
        fourcc, size = data[pos : pos + 4], struct.unpack("<I", data[pos + 4 : pos + 8])[0]
        chunks.append((fourcc, data[pos + 8 : pos + 8 + size]))
        pos += 8 + size + (size & 1)
    return chunks


def chunk(fourcc: bytes, payload: bytes) -> bytes:
    return fourcc + struct.pack("<I", len(payload)) + payload + b"\0" * (len(payload) & 1)


def u24(v: int) -> bytes:
    return struct.pack("<I", v)[:3]


def offset_animation(frame: bytes, canvas: tuple[int, int], offset: tuple[int, int], alpha: bool):
    """An animated WebP (container per the WebP RIFF spec) of two frames whose first frame is
    ``frame``'s image bitstream (ALPH + VP8, or VP8L) at ``offset`` (even) on a larger canvas."""
    frame_chunks = b"".join(
        chunk(f, p) for f, p in riff_chunks(frame) if f in (b"ALPH", b"VP8 ", b"VP8L")
    )
    with Image.open(io.BytesIO(frame)) as im:
        fw, fh = im.size
    cw, ch = canvas
    flags = 0x02 | (0x10 if alpha else 0)  # ANIMATION, ALPHA
    vp8x = bytes([flags, 0, 0, 0]) + u24(cw - 1) + u24(ch - 1)
    anim = struct.pack("<I", 0xFF336699) + struct.pack("<H", 0)  # background colour, loop
    frames = b""
    for x, y in (offset, (0, 0)):
        header = u24(x // 2) + u24(y // 2) + u24(fw - 1) + u24(fh - 1) + u24(100) + bytes([0])
        frames += chunk(b"ANMF", header + frame_chunks)
    body = b"WEBP" + chunk(b"VP8X", vp8x) + chunk(b"ANIM", anim) + frames
    return b"RIFF" + struct.pack("<I", len(body)) + body


def webp_variants(w: Writer) -> None:
    for size, seed in (((160, 120), 1), ((97, 61), 2)):
        base = base_image(*size, seed)
        rgba = with_alpha(base)
        tag = f"{size[0]}x{size[1]}"
        for method in METHODS:
            for quality in QUALITIES:
                data = webp_bytes(base, quality=quality, method=method)
                w.add_pillow("webp", f"lossy_{tag}_m{method}_q{quality}.webp", data)
            data = webp_bytes(rgba, quality=80, method=method)
            w.add_pillow("webp", f"alpha_{tag}_m{method}_q80.webp", data)
            data = webp_bytes(rgba, quality=50, method=method, alpha_quality=40)
            w.add_pillow("webp", f"alpha_{tag}_m{method}_q50_aq40.webp", data)
        for method in (0, 6):
            w.add_pillow(
                "webp",
                f"lossless_{tag}_m{method}.webp",
                webp_bytes(base, lossless=True, method=method),
            )
            data = webp_bytes(rgba, lossless=True, method=method)
            w.add_pillow("webp", f"lossless_alpha_{tag}_m{method}.webp", data)
        frames = [
            base,
            base.rotate(90, expand=False),
            base.transpose(Image.Transpose.FLIP_TOP_BOTTOM),
        ]
        for method in (0, 4, 6):
            for name, seq in (("rgb", frames), ("rgba", [with_alpha(f) for f in frames])):
                data = webp_bytes(
                    seq[0], save_all=True, append_images=seq[1:], duration=80, method=method
                )
                w.add_pillow("webp", f"animated_{name}_{tag}_m{method}.webp", data)
        for method in (0, 6):
            for still, kind in ((base, "lossy"), (rgba, "lossy_alpha")):
                frame = webp_bytes(still, quality=70, method=method)
                for canvas_alpha in (True, False):
                    data = offset_animation(
                        frame, (size[0] + 20, size[1] + 10), (6, 4), canvas_alpha
                    )
                    name = f"offset_{kind}_{tag}_m{method}_canvas{'A' if canvas_alpha else 'X'}"
                    w.add_pillow("webp", name + ".webp", data)
            lossless = webp_bytes(rgba, lossless=True, method=method)
            data = offset_animation(lossless, (size[0] + 20, size[1] + 10), (6, 4), True)
            w.add_pillow("webp", f"offset_lossless_alpha_{tag}_m{method}.webp", data)


def shared_images(w: Writer, data_root: Path) -> None:
    for path in sorted(p for p in data_root.rglob("*") if p.is_file()):
        if path.suffix in SKIPPED_SUFFIXES or "tokenizers" in path.parts:
            continue
        name = str(path.relative_to(data_root))
        bits = png_bits(path.read_bytes())
        try:
            with Image.open(path) as image:
                image.load()
                if image.mode == "I;16":
                    rgb, rule = reference_gray16(image), "16-bit rule"
                else:
                    rgb, rule = reference(image), "pillow high byte" if bits == 16 else "pillow"
        except Exception as e:  # Pillow does not open it: not part of the differential test
            print(f"pillow_decode: skipped {name}: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        w.add("shared", name, path, rgb, bits, rule)


def reference_gray16(image: Image.Image) -> np.ndarray:
    """A 16-bit grey PNG by the 16-bit rule, from Pillow's own 16-bit samples (and tRNS)."""
    samples = np.asarray(image, dtype=np.uint16)
    grey = Image.fromarray(scaled16(samples), "L")
    transparency = image.info.get("transparency")
    if transparency is not None:
        alpha = np.where(samples == transparency, 0, 255).astype(np.uint8)
        grey = Image.merge("LA", (grey, Image.fromarray(alpha, "L")))
    transposed = ImageOps.exif_transpose(image)
    assert transposed is None or transposed.size == image.size  # no EXIF in these files
    return np.asarray(to_rgb(grey), dtype=np.uint8)


def png_bits(data: bytes) -> int:
    return data[24] if data[:8] == b"\x89PNG\r\n\x1a\n" else 8


def sample_images(w: Writer) -> None:
    outdir = w.outdir / "sample"
    make_sample_dataset.generate(outdir, records=48, seed=0)
    for path in sorted((outdir / "images").iterdir()):
        with Image.open(path) as image:
            w.add("sample", path.name, path, reference(image))


def png16(samples: np.ndarray, color_type: int) -> bytes:
    """A 16-bit PNG (filter 0 on every row) of (H, W, C) uint16 samples."""
    h, wd = samples.shape[:2]
    be = samples.astype(">u2").reshape(h, -1).tobytes()
    stride = len(be) // h
    raw = b"".join(b"\0" + be[y * stride : (y + 1) * stride] for y in range(h))
    ihdr = struct.pack(">IIBBBBB", wd, h, 16, color_type, 0, 0, 0)

    def png_chunk(kind: bytes, payload: bytes) -> bytes:
        crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)

    return (
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", ihdr)
        + png_chunk(b"IDAT", zlib.compress(raw))
        + png_chunk(b"IEND", b"")
    )


def sixteen_bit(w: Writer) -> None:
    rng = np.random.default_rng(16)
    h, wd = 48, 80
    ramp = np.linspace(0, 65535, h * wd).round().astype(np.uint16).reshape(h, wd, 1)
    dark = np.full((h, wd, 1), 3000, dtype=np.uint16)
    noise = rng.integers(0, 65536, size=(h, wd, 4), dtype=np.uint16)
    alpha = np.linspace(0, 65535, wd).round().astype(np.uint16)[None, :, None].repeat(h, 0)
    cases = {
        "gray16_ramp": (ramp, 0, "L"),
        "gray16_dark_3000": (dark, 0, "L"),
        "gray16_alpha": (np.concatenate([ramp[:, ::-1], alpha], axis=2), 4, "LA"),
        "rgb48": (noise[:, :, :3], 2, "RGB"),
        "rgba64": (np.concatenate([noise[:, :, :3], alpha], axis=2), 6, "RGBA"),
    }
    for name, (samples, color_type, mode) in cases.items():
        path = w.encoded("16bit", name + ".png", png16(samples, color_type))
        eight = scaled16(samples)
        image = Image.fromarray(eight[:, :, 0] if mode == "L" else eight, mode)
        rgb = np.asarray(to_rgb(image), dtype=np.uint8)
        w.add("16bit", name + ".png", path, rgb, 16, "16-bit rule")


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    outdir = Path(argv[1])
    outdir.mkdir(parents=True, exist_ok=True)
    data_root = Path(argv[2])
    if not data_root.is_dir():
        print(f"pillow_decode: {data_root} not found", file=sys.stderr)
        return 1
    w = Writer(outdir)
    webp_variants(w)
    sixteen_bit(w)
    shared_images(w, data_root)
    sample_images(w)
    w.manifest.close()
    print(f"pillow_decode: {w.count} images, Pillow {Image.__version__}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
