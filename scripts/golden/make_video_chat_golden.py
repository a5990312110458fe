"""Golden chat conversations with video for Stoker's tokenisation parity (issue 36, docs/parity.md).

A few conversations holding videos (and one with an image and a video) are rendered with each
preset's chat template and run through its Hugging Face processor exactly as a user does:
``processor.apply_chat_template(messages, tokenize=False)`` then ``processor(text=[text],
images=..., videos=[frames, ...], video_metadata=[...], do_sample_frames=False,
return_tensors="np")``. The frames are given already sampled (uint8 ``(T, H, W, 3)`` arrays, the
form Stoker's ``SampledVideo`` holds them) with their ``VideoMetadata`` (``total_num_frames``,
container ``fps``, ``frames_indices``), at a size the processor's ``smart_resize`` keeps, so its
resize is the identity and the frames are the resized frames (checked: ``pixel_values_videos`` is
``patchify((u8 / 255 - mean) / std)`` of them within float32 rounding).

What it calls (transformers 5.23.0, torch 2.15.0, numpy 2.3.5, pyarrow 22.0.0; pinned in
requirements.txt beside this file): ``Qwen2VLProcessor``, ``Qwen2_5_VLProcessor``,
``Qwen3VLProcessor`` with the presets of make_golden.py (its PRESETS and chat templates, read from
it; the video pixel budgets are VIDEO_PIXELS here) and the real Qwen tokenizer in
../shared/data/tokenizers/qwen3.

Output into OUT (``--out``; the operators' tests run it into ``operators/target/video-chat-goldens``
with the model venv, ``GoldenSet.VIDEO_CHAT``; a second or so per preset):

* ``chats.arrow``: one row per (preset, conversation): ``messages`` (the conversation as JSON,
  messages-style content lists whose image and video parts carry ``index``, their position in
  the record's images / videos), the inputs (``frames`` list of uint8 bytes, ``frames_shape``
  flattened (n, 4), ``frames_indices``, ``video_fps``, ``total_num_frames``; ``image_sizes``
  flattened (n, 2) (height, width) of the synthetic images), and the processor's outputs:
  ``input_ids`` (int64), ``label_mask`` (bool; make_golden.label_mask), ``mm_token_type_ids``,
  ``position_ids`` (the model's ``get_rope_index`` for the sample, flattened (3, L): temporal,
  height, width; the model built on the meta device, ROPE_MODELS),
  ``image_grid_thw`` and ``video_grid_thw`` (flattened (n, 3)), ``second_per_grid_ts`` (Qwen2.5-VL
  only, else empty), ``video_timestamps`` (Qwen3-VL's ``_calculate_timestamps`` per video, else
  empty), ``pixel_values_videos`` (float32 little-endian bytes, (sum of grid products, D)).
* ``summary.json`` (written last): versions and row counts.

Run (from the repository root, with the model venv):

    .stoker/model-venv/bin/python scripts/golden/make_video_chat_golden.py [--out OUT_DIR]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import make_golden  # beside this script (its folder is sys.path[0]): the presets, declared once
import numpy as np
import pyarrow as pa
import torch
import transformers
from PIL import Image
from transformers import (
    AutoTokenizer,
    Qwen2_5_VLConfig,
    Qwen2_5_VLModel,
    Qwen2VLConfig,
    Qwen2VLImageProcessor,
    Qwen2VLModel,
    Qwen3VLConfig,
    Qwen3VLModel,
)
from transformers.video_utils import VideoMetadata

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data"
OUT = REPO / "operators" / "target" / "video-chat-goldens"
VIDEO_PAD = 151656
#: ``vision_config.tokens_per_second`` of Qwen/Qwen2.5-VL-7B-Instruct's config.json.
TOKENS_PER_SECOND = 2
#: Per preset the model class whose ``get_rope_index`` gives the M-RoPE positions, built on the
#: meta device from a one-layer config (no weights; only the config values the method reads,
#: ``spatial_merge_size`` 2 and Qwen2.5-VL's ``tokens_per_second``, matter).
ROPE_MODELS = {
    "qwen2-vl": (Qwen2VLConfig, Qwen2VLModel, {}),
    "qwen2.5-vl": (Qwen2_5_VLConfig, Qwen2_5_VLModel, {"tokens_per_second": TOKENS_PER_SECOND}),
    "qwen3-vl": (Qwen3VLConfig, Qwen3VLModel, {}),
}

#: Per-preset video pixel budgets (min, max) so that the frames below are kept at their size
#: (per frame for Qwen2/2.5-VL, over T*H*W for Qwen3-VL).
VIDEO_PIXELS = {
    "qwen2-vl": (3136, 28 * 28 * 8),
    "qwen2.5-vl": (3136, 28 * 28 * 8),
    "qwen3-vl": (4096, 32 * 32 * 6 * 8),
}

PRESETS = [
    replace(p, min_pixels=VIDEO_PIXELS[p.key][0], max_pixels=VIDEO_PIXELS[p.key][1])
    for p in make_golden.PRESETS
]

#: Each video: (frames, total_num_frames, container fps, frames_indices); the frame size is 2x3
#: merged tokens of the preset (56x84 for factor 28, 64x96 for factor 32).
VIDEOS = {
    "four": (4, 48, 24.0, [0, 12, 24, 36]),
    "odd": (5, 150, 29.97002997002997, [0, 37, 75, 112, 149]),
    "six": (6, 60, 25.0, [0, 5, 10, 15, 20, 25]),
}


def user(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(parts)}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def video(index: int) -> dict[str, Any]:
    return {"type": "video", "index": index}


def image(index: int) -> dict[str, Any]:
    return {"type": "image", "index": index}


#: (name, messages, videos by VIDEOS key, image sizes (h, w))
CHATS: list[tuple[str, list[dict[str, Any]], list[str], list[tuple[int, int]]]] = [
    (
        "one-video",
        [user(video(0), text("What happens in this clip?")), assistant("A square moves.")],
        ["four"],
        [],
    ),
    (
        "odd-frames-system",
        [
            {"role": "system", "content": [text("Describe videos briefly.")]},
            user(text("Watch: "), video(0), text(" and tell me.")),
            assistant("It fades."),
        ],
        ["odd"],
        [],
    ),
    (
        "image-and-video",
        [
            user(image(0), text("Is this frame "), video(0), text(" in the clip?")),
            assistant("Yes, at the start."),
        ],
        ["six"],
        [(56, 84)],
    ),
    (
        "two-videos-two-turns",
        [
            user(video(0), text("First?")),
            assistant("Gradient."),
            user(text("And "), video(1)),
            assistant("Checkerboard, 0.2 s in."),
        ],
        ["four", "odd"],
        [],
    ),
]


def frames(name: str, count: int, h: int, w: int) -> np.ndarray:
    """Integer-only pictures (identical on every machine): gradients with a moving square."""
    seed = sum(name.encode())
    y, x = np.mgrid[0:h, 0:w]
    out = np.empty((count, h, w, 3), dtype=np.uint8)
    for i in range(count):
        out[i, :, :, 0] = (x * 255 // max(w - 1, 1) + 7 * i + seed) % 256
        out[i, :, :, 1] = (y * 255 // max(h - 1, 1) + 13 * i) % 256
        out[i, :, :, 2] = ((x // 4 + y // 4) % 2) * 200 + i
        out[i, 8 + i : 20 + i, 10 + 2 * i : 22 + 2 * i] = 255
    return out


def picture(h: int, w: int) -> Image.Image:
    y, x = np.mgrid[0:h, 0:w]
    rgb = np.stack([(x * 4) % 256, (y * 4) % 256, (x + y) % 256], axis=-1).astype(np.uint8)
    return Image.fromarray(rgb, "RGB")


def build(preset: make_golden.Preset, tokenizer: Any) -> Any:
    video_processor = preset.video_processor_class(**preset.image_config(), do_sample_frames=False)
    # images at the preset's own (checkpoint) pixel bounds, as make_golden.py processes them
    (own,) = [p for p in make_golden.PRESETS if p.key == preset.key]
    image_processor = Qwen2VLImageProcessor(**own.image_config())
    return preset.processor_class(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=preset.template,
    )


def rope_model(preset: make_golden.Preset) -> Any:
    config_class, model_class, vision = ROPE_MODELS[preset.key]
    config = config_class(
        vision_config={"depth": 1, **vision}, text_config={"num_hidden_layers": 1}
    )
    with torch.device("meta"):
        return model_class(config)


def positions(model: Any, out: Any, ids: np.ndarray, mm: np.ndarray) -> np.ndarray:
    """``get_rope_index`` of the model for the one unpadded sample: ``(3, L)`` int64."""
    kwargs: dict[str, Any] = {
        "mm_token_type_ids": torch.tensor(mm)[None],
        "video_grid_thw": torch.tensor(np.asarray(out["video_grid_thw"], np.int64)),
    }
    if "image_grid_thw" in out:
        kwargs["image_grid_thw"] = torch.tensor(np.asarray(out["image_grid_thw"], np.int64))
    if "second_per_grid_ts" in out:
        # float32, as the processor's return_tensors="pt" tensor of the Python floats
        kwargs["second_per_grid_ts"] = torch.tensor(list(out["second_per_grid_ts"]))
    pos, _ = model.get_rope_index(torch.tensor(ids)[None], **kwargs)
    return pos[:, 0].numpy().astype(np.int64)


def chat_row(
    preset: make_golden.Preset, processor: Any, chat: tuple[Any, ...], model: Any
) -> dict[str, Any]:
    name, messages, video_keys, image_sizes = chat
    h, w = 2 * preset.factor, 3 * preset.factor
    clips = [frames(key, VIDEOS[key][0], h, w) for key in video_keys]
    metadata = [
        VideoMetadata(
            total_num_frames=VIDEOS[key][1],
            fps=VIDEOS[key][2],
            width=w,
            height=h,
            frames_indices=list(VIDEOS[key][3]),
        )
        for key in video_keys
    ]
    images = [picture(ih, iw) for ih, iw in image_sizes]
    rendered = processor.apply_chat_template(messages, tokenize=False)
    kwargs: dict[str, Any] = {"videos": clips, "video_metadata": metadata}
    if images:
        kwargs["images"] = images
    out = processor(text=[rendered], return_tensors="np", do_sample_frames=False, **kwargs)
    ids = np.asarray(out["input_ids"][0], dtype=np.int64)
    vgrid = np.asarray(out["video_grid_thw"], dtype=np.int64)
    assert [list(g[1:] * preset.patch_size) for g in vgrid] == [[h, w]] * len(clips), vgrid
    assert int((ids == VIDEO_PAD).sum()) == int(sum(np.prod(g) for g in vgrid)) // 4
    pv = np.ascontiguousarray(out["pixel_values_videos"], dtype="<f4")
    expected = []
    for clip, g in zip(clips, vgrid, strict=True):
        padded = np.concatenate([clip, clip[-1:].repeat(int(g[0]) * 2 - len(clip), 0)])
        for t in range(int(g[0])):
            pair = padded[2 * t : 2 * t + 2]
            # make_golden.patchify repeats one image over the temporal patch; a video has 2 frames
            p0 = make_golden.patchify(pair[0], preset).reshape(-1, 3, 2, preset.patch_size**2)
            p1 = make_golden.patchify(pair[1], preset).reshape(-1, 3, 2, preset.patch_size**2)
            expected.append(
                np.concatenate([p0[:, :, :1], p1[:, :, 1:]], axis=2).reshape(len(p0), -1)
            )
    affine = float(np.abs(pv - np.concatenate(expected)).max())
    assert affine < 1e-5, affine
    mm = np.asarray(out["mm_token_type_ids"][0], np.int64)
    igrid = (
        np.asarray(out["image_grid_thw"], dtype=np.int64) if images else np.zeros((0, 3), np.int64)
    )
    timestamps: list[list[float]] = []
    if preset.key == "qwen3-vl":
        timestamps = [
            [float(t) for t in processor._calculate_timestamps(list(m.frames_indices), m.fps, 2)]
            for m in metadata
        ]
    return {
        "preset": preset.key,
        "chat": name,
        "messages": json.dumps(messages),
        "frames": [c.tobytes() for c in clips],
        "frames_shape": [int(v) for c in clips for v in c.shape],
        "frames_indices": [list(VIDEOS[k][3]) for k in video_keys],
        "video_fps": [VIDEOS[k][2] for k in video_keys],
        "total_num_frames": [VIDEOS[k][1] for k in video_keys],
        "image_sizes": [v for s in image_sizes for v in s],
        "input_ids": ids.tolist(),
        "label_mask": make_golden.label_mask(ids).tolist(),
        "mm_token_type_ids": mm.tolist(),
        "position_ids": positions(model, out, ids, mm).reshape(-1).tolist(),
        "image_grid_thw": igrid.reshape(-1).tolist(),
        "video_grid_thw": vgrid.reshape(-1).tolist(),
        "second_per_grid_ts": [float(v) for v in out.get("second_per_grid_ts", [])],
        "video_timestamps": timestamps,
        "pixel_values_videos": pv.tobytes(),
        "pixel_values_videos_dim": int(pv.shape[1]),
    }


SCHEMA = pa.schema(
    [
        ("preset", pa.string()),
        ("chat", pa.string()),
        ("messages", pa.string()),
        ("frames", pa.list_(pa.binary())),
        ("frames_shape", pa.list_(pa.int64())),
        ("frames_indices", pa.list_(pa.list_(pa.int64()))),
        ("video_fps", pa.list_(pa.float64())),
        ("total_num_frames", pa.list_(pa.int64())),
        ("image_sizes", pa.list_(pa.int64())),
        ("input_ids", pa.list_(pa.int64())),
        ("label_mask", pa.list_(pa.bool_())),
        ("mm_token_type_ids", pa.list_(pa.int64())),
        ("position_ids", pa.list_(pa.int64())),
        ("image_grid_thw", pa.list_(pa.int64())),
        ("video_grid_thw", pa.list_(pa.int64())),
        ("second_per_grid_ts", pa.list_(pa.float64())),
        ("video_timestamps", pa.list_(pa.list_(pa.float64()))),
        ("pixel_values_videos", pa.binary()),
        ("pixel_values_videos_dim", pa.int64()),
    ]
)


def main() -> None:
    parser = argparse.ArgumentParser(description="Video chat goldens (Arrow IPC).")
    parser.add_argument("--out", type=Path, default=OUT, help=f"output directory (default {OUT})")
    out_dir: Path = parser.parse_args().out
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(DATA / "tokenizers" / "qwen3"))
    rows = []
    for preset in PRESETS:
        processor = build(preset, tokenizer)
        model = rope_model(preset)
        rows.extend(chat_row(preset, processor, chat, model) for chat in CHATS)
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    with pa.OSFile(str(out_dir / "chats.arrow"), "wb") as sink:
        with pa.ipc.new_file(sink, SCHEMA) as writer:
            writer.write_table(table)
    summary = {
        "versions": {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "numpy": np.__version__,
            "pyarrow": pa.__version__,
        },
        "rows": len(rows),
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
