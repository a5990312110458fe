"""Golden data for Stoker's preprocessing parity with Hugging Face (issue: parity, docs/parity.md).

Feeds every record of the three shared sample datasets (../shared/data/llava-style,
qwen-messages, llamafactory-sharegpt) through the Hugging Face processor of each model preset and
writes what Stoker must reproduce as Arrow IPC files into OUT_DIR (``--out``; the operators' parity
tests run it into ``operators/target/parity-goldens`` with the model venv, ``Goldens.java``, so the
goldens are generated, not stored; ``summary.json`` is also kept in
``operators/src/test/resources/parity/`` as the record of the versions and distances).

What it calls (transformers 5.23.0, torch 2.15.0, torchvision 0.29.2, Pillow 12.0.0; pinned in
requirements.txt beside this file):

* processors: ``Qwen2VLProcessor`` (qwen2-vl), ``Qwen2_5_VLProcessor`` (qwen2.5-vl),
  ``Qwen3VLProcessor`` (qwen3-vl), each built from explicit values (no hub access) with the
  ``chat_template`` below and the real Qwen tokenizer in ../shared/data/tokenizers/qwen3 loaded with
  ``AutoTokenizer`` (its byte-level BPE and ids 151643-151664 are those of the Qwen2/2.5/3-VL
  tokenizers; the vision tokens are the same ids for all three models);
* image processors: ``Qwen2VLImageProcessor`` (transformers 5's default "fast" torchvision backend,
  the reference the tolerance is held against) and ``Qwen2VLImageProcessorPil`` (the "slow" Pillow
  backend, reported as a distance);
* ``processor.apply_chat_template(..., tokenize=False)`` renders the conversation and
  ``processor(text=..., images=...)`` expands each ``<|image_pad|>`` to
  ``grid_t * grid_h * grid_w / merge_size**2`` tokens and tokenizes.

Preset values, copied from the models' published files on the Hugging Face hub (read 2026-11; the
files have not changed since the models' releases, Qwen2-VL 2024-08, Qwen2.5-VL 2025-01, Qwen3-VL
2025-10):

* Qwen/Qwen2-VL-7B-Instruct and Qwen/Qwen2.5-VL-7B-Instruct ``preprocessor_config.json``:
  ``min_pixels`` 3136, ``max_pixels`` 12845056, ``patch_size`` 14, ``temporal_patch_size`` 2,
  ``merge_size`` 2, CLIP ``image_mean``/``image_std``, ``image_processor_type``
  Qwen2VLImageProcessor; ``chat_template.json``: the same template for both (``QWEN2_VL_TEMPLATE``).
* Qwen/Qwen3-VL-8B-Instruct ``preprocessor_config.json``: ``size`` {shortest_edge 65536,
  longest_edge 16777216}, ``patch_size`` 16, ``temporal_patch_size`` 2, ``merge_size`` 2,
  ``image_mean``/``image_std`` 0.5, ``image_processor_type`` Qwen2VLImageProcessorFast;
  ``chat_template.json``: ``QWEN3_VL_TEMPLATE`` (5292 bytes, SHA-256 checked below).

Images are loaded as a user of the processor does: ``PIL.Image.open`` (the first frame of an
animation), ``PIL.ImageOps.exif_transpose``, and passed to the processor in their own mode, whose
``convert_to_rgb`` composites any transparency over white (``Image.alpha_composite``) and converts
everything else with ``Image.convert("RGB")``. (transformers' ``load_image``, used when
``apply_chat_template(tokenize=True)`` is given image paths, converts to RGB *before* that and so
drops alpha instead of compositing; Stoker follows the processor's compositing, as qwen-vl-utils
does.)

Records are mapped to chat messages exactly as Stoker's parser maps them
(operators/.../parse/RecordFormats.java): LLaVA ``conversations`` (human/gpt/system) and
LLaMA-Factory string content split at each ``<image>`` into an image part and the text around it
(empty text dropped), the top-level images taken in order; messages-style content lists keep their
parts, with per-image ``min_pixels``/``max_pixels`` passed to the processor call as ``size``.

Labels: the label mask marks the tokens the official fine-tuning code trains (QwenLM
qwen-vl-finetune): in each assistant turn everything after ``<|im_start|>assistant\\n`` up to and
including ``<|im_end|>`` and the newline after it.

Output (Arrow IPC files, no compression; about 19 MB in all, 85 s on the 2-core dev box, byte-identical
from run to run):

* ``tokens.arrow``: one row per (preset, record) at the preset's default pixel bounds: ``input_ids``
  (int32), ``label_mask`` (bool), ``image_grid_thw`` (int32, flattened (n, 3)), ``image_pads``.
* ``pixels.arrow``: one row per (image, resized size): the fast processor's resized uint8 RGB image
  as PNG (checked to round-trip), and the slow processor's as a PNG of ``slow - fast + 128``. The
  pixel goldens use ``max_pixels = min(preset max, PIXEL_MAX_PIXELS)`` with PIXEL_MAX_PIXELS =
  200704 (256 * 28 * 28, 256 merged tokens at factor 28) because at 1003520 the PNGs alone are
  about 46 MB (lossless WebP saves only about 10% and takes 30 s an image at its best setting).
  Images below that size are compared at their preset-default size; grids and pad counts are
  checked at the preset defaults for every image in tokens.arrow. Qwen2-VL and Qwen2.5-VL resize
  identically, so their rows are shared (group ``f28``); Qwen3-VL is ``f32``.
* ``pixel_values.arrow``: the first FULL_PIXEL_VALUES_ROWS rows of the fast processor's float32
  ``pixel_values`` of one photo (FULL_PIXEL_VALUES_IMAGE) per preset, to check patch order and
  normalisation exactly.
* ``summary.json``: versions, the affine check, and the fast-vs-slow distance per preset.

The affine claim that makes the resized images enough: for every image and preset the script checks
``pixel_values == patchify((u8 / 255 - mean) / std)`` against the processor's real output
(maximum deviation recorded in summary.json, float32 rounding only).

Run (from the repository root; the venv is gitignored):

    python3.11 -m venv .venv-golden
    .venv-golden/bin/pip install -r scripts/golden/requirements.txt
    .venv-golden/bin/python scripts/golden/make_golden.py [--out OUT_DIR]

(``./stoker test`` has such a venv: ``.stoker/model-venv``.)

Install size: PyPI has no CPU-only torch wheel for Linux, and ``pip install --no-deps torch``
fails at ``import torch`` (libcublasLt not found), so the plain install is the lightest that
works: about 5.8 GB with the CUDA 13 runtime wheels, 2 minutes here. No GPU is used.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import PIL
import pyarrow as pa
import torch
import torchvision
import transformers
from PIL import Image, ImageOps
from transformers import (
    AutoTokenizer,
    Qwen2_5_VLProcessor,
    Qwen2VLImageProcessor,
    Qwen2VLImageProcessorPil,
    Qwen2VLProcessor,
    Qwen2VLVideoProcessor,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)
from transformers.image_utils import SizeDict

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data"
OUT = REPO / "operators" / "src" / "test" / "resources" / "parity"
DATASETS = ["llava-style", "qwen-messages", "llamafactory-sharegpt"]
PIXEL_MAX_PIXELS = 200704
FULL_PIXEL_VALUES_ROWS = 64
FULL_PIXEL_VALUES_IMAGE = "images/photos/hopper.jpg"

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

# Qwen/Qwen2-VL-7B-Instruct and Qwen/Qwen2.5-VL-7B-Instruct chat_template.json (identical).
QWEN2_VL_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture "
    "{{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video "
    "{{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Qwen/Qwen3-VL-8B-Instruct chat_template.json as released (2025-10).
QWEN3_VL_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' }}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set image_count = namespace(value=0) %}
{%- set video_count = namespace(value=0) %}
{%- for message in messages %}
    {%- if message.role == "user" %}
        {{- '<|im_start|>' + message.role + '\\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role + '\\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content_item in message.content %}
                {%- if 'text' in content_item %}
                    {{- content_item.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and message.content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""
QWEN3_VL_TEMPLATE_SHA256 = "3636d0f0bd6bef02654cdffdc447b79cb2cef8ab02cc75267345946291a489e4"

IM_START, IM_END, ASSISTANT, NEWLINE = 151644, 151645, 77091, 198
IMAGE_PAD = 151655


@dataclass(frozen=True)
class Preset:
    key: str
    processor_class: Any
    video_processor_class: Any
    patch_size: int
    min_pixels: int
    max_pixels: int
    mean: list[float]
    std: list[float]
    template: str

    @property
    def factor(self) -> int:
        return self.patch_size * 2

    @property
    def pixel_key(self) -> str:
        return f"f{self.factor}"

    def image_config(self) -> dict[str, Any]:
        return {
            "size": {"shortest_edge": self.min_pixels, "longest_edge": self.max_pixels},
            "patch_size": self.patch_size,
            "temporal_patch_size": 2,
            "merge_size": 2,
            "image_mean": self.mean,
            "image_std": self.std,
        }


PRESETS = [
    Preset(
        "qwen2-vl",
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
        14,
        3136,
        12845056,
        CLIP_MEAN,
        CLIP_STD,
        QWEN2_VL_TEMPLATE,
    ),
    Preset(
        "qwen2.5-vl",
        Qwen2_5_VLProcessor,
        Qwen2VLVideoProcessor,
        14,
        3136,
        12845056,
        CLIP_MEAN,
        CLIP_STD,
        QWEN2_VL_TEMPLATE,
    ),
    Preset(
        "qwen3-vl",
        Qwen3VLProcessor,
        Qwen3VLVideoProcessor,
        16,
        65536,
        16777216,
        [0.5] * 3,
        [0.5] * 3,
        QWEN3_VL_TEMPLATE,
    ),
]


@dataclass
class ImageUse:
    path: str
    min_pixels: int = 0
    max_pixels: int = 0


@dataclass
class Record:
    dataset: str
    line: int
    record_id: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    images: list[ImageUse] = field(default_factory=list)


ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant"}
ROLES["assistant"] = "assistant"


def split_placeholders(text: str, queue: list[str], rec: Record) -> list[dict[str, Any]]:
    """Stoker's ConversationBuilder.addTextWithPlaceholders."""
    parts: list[dict[str, Any]] = []
    pieces = text.split("<image>")
    for i, piece in enumerate(pieces):
        if i > 0:
            rec.images.append(ImageUse(queue.pop(0)))
            parts.append({"type": "image"})
        if piece:
            parts.append({"type": "text", "text": piece})
    return parts


def read_record(dataset: str, line: int, obj: dict[str, Any]) -> Record:
    rec = Record(dataset, line, str(obj.get("id", line)))
    if "messages" in obj:
        queue = list(obj.get("images") or [])
        for turn in obj["messages"]:
            content = turn["content"]
            if isinstance(content, str):
                parts = split_placeholders(content, queue, rec)
            else:
                parts = []
                for part in content:
                    kind = part.get("type") or next(
                        k for k in ("text", "image", "image_url") if k in part
                    )
                    if kind == "text":
                        if part["text"]:
                            parts.append({"type": "text", "text": part["text"]})
                        continue
                    src = part["image"] if kind == "image" else part["image_url"]
                    src = src["url"] if isinstance(src, dict) else src
                    rec.images.append(
                        ImageUse(src, part.get("min_pixels", 0), part.get("max_pixels", 0))
                    )
                    parts.append({"type": "image"})
            rec.messages.append({"role": ROLES[turn["role"]], "content": parts})
    else:
        image = obj.get("image", obj.get("images"))
        queue = [image] if isinstance(image, str) else list(image or [])
        for turn in obj["conversations"]:
            parts = split_placeholders(turn["value"], queue, rec)
            rec.messages.append({"role": ROLES[turn["from"]], "content": parts})
    return rec


def records() -> list[Record]:
    out = []
    for dataset in DATASETS:
        lines = (DATA / dataset / "train.jsonl").read_text(encoding="utf-8").splitlines()
        for i, text in enumerate(lines):
            if text.strip():
                out.append(read_record(dataset, i + 1, json.loads(text)))
    return out


def load_image(dataset: str, path: str) -> Image.Image:
    image = Image.open(DATA / dataset / path)
    transposed = ImageOps.exif_transpose(image)
    return transposed if transposed is not None else image


def label_mask(ids: np.ndarray) -> np.ndarray:
    """qwen-vl-finetune: train each assistant answer, its <|im_end|> and the newline after it."""
    mask = np.zeros(len(ids), dtype=bool)
    i = 0
    while i + 2 < len(ids):
        if ids[i] == IM_START and ids[i + 1] == ASSISTANT and ids[i + 2] == NEWLINE:
            j = i + 3
            while j < len(ids) and ids[j] != IM_END:
                j += 1
            mask[i + 3 : min(j + 2, len(ids))] = True
            i = j
        i += 1
    return mask


def patchify(u8: np.ndarray, preset: Preset) -> np.ndarray:
    """Qwen2VLImageProcessor's normalise + patchify of an (H, W, 3) uint8 image, in float64."""
    x = (u8.astype(np.float64) / 255.0 - np.array(preset.mean)) / np.array(preset.std)
    x = x.transpose(2, 0, 1)  # C, H, W
    ps, m = preset.patch_size, 2
    c, h, w = x.shape
    gh, gw = h // ps, w // ps
    p = x.reshape(c, gh // m, m, ps, gw // m, m, ps).transpose(1, 4, 2, 5, 0, 3, 6)
    p = np.repeat(p[:, :, :, :, :, None], 2, axis=5)  # temporal patch
    return p.reshape(gh * gw, c * 2 * ps * ps)


def resized_u8(processor: Any, image: Image.Image, size: dict[str, int]) -> np.ndarray:
    """The image processor's own RGB conversion, smart_resize and resize, as (H, W, 3) uint8."""
    chw = processor.process_image(image, do_convert_rgb=True)
    out = processor.resize(
        chw,
        SizeDict(**size),
        processor.resample,
        factor=processor.patch_size * processor.merge_size,
    )
    hwc = np.asarray(out).transpose(1, 2, 0)
    assert hwc.dtype == np.uint8, hwc.dtype
    return hwc


def png(u8: np.ndarray) -> bytes:
    """Lossless PNG of an (H, W, 3) uint8 image, checked to round-trip."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(u8), "RGB").save(buf, "PNG", optimize=True)
    data = buf.getvalue()
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")), u8)
    return data


def main() -> None:
    global OUT
    parser = argparse.ArgumentParser(description="Hugging Face parity goldens (Arrow IPC).")
    parser.add_argument("--out", type=Path, default=OUT, help=f"output directory (default {OUT})")
    OUT = parser.parse_args().out
    # one thread: the goldens are the same bytes, and ./stoker test runs this beside its other
    # streams on every core (75 CPU-seconds with torch's default of a thread per core, 61 with
    # OMP_NUM_THREADS=1, on the idle 2-core box)
    torch.set_num_threads(1)
    assert hashlib.sha256(QWEN3_VL_TEMPLATE.encode()).hexdigest() == QWEN3_VL_TEMPLATE_SHA256
    tokenizer = AutoTokenizer.from_pretrained(str(DATA / "tokenizers" / "qwen3"))
    recs = records()
    OUT.mkdir(parents=True, exist_ok=True)
    token_rows: list[dict[str, Any]] = []
    pixel_rows: dict[tuple[str, str, str, int, int], dict[str, Any]] = {}
    full_rows: list[dict[str, Any]] = []
    summary: dict[str, Any] = {
        "versions": {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "pillow": PIL.__version__,
            "numpy": np.__version__,
            "pyarrow": pa.__version__,
        },
        "pixel_max_pixels": PIXEL_MAX_PIXELS,
        "presets": {},
    }
    for preset in PRESETS:
        fast = Qwen2VLImageProcessor(**preset.image_config())
        slow = Qwen2VLImageProcessorPil(**preset.image_config())
        processor = preset.processor_class(
            image_processor=fast,
            tokenizer=tokenizer,
            video_processor=preset.video_processor_class(**preset.image_config()),
            chat_template=preset.template,
        )
        affine_max = 0.0
        slow_abs_sum = 0.0
        slow_max = 0.0
        slow_count = 0
        for rec in recs:
            text = processor.apply_chat_template(rec.messages, tokenize=False)
            assert text.count("<|image_pad|>") == len(rec.images), rec.record_id
            images = [load_image(rec.dataset, use.path) for use in rec.images]
            sizes = []
            for use in rec.images:
                sizes.append(
                    {
                        "shortest_edge": use.min_pixels or preset.min_pixels,
                        "longest_edge": use.max_pixels or preset.max_pixels,
                    }
                )
            kwargs: dict[str, Any] = {}
            if images:
                assert all(s == sizes[0] for s in sizes), "one size per call"
                kwargs["images"] = images
                kwargs["size"] = sizes[0]
            out = processor(text=[text], return_tensors="np", **kwargs)
            ids = np.asarray(out["input_ids"][0], dtype=np.int64)
            grid = (
                np.asarray(out["image_grid_thw"], dtype=np.int64)
                if images
                else np.zeros((0, 3), dtype=np.int64)
            )
            pads = [int(np.prod(g)) // 4 for g in grid]
            assert int((ids == IMAGE_PAD).sum()) == sum(pads), rec.record_id
            token_rows.append(
                {
                    "preset": preset.key,
                    "dataset": rec.dataset,
                    "line": rec.line,
                    "record_id": rec.record_id,
                    "input_ids": ids.astype(np.int32).tolist(),
                    "label_mask": label_mask(ids).tolist(),
                    "image_grid_thw": grid.reshape(-1).astype(np.int32).tolist(),
                    "image_pads": pads,
                    "image_paths": [use.path for use in rec.images],
                }
            )
            # Pixel goldens: every image at min(preset max, PIXEL_MAX_PIXELS).
            for use, image, size in zip(rec.images, images, sizes, strict=True):
                cmp = {
                    "shortest_edge": size["shortest_edge"],
                    "longest_edge": min(size["longest_edge"], PIXEL_MAX_PIXELS),
                }
                fast_u8 = resized_u8(fast, image, cmp)
                slow_u8 = resized_u8(slow, image, cmp)
                h, w = fast_u8.shape[:2]
                assert slow_u8.shape == fast_u8.shape
                # The affine check against the processors' real pixel_values.
                real_fast = fast(images=[image], size=cmp, return_tensors="np")
                real_slow = slow(images=[image], size=cmp, return_tensors="np")
                pv_fast = np.asarray(real_fast["pixel_values"], dtype=np.float64)
                pv_slow = np.asarray(real_slow["pixel_values"], dtype=np.float64)
                assert list(real_fast["image_grid_thw"][0]) == [
                    1,
                    h // preset.patch_size,
                    w // preset.patch_size,
                ]
                err_fast = float(np.abs(pv_fast - patchify(fast_u8, preset)).max())
                err_slow = float(np.abs(pv_slow - patchify(slow_u8, preset)).max())
                affine_max = max(affine_max, err_fast, err_slow)
                diff = np.abs(pv_fast - pv_slow)
                slow_abs_sum += float(diff.sum())
                slow_count += diff.size
                slow_max = max(slow_max, float(diff.max()))
                key = (preset.pixel_key, rec.dataset, use.path, h, w)
                if key not in pixel_rows:
                    delta = slow_u8.astype(np.int16) - fast_u8.astype(np.int16)
                    assert np.abs(delta).max() < 128
                    pixel_rows[key] = {
                        "group": preset.pixel_key,
                        "dataset": rec.dataset,
                        "path": use.path,
                        "min_pixels": cmp["shortest_edge"],
                        "max_pixels": cmp["longest_edge"],
                        "height": h,
                        "width": w,
                        "fast_png": png(fast_u8),
                        "slow_minus_fast_png": png((delta + 128).astype(np.uint8)),
                    }
                if use.path == FULL_PIXEL_VALUES_IMAGE and not any(
                    r["preset"] == preset.key for r in full_rows
                ):
                    full_rows.append(
                        {
                            "preset": preset.key,
                            "dataset": rec.dataset,
                            "path": use.path,
                            "height": h,
                            "width": w,
                            "rows": FULL_PIXEL_VALUES_ROWS,
                            "fast": pv_fast[:FULL_PIXEL_VALUES_ROWS]
                            .astype(np.float32)
                            .reshape(-1)
                            .tolist(),
                        }
                    )
        summary["presets"][preset.key] = {
            "processor": f"{preset.processor_class.__name__} + Qwen2VLImageProcessor (fast) / "
            "Qwen2VLImageProcessorPil (slow)",
            "image_config": preset.image_config(),
            "affine_check_max_abs_error": affine_max,
            "fast_vs_slow_mean_abs": slow_abs_sum / max(slow_count, 1),
            "fast_vs_slow_max_abs": slow_max,
        }
        print(preset.key, json.dumps(summary["presets"][preset.key]), file=sys.stderr)

    write(OUT / "tokens.arrow", token_rows)
    write(OUT / "pixels.arrow", list(pixel_rows.values()))
    write(OUT / "pixel_values.arrow", full_rows, float_lists=("fast",))
    total = sum(p.stat().st_size for p in OUT.glob("*.arrow"))
    summary["bytes"] = total
    (OUT / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(
        f"wrote {len(token_rows)} token rows, {len(pixel_rows)} images, {total} bytes",
        file=sys.stderr,
    )


def write(path: Path, rows: list[dict[str, Any]], float_lists: tuple[str, ...] = ()) -> None:
    fields = []
    for name, value in rows[0].items():
        if name in float_lists:
            fields.append(pa.field(name, pa.list_(pa.float32())))
        elif isinstance(value, bool):
            fields.append(pa.field(name, pa.bool_()))
        elif isinstance(value, int):
            fields.append(pa.field(name, pa.int32()))
        elif isinstance(value, str):
            fields.append(pa.field(name, pa.string()))
        elif isinstance(value, bytes):
            fields.append(pa.field(name, pa.binary()))
        elif name == "label_mask":
            fields.append(pa.field(name, pa.list_(pa.bool_())))
        elif name == "image_paths":
            fields.append(pa.field(name, pa.list_(pa.string())))
        else:
            fields.append(pa.field(name, pa.list_(pa.int32())))
    schema = pa.schema(fields)
    table = pa.Table.from_pylist(rows, schema=schema)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        writer.write_table(table)


if __name__ == "__main__":
    main()
