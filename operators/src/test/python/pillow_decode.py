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
* ``colourkey``: PNGs with a ``tRNS`` colour key, RGB and grey, 8 and 16 bits. Reference
  ``stoker rule`` for RGB: key-coloured pixels white (transformers' ``convert_to_rgb`` leaves
  them in the key colour; the script checks that it still does).
* ``formats``: TIFF, PSD, ICO, TGA, PNM, PCX, QOI and JPEG 2000 variants (written here by
  Pillow, or byte by byte where Pillow cannot write them: PSD, plain and 16-bit PNM, an ICO with
  two depths at one size), reference ``pillow``; where Stoker
  deliberately differs, ``stoker rule`` (PNM maxval above 255: ``round(v * 255 / maxval)``; a
  PSD merged image with alpha, which Photoshop stores matted over white: the layer's composite).
* ``rejected``: files of formats (and variants) Stoker recognises but does not decode (AVIF,
  HEIC, JPEG XL, CUR, TGA grey+alpha and 1-bit, SGI, ICNS, DDS, XBM, XPM, EPS, MSP, BLP, Sun
  raster, FITS, PFM, PDF, SVG); ``reference`` is the start of the reason that must name it,
  ``rgb`` is empty.
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


def png16(samples: np.ndarray, color_type: int, trns: bytes = b"") -> bytes:
    """A 16-bit PNG (filter 0 on every row) of (H, W, C) uint16 samples, with a ``tRNS`` chunk
    of payload ``trns`` when given."""
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
        + (png_chunk(b"tRNS", trns) if trns else b"")
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


def saved(image: Image.Image, fmt: str, **options: object) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt, **options)
    return buf.getvalue()


def psd(channels: np.ndarray, mode: int, rle: bool) -> bytes:
    """A Photoshop file (version 1, no layers) whose merged image is ``channels`` (C, H, W) uint8,
    colour mode ``mode`` (1 grey, 3 RGB, 4 CMYK, stored inverted as Photoshop stores it), raw or
    PackBits-compressed per row (one literal run per 128 bytes)."""
    c, h, wd = channels.shape
    header = b"8BPS" + struct.pack(">H6xHIIHH", 1, c, h, wd, 8, mode)
    sections = struct.pack(">III", 0, 0, 0)  # colour mode data, image resources, layers
    if not rle:
        return header + sections + struct.pack(">H", 0) + channels.tobytes()
    rows = []
    for plane in channels:
        for row in plane:
            packed = b"".join(
                bytes([len(row[i : i + 128]) - 1]) + row[i : i + 128].tobytes()
                for i in range(0, wd, 128)
            )
            rows.append(packed)
    counts = b"".join(struct.pack(">H", len(r)) for r in rows)
    return header + sections + struct.pack(">H", 1) + counts + b"".join(rows)


def plain_pnm(magic: str, samples: np.ndarray, maxval: int) -> bytes:
    """A plain (ASCII) Netpbm file: P1 (1 = black), P2 grey or P3 RGB with ``maxval``."""
    h, wd = samples.shape[:2]
    head = f"{magic}\n# written by pillow_decode.py\n{wd} {h}\n"
    if magic != "P1":
        head += f"{maxval}\n"
    body = "\n".join(" ".join(str(int(v)) for v in row.reshape(-1)) for row in samples)
    return (head + body + "\n").encode("ascii")


def raw_pnm(magic: str, samples: np.ndarray, maxval: int) -> bytes:
    """A raw Netpbm file, P5 grey or P6 RGB, two bytes big-endian per sample above 255."""
    h, wd = samples.shape[:2]
    dtype = ">u2" if maxval > 255 else "u1"
    return f"{magic}\n{wd} {h}\n{maxval}\n".encode("ascii") + samples.astype(dtype).tobytes()


def icon_file(entries: list[tuple[int, int, int, bytes]]) -> bytes:
    """An ICO file of (width, height, bit count, PNG bytes) entries, in this order."""
    directory, data = b"", b""
    offset = 6 + 16 * len(entries)
    for width, height, bits, png in entries:
        directory += struct.pack(
            "<BBBBHHII", width % 256, height % 256, 0, 0, 1, bits, len(png), offset
        )
        offset += len(png)
        data += png
    return struct.pack("<HHH", 0, 1, len(entries)) + directory + data


def ico_to_cur(ico: bytes) -> bytes:
    """The same icons as a cursor file (type 2; planes and bit count become a hotspot of 0, 0)."""
    data = bytearray(ico)
    data[2] = 2
    for i in range(struct.unpack("<H", ico[4:6])[0]):
        data[6 + 16 * i + 4 : 6 + 16 * i + 8] = b"\0\0\0\0"
    return bytes(data)


def other_formats(w: Writer) -> None:
    """Every format besides JPEG/PNG/GIF/WebP/BMP that Stoker decodes, in the variants Pillow
    writes (and hand-written PSD, plain and 16-bit PNM and ICO files), group ``formats``."""
    base = base_image(61, 43, 7)
    rgba = with_alpha(base)
    grey = base.convert("L")
    arr = np.asarray(base)
    cases: dict[str, bytes] = {}
    for compression in ("raw", "tiff_lzw", "tiff_deflate", "packbits", "jpeg"):
        cases[f"tiff_rgb_{compression}.tif"] = saved(base, "TIFF", compression=compression)
    cases["tiff_rgba_lzw.tif"] = saved(rgba, "TIFF", compression="tiff_lzw")
    cases["tiff_grey_deflate.tif"] = saved(grey, "TIFF", compression="tiff_deflate")
    cases["tiff_bilevel_group4.tif"] = saved(base.convert("1"), "TIFF", compression="group4")
    cases["tiff_palette.tif"] = saved(base.convert("P"), "TIFF")
    cases["tiff_cmyk.tif"] = saved(base.convert("CMYK"), "TIFF", compression="tiff_lzw")
    cases["tiff_big_endian.tif"] = saved(base, "TIFF", tiffinfo={}, big_endian=True)
    cases["tiff_multipage.tif"] = saved(
        base, "TIFF", save_all=True, append_images=[rgba, grey], compression="tiff_lzw"
    )
    cases["tiff_orientation6.tif"] = saved(base, "TIFF", tiffinfo={274: 6})
    gray16 = np.linspace(0, 65535, 43 * 61).round().astype(np.uint16).reshape(43, 61)
    cases["tiff_grey16.tif"] = saved(Image.fromarray(gray16), "TIFF")
    cases["ico_png_sizes.ico"] = saved(rgba.resize((48, 48)), "ICO", sizes=[(16, 16), (48, 48)])
    cases["ico_bmp_rgba.ico"] = saved(
        rgba.resize((32, 32)), "ICO", sizes=[(32, 32)], bitmap_format="bmp"
    )
    cases["ico_bmp_rgb.ico"] = saved(
        base.resize((32, 32)), "ICO", sizes=[(16, 16), (32, 32)], bitmap_format="bmp"
    )
    cases["ico_same_size_two_depths.ico"] = icon_file(
        [
            (16, 16, 32, saved(Image.new("RGBA", (16, 16), (255, 0, 0, 255)), "PNG")),
            (16, 16, 8, saved(Image.new("RGBA", (16, 16), (0, 0, 255, 255)), "PNG")),
            (8, 8, 32, saved(Image.new("RGBA", (8, 8), (0, 255, 0, 255)), "PNG")),
        ]
    )
    cases["tga_rgb.tga"] = saved(base, "TGA")
    cases["tga_rgb_top_left.tga"] = saved(base, "TGA", orientation=1)
    cases["tga_rgba_rle.tga"] = saved(rgba, "TGA", compression="tga_rle")
    cases["tga_grey_rle.tga"] = saved(grey, "TGA", compression="tga_rle")
    cases["tga_palette.tga"] = saved(base.convert("P"), "TGA")
    cases["pnm_p6.ppm"] = saved(base, "PPM")
    cases["pnm_p5.pgm"] = saved(grey, "PPM")
    cases["pnm_p4.pbm"] = saved(base.convert("1"), "PPM")
    cases["pnm_p3_plain.ppm"] = plain_pnm("P3", arr, 255)
    cases["pnm_p2_plain_max100.pgm"] = plain_pnm("P2", np.asarray(grey) * 100 // 255, 100)
    cases["pnm_p1_plain.pbm"] = plain_pnm("P1", (np.asarray(grey) < 128).astype(np.uint8), 1)
    cases["pnm_p5_max1000.pgm"] = raw_pnm(
        "P5", np.asarray(grey).astype(np.uint32) * 1000 // 255, 1000
    )
    cases["pnm_p6_max65535.ppm"] = raw_pnm("P6", arr.astype(np.uint32) * 257 + 3, 65535)
    cases["pcx_rgb.pcx"] = saved(base, "PCX")
    cases["pcx_grey.pcx"] = saved(grey, "PCX")
    cases["pcx_palette.pcx"] = saved(base.convert("P"), "PCX")
    cases["pcx_bilevel.pcx"] = saved(base.convert("1"), "PCX")
    cases["qoi_rgb.qoi"] = saved(base, "QOI")
    cases["qoi_rgba.qoi"] = saved(rgba, "QOI")
    cases["qoi_no_end_marker.qoi"] = saved(base, "QOI")[:-8]
    cases["jp2_lossless.jp2"] = saved(base, "JPEG2000")
    cases["jp2_lossy.jp2"] = saved(
        base, "JPEG2000", irreversible=True, quality_mode="rates", quality_layers=[20]
    )
    photo = base_image(256, 192, 8)
    cases["jp2_lossy_rate80_tiled.jp2"] = saved(
        photo,
        "JPEG2000",
        irreversible=True,
        quality_mode="rates",
        quality_layers=[80],
        tile_size=(128, 128),
    )
    cases["jp2_rgba.jp2"] = saved(rgba, "JPEG2000")
    cases["jp2_grey.jp2"] = saved(grey, "JPEG2000")
    cases["j2k_codestream.j2k"] = saved(base, "JPEG2000", no_jp2=True)
    planes = arr.transpose(2, 0, 1)
    alpha = np.asarray(rgba)[:, :, 3][None]
    cmyk = np.asarray(base.convert("CMYK")).transpose(2, 0, 1)
    cases["psd_rgb_raw.psd"] = psd(np.ascontiguousarray(planes), 3, rle=False)
    cases["psd_rgb_rle.psd"] = psd(np.ascontiguousarray(planes), 3, rle=True)
    matted = np.asarray(to_rgb(rgba)).transpose(2, 0, 1)  # Photoshop's merged image: over white
    cases["psd_rgba_rle.psd"] = psd(np.concatenate([matted, alpha]), 3, rle=True)
    cases["psd_grey.psd"] = psd(np.asarray(grey)[None], 1, rle=True)
    cases["psd_cmyk.psd"] = psd(np.ascontiguousarray(255 - cmyk), 4, rle=False)
    rules = {
        # Stoker's 16-bit rule, round(v * 255 / maxval), on the samples written (Pillow: mode I,
        # which its convert clips to 255)
        "pnm_p5_max1000.pgm": np.repeat(
            (np.asarray(grey).astype(np.uint32) * 1000 // 255 * 255 + 500) // 1000, 3
        ).reshape(43, 61, 3),
        # Photoshop's merged image is matted over white: un-matted and composited over white it is
        # the layer's own composite (Pillow composites the matted pixels a second time)
        "psd_rgba_rle.psd": np.asarray(to_rgb(rgba)),
    }
    for name, data in sorted(cases.items()):
        path = w.encoded("formats", name, data)
        with Image.open(path) as image:
            image.load()
            if name in rules:
                rgb, rule = rules[name], "stoker rule"
            elif image.mode == "I;16":
                rgb, rule = reference_gray16(image), "16-bit rule"
            else:
                rgb, rule = reference(image), "pillow"
        w.add("formats", name, path, rgb, reference=rule)


def rejected_formats(w: Writer) -> None:
    """Files Stoker recognises and rejects, each with the format its reason must name, group
    ``rejected`` (``rgb`` empty): AVIF, HEIC and the rarer formats Pillow opens."""
    base = base_image(40, 30, 9)
    cases = {
        "avif_8bit.avif": (saved(base, "AVIF"), "AVIF (AV1, 8-bit 4:2:0"),
        "avif_444.avif": (saved(base, "AVIF", subsampling="4:4:4"), "AVIF (AV1, 8-bit 4:4:4"),
        "heic.heic": (
            struct.pack(">I", 24) + b"ftypheic" + b"\0\0\0\0" + b"mif1heic" + b"\0" * 64,
            "HEIC",
        ),
        "jpeg_xl.jxl": (b"\xff\x0a" + b"\0" * 64, "JPEG XL"),
        "sgi.sgi": (saved(base, "SGI"), "SGI"),
        "dds.dds": (saved(base.convert("RGBA"), "DDS"), "DDS"),
        "xbm.xbm": (saved(base.convert("1"), "XBM"), "XBM"),
        "msp.msp": (saved(base.convert("1"), "MSP"), "MSP"),
        "blp.blp": (saved(base.convert("P"), "BLP"), "BLP"),
        "pfm.pfm": (b"Pf\n40 30\n-1.0\n" + np.zeros(40 * 30, "<f4").tobytes(), "PFM"),
        "pdf.pdf": (b"%PDF-1.7\n" + b"\0" * 64, "PDF"),
        "cursor.cur": (
            ico_to_cur(saved(with_alpha(base).resize((32, 32)), "ICO", bitmap_format="bmp")),
            "CUR",
        ),
        "tga_grey_alpha.tga": (saved(base.convert("LA"), "TGA"), "TGA (grey with alpha"),
        "tga_1bit.tga": (saved(base.convert("1"), "TGA"), "TGA (1 bit"),
        "eps.eps": (saved(base, "EPS"), "EPS"),
        "icns.icns": (saved(base.resize((32, 32)), "ICNS"), "ICNS"),
        "xpm.xpm": (b'/* XPM */\nstatic char *x[] = {\n"1 1 1 1",\n"a c #ff0000",\n"a"};\n', "XPM"),
        "sun.ras": (
            struct.pack(">8I", 0x59A66A95, 1, 1, 24, 3, 1, 0, 0) + b"\0\0\0\0",
            "Sun raster",
        ),
        "fits.fits": (b"SIMPLE  =                    T" + b" " * 50 + b"END" + b" " * 77, "FITS"),
        "svg_bom_doctype.svg": (
            b'\xef\xbb\xbf<!DOCTYPE svg>\n<svg xmlns="http://www.w3.org/2000/svg"/>',
            "SVG",
        ),
        "svg.svg": (b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"/>', "SVG"),
    }
    for name, (data, expected) in sorted(cases.items()):
        path = w.encoded("rejected", name, data)
        w.add("rejected", name, path, np.zeros((0, 0, 3), np.uint8), reference=expected)


def colour_key(w: Writer) -> None:
    """PNGs whose ``tRNS`` chunk names one colour transparent (a colour key), group ``colourkey``:
    RGB and grey, 8 and 16 bits. Stoker's rule: key-coloured pixels are transparent and become
    white, as every other kind of PNG transparency does. transformers' ``convert_to_rgb`` agrees
    for grey (Pillow mode ``L``/``I;16``, converted through RGBA) but returns a mode ``RGB`` image
    unchanged, key colour and all; this function checks that it does, so the deviation is real."""
    base = np.asarray(base_image(64, 40, 11))
    key = (17, 200, 33)
    rgb = base.copy()
    rgb[8:20, 10:40] = key
    rgb[30:, ::3] = key
    keyed = np.all(rgb == key, axis=2)
    expected = rgb.copy()
    expected[keyed] = 255
    data = saved(Image.fromarray(rgb, "RGB"), "PNG", transparency=key)
    path = w.encoded("colourkey", "rgb8_trns.png", data)
    with Image.open(path) as image:
        assert image.mode == "RGB" and image.info["transparency"] == key, image.info
        hf = np.asarray(to_rgb(image))
        assert np.array_equal(hf, rgb), "convert_to_rgb no longer ignores an RGB colour key"
        assert np.array_equal(reference(image.convert("RGBA")), expected)
    w.add("colourkey", "rgb8_trns.png", path, expected, reference="stoker rule")

    rgb16 = rgb.astype(np.uint16) * 257 + 40  # never a multiple of 257: the low byte matters
    key16 = tuple(int(v) * 257 + 40 for v in key)
    data = png16(rgb16, 2, struct.pack(">HHH", *key16))
    path = w.encoded("colourkey", "rgb16_trns.png", data)
    with Image.open(path) as image:
        assert image.mode == "RGB", image.mode
        assert np.array_equal(np.asarray(to_rgb(image))[keyed], np.tile(key, (keyed.sum(), 1)))
    expected16 = scaled16(rgb16)
    expected16[keyed] = 255
    w.add("colourkey", "rgb16_trns.png", path, expected16, 16, "stoker rule")

    grey = rgb[:, :, 1]
    data = saved(Image.fromarray(grey, "L"), "PNG", transparency=200)
    path = w.encoded("colourkey", "grey8_trns.png", data)
    with Image.open(path) as image:
        out = reference(image)
        assert np.all(out[grey == 200] == 255) and np.any(grey == 200)
        w.add("colourkey", "grey8_trns.png", path, out)

    grey16 = grey.astype(np.uint16) * 257 + 40
    data = png16(grey16[:, :, None], 0, struct.pack(">H", 200 * 257 + 40))
    path = w.encoded("colourkey", "grey16_trns.png", data)
    with Image.open(path) as image:
        out = reference_gray16(image)
        assert np.all(out[grey == 200] == 255)
        w.add("colourkey", "grey16_trns.png", path, out, 16, "16-bit rule")


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
    colour_key(w)
    other_formats(w)
    rejected_formats(w)
    w.manifest.close()
    print(f"pillow_decode: {w.count} images, Pillow {Image.__version__}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
