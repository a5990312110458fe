"""What every contender shares: the dataset, the Hugging Face preprocessing of one record, the
batch layout, and the simulated trainer that consumes batches and writes the contender's result.

The work per sample is the same for the Python contenders (they all call :class:`Preprocessor`):
one S3 GET of the image (boto3), Pillow decode + EXIF transpose, the Hugging Face
``Qwen2VLProcessor`` with the Qwen2-VL chat template (smart_resize, bicubic resize, normalize,
patchify, ``<|image_pad|>`` expansion, tokenization), and the qwen-vl-finetune label mask. The
image processor is either the slow (Pillow) ``Qwen2VLImageProcessorPil`` (the naive loop and the
``dataloader-slow`` reference) or transformers 5's default fast (torchvision) ``Qwen2VLImageProcessor``
(the tuned peers). Stoker does the same in Java and is checked against it (see run.py's parity
check).
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"
TOKENIZER = SHARED / "tokenizers" / "qwen3"
BUCKET = "bench"
PREFIX = "data"
#: smart_resize bounds used by every contender (Stoker: --stoker.image.min/max-pixels). The max is
#: the one docs/parity.md compares pixels at (256 merged tokens).
MIN_PIXELS = 3136
MAX_PIXELS = 200704
PAD_TOKEN_ID = 151643  # <|endoftext|>, Stoker's pad token
#: Images of ../shared/data that Pillow and Stoker decode alike (docs/parity.md: not the lossy
#: WebPs, rocket.jpg, CMYK), from 64 px to 4 Mpx; sample i uses POOL[i % len(POOL)].
POOL = [
    "llava-style/images/photos/hopper.jpg",
    "llava-style/images/photos/extreme_ironing.jpg",
    "llava-style/images/photos/flower2.jpg",
    "llava-style/images/photos/waterview.jpg",
    "llava-style/images/photos/chelsea_cat.png",
    "llava-style/images/photos/retina.jpg",
    "llava-style/images/photos/coffee.png",
    "llava-style/images/photos/hubble_deep_field.jpg",
    "llava-style/images/photos/astronaut.png",
    "llava-style/images/exif/landscape_orient1.jpg",
    "llava-style/images/exif/landscape_orient6.jpg",
    "llava-style/images/exif/portrait_orient3.jpg",
    "llava-style/images/gray/camera.png",
    "llava-style/images/gray/page_scan.png",
    "llava-style/images/palette/hopper_palette.gif",
    "llava-style/images/alpha/skimage_logo_rgba.png",
    "llamafactory-sharegpt/images/1.jpg",
    "llamafactory-sharegpt/images/2.jpg",
    "qwen-messages/images/photos/birds.jpg",
    "qwen-messages/images/photos/landmark.jpg",
    "qwen-messages/images/docs/ocr_receipt.jpg",
]
QUESTIONS = [
    "What is in this image?",
    "Describe the picture in one sentence.",
    "What stands out in this photo?",
]


#: libjpeg-turbo's JNI library, which Stoker's JPEG decoder loads (./stoker demo installs it as
#: root); without it the job falls back to ImageIO, several times slower per JPEG.
NATIVE_JPEG = ("/usr/share/java/turbojpeg.jar", "/usr/lib/*/libturbojpeg.so")


def require_native_jpeg() -> None:
    """Exits naming the install command when libjpeg-turbo's Java binding is missing: Stoker
    would decode JPEGs with its ImageIO fallback, and the benchmark would measure that fallback
    instead of the job as deployed (a fresh machine's first run did)."""
    missing = [g for g in NATIVE_JPEG if not list(Path("/").glob(g.lstrip("/")))]
    if missing:
        sys.exit(
            f"libjpeg-turbo's Java binding is missing ({', '.join(missing)}): Stoker would "
            "decode JPEGs with ImageIO, several times slower. Install it with `apt-get install "
            "libturbojpeg-java libturbojpeg0-dev` (./stoker demo does as root)."
        )


def make_dataset(outdir: Path, samples: int) -> Path:
    """``outdir/train.jsonl`` (LLaVA style, one image per record) and ``outdir/images/``: every
    record has its own image object (a copy of a pool image under a distinct key), so no
    contender can serve an image from a cache. Reused when it exists with this many samples."""
    done = outdir / f".complete-{samples}"
    if done.exists():
        return outdir
    shutil.rmtree(outdir, ignore_errors=True)
    (outdir / "images").mkdir(parents=True)
    with (outdir / "train.jsonl").open("w", encoding="utf-8") as f:
        for i in range(samples):
            src = SHARED / POOL[i % len(POOL)]
            rel = f"images/{i:06d}-{src.name}"
            shutil.copyfile(src, outdir / rel)
            rec = {
                "id": f"s{i:06d}",
                "image": rel,
                "conversations": [
                    {"from": "human", "value": "<image>\n" + QUESTIONS[i % len(QUESTIONS)]},
                    {"from": "gpt", "value": f"Sample {i}: a picture from {src.parent.name}."},
                ],
            }
            f.write(json.dumps(rec) + "\n")
    done.touch()
    return outdir


def read_records(dataset: Path) -> list[dict[str, Any]]:
    """The records in file order; ``line`` is the 1-based JSONL line (Stoker's ``source``)."""
    lines = (dataset / "train.jsonl").read_text(encoding="utf-8").splitlines()
    return [dict(json.loads(t), line=i + 1) for i, t in enumerate(lines)]


def s3_client(endpoint: str, max_pool_connections: int = 64) -> Any:
    """A boto3 S3 client of the local server; ``max_pool_connections`` bounds the GETs it can
    have open at once (boto3 is thread-safe per client; its default pool is 10)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="stoker-local",
        aws_secret_access_key="stoker-local-secret",
        region_name="us-east-1",
        config=Config(
            s3={"addressing_style": "path"},
            max_pool_connections=max_pool_connections,
            # S3Proxy answers 501 to the checksum-mode header boto3 sends by default
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


def fetch(client: Any, rec: dict[str, Any]) -> bytes:
    """One GET of the record's image."""
    return client.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{rec['image']}")["Body"].read()


def _golden() -> Any:
    """scripts/golden/make_golden.py: the Qwen2-VL chat template, record mapping and label mask
    that Stoker's parity goldens are made with (imported, not copied)."""
    path = REPO / "scripts" / "golden" / "make_golden.py"
    spec = importlib.util.spec_from_file_location("make_golden", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_golden"] = module
    spec.loader.exec_module(module)
    return module


class Preprocessor:
    """The Hugging Face Qwen2-VL processor: with ``fast`` the default fast image processor of
    transformers 5 (``Qwen2VLImageProcessor``, torchvision on CPU tensors; its pixels differ from
    Pillow's by up to two uint8 levels, docs/parity.md), else the slow one
    (``Qwen2VLImageProcessorPil``, Pillow's bicubic, which Stoker matches bit for bit)."""

    def __init__(self, fast: bool = False) -> None:
        from transformers import (
            AutoTokenizer,
            Qwen2VLImageProcessor,
            Qwen2VLImageProcessorPil,
            Qwen2VLProcessor,
            Qwen2VLVideoProcessor,
        )

        self.golden = _golden()
        preset = self.golden.PRESETS[0]
        assert preset.key == "qwen2-vl"
        config = preset.image_config()
        config["size"] = {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}
        image_processor = (Qwen2VLImageProcessor if fast else Qwen2VLImageProcessorPil)(**config)
        self.processor = Qwen2VLProcessor(
            image_processor=image_processor,
            tokenizer=AutoTokenizer.from_pretrained(str(TOKENIZER)),
            video_processor=Qwen2VLVideoProcessor(**config),
            chat_template=preset.template,
        )

    def __call__(self, rec: dict[str, Any], image_bytes: bytes) -> dict[str, Any]:
        """One sample: ``line``, ``input_ids``, ``labels`` (int64, (L,)), ``pixel_values``
        (float32, (P, 1176)), ``image_grid_thw`` (int64, (1, 3))."""
        from PIL import Image, ImageOps

        msgs = self.golden.read_record("bench", rec["line"], rec).messages
        text = self.processor.apply_chat_template(msgs, tokenize=False)
        image = Image.open(io.BytesIO(image_bytes))
        image = ImageOps.exif_transpose(image) or image
        out = self.processor(text=[text], images=[image], return_tensors="np")
        ids = np.asarray(out["input_ids"][0], dtype=np.int64)
        labels = np.where(self.golden.label_mask(ids), ids, -100)
        return {
            "line": rec["line"],
            "input_ids": ids,
            "labels": labels,
            "pixel_values": np.asarray(out["pixel_values"], dtype=np.float32),
            "image_grid_thw": np.asarray(out["image_grid_thw"], dtype=np.int64),
        }


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Stoker's batch layout: ids/labels/mask right-padded to the longest sample, pixel patches
    and grids of all samples concatenated in row order."""
    length = max(len(s["input_ids"]) for s in samples)
    ids = np.full((len(samples), length), PAD_TOKEN_ID, dtype=np.int64)
    labels = np.full((len(samples), length), -100, dtype=np.int64)
    mask = np.zeros((len(samples), length), dtype=np.int64)
    for r, s in enumerate(samples):
        n = len(s["input_ids"])
        ids[r, :n], labels[r, :n], mask[r, :n] = s["input_ids"], s["labels"], 1
    return {
        "lines": [s["line"] for s in samples],
        "input_ids": ids,
        "labels": labels,
        "attention_mask": mask,
        "pixel_values": np.concatenate([s["pixel_values"] for s in samples]),
        "image_grid_thw": np.concatenate([s["image_grid_thw"] for s in samples]),
    }


def micro_batches(samples: Iterable[dict[str, Any]], size: int) -> Iterator[dict[str, Any]]:
    """Collates consecutive samples into batches of ``size`` (the last one may be smaller)."""
    chunk: list[dict[str, Any]] = []
    for s in samples:
        chunk.append(s)
        if len(chunk) == size:
            yield collate(chunk)
            chunk = []
    if chunk:
        yield collate(chunk)


def split_samples(batch: dict[str, Any]) -> dict[int, dict[str, np.ndarray]]:
    """Per-sample outputs of a batch by JSONL line, for the parity check."""
    out = {}
    start = 0
    for r, line in enumerate(batch["lines"]):
        grid = np.asarray(batch["image_grid_thw"][r : r + 1])
        patches = int(np.prod(grid))
        n = int(np.asarray(batch["attention_mask"][r]).sum())
        out[int(line)] = {
            "input_ids": np.asarray(batch["input_ids"][r][:n]),
            "labels": np.asarray(batch["labels"][r][:n]),
            "image_grid_thw": grid,
            "pixel_values": np.asarray(batch["pixel_values"][start : start + patches]),
        }
        start += patches
    return out


@dataclass
class Config:
    """What the driver (run.py) passes to a contender process, as JSON."""

    name: str
    endpoint: str
    dataset: str
    samples: int
    batch_size: int
    cores: int
    step_time_s: float
    parity_lines: list[int]
    result: str
    extra: dict[str, Any]


def contender_main(batches_fn: Any) -> None:
    """Entry point of a contender module: ``python -m bench.loaders.X CONFIG.json``. Consumes
    ``batches_fn(cfg)`` as a trainer does (a fixed sleep per batch, no CPU) and writes the
    result JSON plus the parity samples (``<result>.parity.npz``)."""
    p = argparse.ArgumentParser(description="one contender run (started by bench/loaders/run.py)")
    p.add_argument("config", type=Path)
    cfg = Config(**json.loads(p.parse_args().config.read_text()))
    result = Trainer(cfg).consume(batches_fn(cfg))
    Path(cfg.result).write_text(json.dumps(result))


class Trainer:
    """A simulated trainer: one consumer of batches of B samples that sleeps ``step_time_s`` per
    batch. Records when each batch arrived (Unix time) and how long it waited for it."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg

    def consume(self, batches: Iterator[dict[str, Any]]) -> dict[str, Any]:
        cfg = self.cfg
        arrivals: list[float] = []
        sizes: list[int] = []
        images = 0
        waits: list[float] = []
        parity: dict[str, np.ndarray] = {}
        wanted = set(cfg.parity_lines)
        it = iter(batches)
        end = time.time()
        while True:
            t = time.monotonic()
            try:
                batch = next(it)
            except StopIteration:
                break
            now = time.monotonic()
            waits.append(now - t)
            arrivals.append(time.time())
            sizes.append(len(batch["lines"]) - batch.get("backfilled", 0))
            images += int(np.asarray(batch["image_grid_thw"]).shape[0])
            if wanted.intersection(batch["lines"]):
                for line, arrays in split_samples(batch).items():
                    if line in wanted:
                        for k, v in arrays.items():
                            parity[f"{line}/{k}"] = np.array(v)
            del batch
            if cfg.step_time_s > 0:
                time.sleep(cfg.step_time_s)
            # the run ends with its last batch consumed, before the loader's teardown (a Stoker
            # contender stopping its job in the next() that ends the iteration)
            end = time.time()
        np.savez(cfg.result + ".parity.npz", **parity)
        return {
            "name": cfg.name,
            "arrivals_unix": arrivals,
            "batch_sizes": sizes,
            "samples": sum(sizes),
            "images": images,
            "waits_s": waits,
            "end_unix": end,
            "pid": os.getpid(),
        }


#: A gap between two batches counts as a stall when the contender's CPU stayed below this share of
#: its cores meanwhile: a loader short of CPU is slow, one idling without delivering is broken.
STALL_IDLE_BELOW = 0.25


def find_stalls(
    arrivals: list[float], utilization: Callable[[float, float], float], stall_s: float
) -> list[dict[str, float]]:
    """The stalls of a run: each gap of more than ``stall_s`` seconds between two consecutive
    batch arrivals (Unix times) during which ``utilization(t0, t1)`` (the contender's CPU seconds
    per second and core; NaN when not sampled) stayed below :data:`STALL_IDLE_BELOW`, as
    ``{"from_unix", "gap_s", "cpu_utilization"}``. The wait for the first batch is not a gap:
    start-up is reported apart, as the time to first batch."""
    stalls = []
    for t0, t1 in zip(arrivals, arrivals[1:], strict=False):
        if t1 - t0 > stall_s:
            cpu = utilization(t0, t1)
            if not cpu >= STALL_IDLE_BELOW:  # NaN (too few samples) counts as idle
                stalls.append({"from_unix": t0, "gap_s": t1 - t0, "cpu_utilization": cpu})
    return stalls


#: Seconds before an injected S3 pause, and after the resume (from ``PAUSE_SETTLE_S`` on), over
#: which :func:`pause_recovery` compares the delivery rate.
PAUSE_WINDOW_S = 20.0
#: Seconds after the resume left out of the "after" window: the GETs held by the pause complete
#: and the prefetch refills, which is not the rate the loader goes on at.
PAUSE_SETTLE_S = 5.0


def pause_recovery(
    arrivals: list[float],
    sizes: list[int],
    paused_unix: float,
    resumed_unix: float,
    stalls: list[dict[str, float]],
    stall_s: float,
) -> dict[str, Any]:
    """How a contender came through an injected pause of the S3 server (SIGSTOP from
    ``paused_unix`` to ``resumed_unix``): samples/s over the :data:`PAUSE_WINDOW_S` seconds
    before the pause and over as many seconds from :data:`PAUSE_SETTLE_S` after the resume
    (``rate_before``, ``rate_after``; NaN when the run did not last that long, or ended first),
    their ratio ``recovered``, ``longest_gap_s``, the longest time between two batches that
    overlaps the pause (0 when the batches went on through it), and the stalls split: a gap
    that spans the pause is the pause's (``pause_gaps``) unless it went on for more than
    ``stall_s`` after the resume, and only the others stay ``stalls`` (they fail the run)."""
    a = np.asarray(arrivals)
    z = np.asarray(sizes)

    def rate(t0: float, t1: float) -> float:
        if len(a) == 0 or a[0] > t0 or a[-1] < t1:
            return float("nan")
        return float(z[(a > t0) & (a <= t1)].sum() / (t1 - t0))

    before = rate(paused_unix - PAUSE_WINDOW_S, paused_unix)
    settled = resumed_unix + PAUSE_SETTLE_S
    after = rate(settled, settled + PAUSE_WINDOW_S)
    gaps = [
        t1 - t0
        for t0, t1 in zip(arrivals, arrivals[1:], strict=False)
        if t0 < resumed_unix and t1 > paused_unix
    ]
    own, pause_gaps = [], []
    for st in stalls:
        t0, t1 = st["from_unix"], st["from_unix"] + st["gap_s"]
        spans = t0 < resumed_unix and t1 > paused_unix
        (pause_gaps if spans and t1 - max(t0, resumed_unix) <= stall_s else own).append(st)
    return {
        "paused_unix": paused_unix,
        "resumed_unix": resumed_unix,
        "rate_before": before,
        "rate_after": after,
        "recovered": after / before if before > 0 else float("nan"),
        "longest_gap_s": max(gaps, default=0.0),
        "pause_gaps": pause_gaps,
        "stalls": own,
    }
