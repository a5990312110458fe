import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from harness.paths import REPO_ROOT
from PIL import Image

SCRIPT = REPO_ROOT / "scripts" / "make_sample_dataset.py"


def _run(outdir: Path, *extra: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(outdir), *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _image_refs(rec: dict) -> list[str]:
    if "conversations" in rec:
        return [rec["image"]] if "image" in rec else list(rec.get("images", []))
    return [c["image"] for m in rec["messages"] for c in m["content"] if c["type"] == "image"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("sample")
    return out, _run(out)


def test_generator_produces_the_records_and_images_it_claims(dataset):
    out, summary = dataset
    llava = [json.loads(line) for line in (out / "llava.jsonl").read_text().splitlines()]
    msgs = [json.loads(line) for line in (out / "messages.jsonl").read_text().splitlines()]
    assert summary["records"] == len(llava) + len(msgs) == 48
    assert summary["files"] == {"llava.jsonl": len(llava), "messages.jsonl": len(msgs)}
    assert len({r["id"] for r in llava + msgs}) == 48

    # LLaVA style: conversations alternate human/gpt, one <image> per referenced image
    for r in llava:
        conv = r["conversations"]
        assert [t["from"] for t in conv] == ["human", "gpt"] * (len(conv) // 2)
        assert conv[0]["value"].count("<image>") == len(_image_refs(r)) >= 1
        assert conv[0]["value"].startswith("<image>\n")
    # messages style
    for r in msgs:
        roles = [m["role"] for m in r["messages"] if m["role"] != "system"]
        assert roles == ["user", "assistant"] * (len(roles) // 2)
        assert all(c["type"] in ("image", "text") for m in r["messages"] for c in m["content"])

    all_recs = llava + msgs
    n_images = [len(_image_refs(r)) for r in all_recs]
    assert max(n_images) == 3 and n_images.count(0) == 1  # multi-image, exactly one text-only
    turns = [len(r["conversations"]) // 2 for r in llava] + [
        sum(m["role"] == "user" for m in r["messages"]) for r in msgs
    ]
    assert max(turns) == 3 and min(turns) == 1
    assert sum(any(m["role"] == "system" for m in r["messages"]) for r in msgs) >= 2

    # every referenced image exists under OUTDIR (relative path) and decodes with Pillow
    refs = [p for r in all_recs for p in _image_refs(r)]
    assert len(refs) == len(set(refs)) == summary["images"]
    assert sorted(refs) == sorted(f"images/{p.name}" for p in (out / "images").iterdir())
    formats, sizes = set(), set()
    for rel in refs:
        assert not Path(rel).is_absolute() and ".." not in Path(rel).parts
        with Image.open(out / rel) as im:
            im.load()
            formats.add(im.format)
            sizes.add(im.size)
    assert formats == {"JPEG", "PNG", "GIF", "WEBP", "BMP"}
    assert {(64, 48), (1600, 1200), (1400, 300)} <= sizes
    assert any(h > w for w, h in sizes)  # portrait
    assert all(64 <= w <= 1600 and 48 <= h <= 1200 for w, h in sizes)


def test_generator_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _run(a, "--records", "6")
    _run(b, "--records", "6")

    def digest(d: Path) -> dict:
        return {
            str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*"))
            if p.is_file()
        }

    da = digest(a)
    assert da == digest(b)
    assert "llava.jsonl" in da and "messages.jsonl" in da


def test_generator_rejects_too_few_records(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "x"), "--records", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "--records must be >= 2" in proc.stderr


def test_distinct_images_bounds_the_images_drawn_and_later_records_reuse_them(tmp_path):
    """``--distinct-images K`` (the demo's large dataset): K files, every reference one of them,
    in turn."""
    out = tmp_path / "d"
    summary = _run(out, "--records", "12", "--distinct-images", "4")
    recs = [
        json.loads(line)
        for name in ("llava.jsonl", "messages.jsonl")
        for line in (out / name).read_text().splitlines()
    ]
    refs = [p for r in recs for p in _image_refs(r)]
    files = sorted(f"images/{p.name}" for p in (out / "images").iterdir())
    assert summary["images"] == len(files) == 4 and summary["image_refs"] == len(refs) > 4
    assert sorted(set(refs)) == files
    assert refs[4:8] == refs[:4]  # the fifth reference is the first image again
