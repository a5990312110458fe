"""The demo's naive serial loader (``stoker_tools.naive_loader``) against references that exist
without the job: the shared smart_resize table, the tokenizer's reference encodings of a chat
with image pads, :mod:`stoker.images`' unpatchify and :mod:`stoker.pixels`' normalisation; then
one short run of its command over a local folder. (Run against the job's own batches of the
generated sample dataset, every sample matched exactly: ids, labels, grids and float32 pixels.)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pyarrow.fs as pafs
import pytest
from harness.paths import REPO_ROOT, SHARED, TOKENIZER_DIR, require_shared
from PIL import Image
from stoker_tools.naive_loader import (
    PRESETS,
    ImagePart,
    Message,
    NaiveLoader,
    Record,
    conversation,
    label_mask,
    patchify,
    preprocessing,
    rank_records,
    render,
    smart_resize,
)

from stoker.images import unpatchify, unpatchify_frames
from stoker.pixels import normalize_uint8

QWEN2 = PRESETS["qwen2-vl"]
QWEN3 = PRESETS["qwen3-vl"]


def test_smart_resize_matches_the_shared_reference_table():
    require_shared()
    lines = (SHARED / "smart_resize_reference.jsonl").read_text().splitlines()
    settings = {
        "f28_default": (28, 3136, 12845056),
        "f28_max1280tok": (28, 3136, 1003520),
        "f32_qwen3vl": (32, 65536, 16777216),
    }
    for line in lines:
        ref = json.loads(line)
        h, w = ref["height_after_exif"], ref["width_after_exif"]
        for key, (factor, lo, hi) in settings.items():
            want = ref[key]
            got = smart_resize(h, w, factor, lo, hi)
            assert got == (want["h"], want["w"]), (ref["path"], key)
            assert (got[0] // factor) * (got[1] // factor) == want["merged_tokens"]
    with pytest.raises(ValueError, match="aspect ratio"):
        smart_resize(10, 2010, 28, 3136, 12845056)


@pytest.mark.parametrize("prep", [QWEN2, QWEN3], ids=["qwen2-vl", "qwen3-vl"])
def test_patchify_is_what_unpatchify_undoes(prep):
    v = prep.vision
    f = prep.factor
    rgb = np.random.default_rng(0).integers(0, 256, (2 * f, 3 * f, 3), dtype=np.uint8)
    patches = patchify(rgb, v)
    grid = np.array([1, 2 * f // v.patch_size, 3 * f // v.patch_size])
    assert patches.shape == (int(grid.prod()), v.patch_dim) and patches.dtype == np.uint8
    frames = unpatchify_frames(patches, grid, v)  # (tps, H, W, 3), values unchanged
    assert all(np.array_equal(frame, rgb) for frame in frames)
    # normalised as the job's sink does, and back to the same pixels
    assert np.array_equal(unpatchify(normalize_uint8(patches, v), grid, v), rgb)


def test_render_and_tokenize_match_the_reference_chat_encoding():
    require_shared()
    refs = [
        json.loads(x)
        for x in (TOKENIZER_DIR / "reference_encodings.jsonl").read_text().splitlines()
    ]
    ref = next(r for r in refs if "<|image_pad|>" in r["text"])
    pads = ref["text"].count("<|image_pad|>")
    text = render(
        [Message("user", [ImagePart("a.jpg"), "Describe this image."])],
        [pads],
        QWEN2.system_prompt,
    )
    assert text + "<|im_start|>assistant\n" == ref["text"]
    loader = NaiveLoader(pafs.LocalFileSystem(), "/", TOKENIZER_DIR, QWEN2)
    ids = loader.tokenizer.encode(ref["text"], add_special_tokens=False).ids
    assert ids == ref["ids"]
    # Qwen3-VL's template inserts no system turn
    assert render([Message("user", ["hi"])], [], QWEN3.system_prompt).startswith(
        "<|im_start|>user\n"
    )


def test_the_three_record_layouts_become_the_same_conversation():
    want = [
        Message("user", [ImagePart("a.png"), "\nWhat is it?"]),
        Message("assistant", ["A cat."]),
    ]
    llava = {
        "image": "a.png",
        "conversations": [
            {"from": "human", "value": "<image>\nWhat is it?"},
            {"from": "gpt", "value": "A cat."},
        ],
    }
    messages = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image", "image": "a.png"},
                    {"type": "text", "text": "\nWhat is it?"},
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
        ]
    }
    sharegpt = {
        "messages": [
            {"role": "user", "content": "<image>\nWhat is it?"},
            {"role": "assistant", "content": "A cat."},
        ],
        "images": ["a.png"],
    }
    for record in (llava, messages, sharegpt):
        assert conversation(record) == want
    with pytest.raises(ValueError, match="without an <image>"):
        conversation({"image": "a.png", "conversations": [{"from": "human", "value": "hi"}]})
    with pytest.raises(ValueError, match="video"):
        conversation({"video": "v.mp4", "conversations": []})


def test_labels_are_each_assistant_answer_its_im_end_and_newline():
    start, im_end = [151644, 77091, 198], 151645
    ids = np.array(
        [151644, 872, 198, 5, 151645, 198]  # user turn
        + start
        + [7, 8, im_end, 198]  # answer, <|im_end|>, newline
        + [151644, 872, 198, 9, im_end, 198]
        + start
        + [10, im_end]  # the last answer may end without the newline
    )
    mask = label_mask(ids, start, im_end)
    assert ids[mask].tolist() == [7, 8, im_end, 198, 10, im_end]


def test_every_record_lands_in_exactly_one_rank_batch():
    records = [Record("f.jsonl", i + 1, {}) for i in range(21)]
    per_rank = [rank_records(records, r, 2, 4, seed=0) for r in (0, 1)]
    lines = sorted(rec.line for batches in per_rank for b in batches for rec in b)
    assert lines == list(range(1, 22))
    assert [len(b) for b in per_rank[0]] == [4, 4, 4]
    assert [len(b) for b in per_rank[1]] == [4, 4, 1]
    assert rank_records(records, 0, 2, 4, seed=0) == per_rank[0]  # seeded


def test_preprocessing_reads_the_jobs_options():
    prep = preprocessing(
        {
            "stoker.model.preset": "qwen2.5-vl",
            "stoker.image.max-pixels": "1003520",
            "stoker.template.default-system-prompt": "",
        }
    )
    assert (prep.min_pixels, prep.max_pixels, prep.system_prompt) == (3136, 1003520, None)
    assert prep.vision == QWEN2.vision
    with pytest.raises(ValueError, match="unknown preset"):
        preprocessing({"stoker.model.preset": "llava"})


@pytest.fixture
def tiny_dataset(tmp_path):
    """Four LLaVA records over two images of ../shared/data, and one text-only record."""
    require_shared()
    images = tmp_path / "images"
    images.mkdir()
    for name in ("hopper.jpg", "chelsea_cat.png"):
        shutil.copyfile(SHARED / "llava-style" / "images" / "photos" / name, images / name)
    records = [
        {
            "id": f"r{i}",
            "image": f"images/{name}",
            "conversations": [
                {"from": "human", "value": "<image>\nWhat is in this image?"},
                {"from": "gpt", "value": f"Picture {i}."},
            ],
        }
        for i, name in enumerate(["hopper.jpg", "chelsea_cat.png"] * 2)
    ]
    records.append(
        {
            "id": "t",
            "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello."}],
        }
    )
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return tmp_path


def test_a_sample_is_the_resized_image_normalised_and_its_tokens(tiny_dataset):
    prep = preprocessing({"stoker.image.max-pixels": "200704"})
    loader = NaiveLoader(pafs.LocalFileSystem(), str(tiny_dataset), TOKENIZER_DIR, prep)
    records = loader.records()
    assert [(r.line, r.obj["id"]) for r in records] == [
        (1, "r0"),
        (2, "r1"),
        (3, "r2"),
        (4, "r3"),
        (5, "t"),
    ]
    sample = loader.sample(records[1])  # chelsea_cat.png, 451x300
    h, w = smart_resize(300, 451, 28, 3136, 200704)
    assert sample.image_grid_thw.tolist() == [[1, h // 14, w // 14]]
    assert sample.pixel_values.dtype == np.float32
    assert sample.pixel_values.shape == (h // 14 * w // 14, 1176)
    with Image.open(tiny_dataset / "images" / "chelsea_cat.png") as im:
        resized = np.asarray(im.convert("RGB").resize((w, h), Image.Resampling.BICUBIC))
    assert np.array_equal(
        unpatchify(sample.pixel_values, sample.image_grid_thw[0], prep.vision), resized
    )
    assert int((sample.input_ids == 151655).sum()) == h // 28 * w // 28
    trained = sample.input_ids[sample.labels != -100]
    assert (
        loader.tokenizer.decode(trained.tolist(), skip_special_tokens=False)
        == "Picture 1.<|im_end|>\n"
    )
    text_only = loader.sample(records[4])
    assert text_only.pixel_values.shape == (0, 1176) and text_only.image_grid_thw.shape == (0, 3)


def test_the_command_runs_every_rank_and_writes_its_totals(tiny_dataset, tmp_path):
    summary = tmp_path / "naive.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "stoker_tools.naive_loader",
            "--dataset",
            str(tiny_dataset),
            "--tokenizer",
            str(TOKENIZER_DIR),
            "--world-size",
            "2",
            "--micro-batch-size",
            "2",
            "--step-time-ms",
            "0",
            "--max-pixels",
            "50176",
            "--summary-json",
            str(summary),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT / "python",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rank 0: steps=2 samples=3" in proc.stdout and "rank 1: steps=1 samples=2" in proc.stdout
    totals = json.loads(summary.read_text())
    assert totals["samples"] == 5 and totals["images"] == 4 and totals["dropped"] == 0
    assert 0 <= totals["wait_time_ratio"] <= 1
    assert "result: OK" in proc.stdout
