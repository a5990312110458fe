"""Packed batches (``stoker.packing.enabled``; docs/batch-protocol.md, "Packed batches"): the
reader's arrays over them (per-row sample lists flattened, ``position_ids`` as a strided view,
``cu_seqlens`` flattened for flash-attention), its model inputs without ``attention_mask``, and a
``BatchFormatError`` naming the file for every way a file can break the packed layout.

The files are written with pyarrow by the harness helpers (:func:`harness.batches.packed_arrays`,
:func:`harness.batches.packed_record_batch`) as the sink writes them; the real job's packed batches are
checked by ``job``'s ``ExactlyOnceITCase`` (packed cases) and ``bench/packing.sh``."""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pytest
from harness.batches import (
    IMAGE_PAD,
    PAD,
    build_record_batch,
    make_packed_samples,
    make_samples,
    mrope_positions,
    packed_arrays,
    packed_record_batch,
    write_batch,
    write_manifest,
)
from harness.paths import SCHEMA_JSON

from stoker import BatchFormatError, BatchReader, Manifest
from stoker.batch import read_batch_file

D = 8
T = 128
PACKED = {"stoker.packing_max_tokens": str(T)}


def _rows(seed: int = 0, first_index: int = 0) -> list[list[dict]]:
    """Three rows of 2, 1 and 3 samples (the middle one without a padding tail: the longest)."""
    s = make_packed_samples(6, first_index=first_index, seed=seed, patch_dim=D)
    return [s[0:2], s[2:3], s[3:6]]


def _longest_last(rows):
    """``rows`` with the longest row last and every row shorter than the longest padded."""
    return sorted(rows, key=lambda r: sum(len(s["ids"]) for s in r))


def _write(root, a, *, step=0, metadata=None):
    meta = dict(PACKED)
    meta.update(metadata or {})
    return write_batch(root, step, 0, packed_record_batch(a, patch_dim=D), metadata=meta)


def _expected_cu(a) -> list[int]:
    L = a["ids"].shape[1]
    flat = [0]
    for r, bounds in enumerate(a["cu"]):
        flat += [r * L + b for b in bounds[1:]]
    return flat


# ------------------------------------------------------------------ round trip
def test_packed_batch_reads_as_documented(shm_root):
    rows = _rows()
    a = packed_arrays(rows, patch_dim=D)
    path = _write(shm_root, a, metadata={"stoker.backfilled_slots": "1,4"})
    b = read_batch_file(path, micro_batch_size=4, patch_dim=D, packing_max_tokens=T)
    samples = [s for row in rows for s in row]
    R, L = a["ids"].shape
    assert b.packed and b.packing_max_tokens == T
    assert (b.num_rows, b.num_samples, b.seq_len) == (3, 6, L)
    np.testing.assert_array_equal(b.input_ids, a["ids"])
    np.testing.assert_array_equal(b.labels, a["labels"])
    np.testing.assert_array_equal(b.attention_mask, a["mask"])
    assert b.sample_index.dtype == np.int64
    assert b.sample_index.tolist() == [s["index"] for s in samples]
    assert b.source == [s["source"] for s in samples]
    assert b.location == [s["location"] for s in samples]
    assert b.row_offsets.tolist() == [0, 2, 3, 6]
    spans = []
    for r, row in enumerate(rows):
        t = 0
        for s in row:
            spans.append([r, t, t + len(s["ids"])])
            t += len(s["ids"])
    assert b.sample_spans.tolist() == spans
    for k, (r, start, end) in enumerate(spans):
        assert b.input_ids[r, start:end].tolist() == samples[k]["ids"]
    assert b.position_ids.shape == (4, R, L) and b.position_ids.dtype == np.int64
    np.testing.assert_array_equal(b.position_ids, a["positions"].transpose(1, 0, 2))
    for k, (r, start, end) in enumerate(spans):
        np.testing.assert_array_equal(
            b.position_ids[:, r, start:end], mrope_positions(samples[k]["ids"], samples[k]["grids"])
        )
    assert b.cu_seqlens.dtype == np.int32
    assert b.cu_seqlens.tolist() == _expected_cu(a)
    assert b.cu_seqlens[-1] == R * L
    np.testing.assert_array_equal(b.pixel_values, np.concatenate([s["patches"] for s in samples]))
    np.testing.assert_array_equal(
        b.image_grid_thw, np.array([g for s in samples for g in s["grids"]]).reshape(-1, 3)
    )
    assert b.backfilled_slots == (1, 4)
    np.testing.assert_array_equal(b.mm_token_type_ids, (a["ids"] == IMAGE_PAD).astype(np.int64))
    # model inputs: position_ids instead of attention_mask
    arrays = b.arrays()
    assert sorted(arrays) == sorted(
        [
            "input_ids",
            "labels",
            "position_ids",
            "mm_token_type_ids",
            "pixel_values",
            "image_grid_thw",
        ]
    )
    assert arrays["position_ids"] is b.position_ids


def test_packed_shapes_and_dtypes_follow_batch_schema(shm_root):
    spec = json.loads(SCHEMA_JSON.read_text())["columns"]
    a = packed_arrays(_rows(), patch_dim=D)
    b = read_batch_file(_write(shm_root, a))
    R, L = a["ids"].shape
    dims = {
        "B": R,
        "L": L,
        "S": 6,
        "N+1": len(_expected_cu(a)),
        "P": b.pixel_values.shape[0],
        "D": D,
        "I": b.image_grid_thw.shape[0],
        "PV": 0,  # packed batches hold no video yet
        "V": 0,
    }
    for col in spec:
        got = getattr(b, col["name"])
        shape = col.get("packed", {}).get("reader_shape", col["reader_shape"])
        want = tuple(dims.get(d, d) for d in shape)
        if col["reader_dtype"] == "str":
            assert len(got) == want[0] and all(isinstance(x, str) for x in got)
        else:
            assert got.dtype == np.dtype(col["reader_dtype"]), col["name"]
            assert got.shape == want, col["name"]


def test_position_ids_are_a_strided_view_of_the_mapping(shm_root):
    a = packed_arrays(_rows(), patch_dim=D)
    b = read_batch_file(_write(shm_root, a))
    lo, size = b.mapping_range
    pos = b.position_ids
    assert not pos.flags.writeable and not pos.flags.c_contiguous
    assert pos.strides == (b.seq_len * 8, 4 * b.seq_len * 8, 8)  # axis-major rows of 4*L values
    assert lo <= pos.ctypes.data and pos.ctypes.data + pos.nbytes <= lo + size
    for arr in (b.sample_index, b.input_ids):
        assert lo <= arr.ctypes.data < lo + size


def test_a_packed_batch_whose_every_sample_is_a_back_fill_is_valid(shm_root):
    """A rank the step's balance left without a sample gets a copy of another one."""
    a = packed_arrays([make_packed_samples(1, patch_dim=D)], patch_dim=D)
    b = read_batch_file(_write(shm_root, a, metadata={"stoker.backfilled_slots": "0"}))
    assert b.backfilled_slots == (0,) and b.num_samples == 1
    assert b.cu_seqlens.tolist() == [0, b.seq_len]


def test_an_empty_packed_batch(shm_root):
    b = read_batch_file(_write(shm_root, packed_arrays([], patch_dim=D)), packing_max_tokens=T)
    assert b.packed and (b.num_rows, b.num_samples, b.seq_len) == (0, 0, 0)
    assert b.position_ids.shape == (4, 0, 0)
    assert b.cu_seqlens.tolist() == [0]
    assert b.sample_spans.shape == (0, 3) and b.row_offsets.tolist() == [0]


def test_sliced_packed_columns_respect_their_offsets(shm_root):
    """Columns that are slices (non-zero Arrow offsets, list offsets not from 0) read the right
    rows; the longest row is in the slice, so L is still the longest row's."""
    rows = _longest_last(_rows() + [make_packed_samples(2, first_index=10, patch_dim=D)])
    full = packed_record_batch(packed_arrays(rows, patch_dim=D), patch_dim=D)
    path = write_batch(shm_root, 0, 0, full.slice(2, 2), metadata=PACKED)
    b = read_batch_file(path)
    expected = packed_arrays(rows[2:], patch_dim=D)
    kept = [s for row in rows[2:] for s in row]
    assert b.sample_index.tolist() == [s["index"] for s in kept]
    assert b.source == [s["source"] for s in kept]
    assert b.location == [s["location"] for s in kept]
    assert b.row_offsets.tolist() == [0, len(rows[2]), len(kept)]
    assert b.cu_seqlens.tolist() == _expected_cu(expected)
    np.testing.assert_array_equal(b.input_ids, expected["ids"])
    np.testing.assert_array_equal(b.position_ids, expected["positions"].transpose(1, 0, 2))
    np.testing.assert_array_equal(b.pixel_values, np.concatenate([s["patches"] for s in kept]))


def test_an_unpacked_batch_is_read_as_before(shm_root):
    samples = make_samples(0, 0, 4, patch_dim=D)
    path = write_batch(shm_root, 0, 0, build_record_batch(samples, patch_dim=D))
    b = read_batch_file(path, micro_batch_size=4, packing_max_tokens=None)
    assert not b.packed and b.packing_max_tokens is None
    assert b.position_ids is None and b.cu_seqlens is None
    assert b.num_rows == b.num_samples == 4
    assert b.row_offsets.tolist() == [0, 1, 2, 3, 4]
    assert b.sample_spans.tolist() == [[k, 0, len(s["ids"])] for k, s in enumerate(samples)]
    assert "attention_mask" in b.arrays() and "position_ids" not in b.arrays()
    with pytest.raises(ValueError, match="not a packed batch"):
        b.flash_varlen_kwargs()


def test_the_reader_counts_samples_and_rows_of_a_packed_job(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=2, patch_dim=D, packing_max_tokens=T)
    m = Manifest.load(shm_root / "manifest.json")
    assert m.packing_max_tokens == T
    _write(shm_root, packed_arrays(_rows(), patch_dim=D), metadata={"stoker.backfilled_slots": "2"})
    _write(shm_root, packed_arrays(_rows(1, 6)[:2], patch_dim=D), step=1)
    reader = BatchReader(shm_root, 0, timeout_s=5)
    batches = list(reader)
    assert [b.step for b in batches] == [0, 1]
    assert reader.samples_read == 6 + 3 and reader.rows_read == 3 + 2
    assert reader.backfilled_read == 1
    counters = reader.counters()
    assert (counters["samples_read"], counters["rows_read"]) == (9, 5)


@pytest.mark.parametrize(
    ("manifest_tokens", "file_meta", "match"),
    [
        (None, PACKED, "packing_max_tokens says unpacked batches, the file holds rows of 128"),
        (T, {}, "rows of 128 tokens, the file holds an unpacked batch"),
        (256, PACKED, "rows of 256 tokens, the file holds rows of 128"),
    ],
)
def test_a_batch_packed_otherwise_than_the_manifest_says_is_an_error(
    shm_root, manifest_tokens, file_meta, match
):
    write_manifest(
        shm_root, world_size=1, num_steps=1, patch_dim=D, packing_max_tokens=manifest_tokens
    )
    if file_meta:
        write_batch(
            shm_root, 0, 0, packed_record_batch(packed_arrays(_rows(), patch_dim=D), patch_dim=D),
            metadata=file_meta,
        )  # fmt: skip
    else:
        write_batch(
            shm_root, 0, 0, build_record_batch(make_samples(0, 0, 4, patch_dim=D), patch_dim=D)
        )
    with pytest.raises(BatchFormatError, match=re.escape(match)):
        next(BatchReader(shm_root, 0, timeout_s=5))


@pytest.mark.parametrize("value", ["x", "0", "-4", " 64", "6.4", ""])
def test_a_packing_max_tokens_that_is_not_a_positive_integer_is_an_error(shm_root, value):
    a = packed_arrays(_rows(), patch_dim=D)
    path = _write(shm_root, a, metadata={"stoker.packing_max_tokens": value})
    with pytest.raises(BatchFormatError, match=r"step-0000000000\.arrow.*not a positive integer"):
        read_batch_file(path)


@pytest.mark.parametrize("value", ["-1", "2.5", "true", '"64"'])
def test_a_manifest_packing_max_tokens_that_is_not_a_positive_integer_is_an_error(shm_root, value):
    write_manifest(shm_root, world_size=1, num_steps=1)
    path = shm_root / "manifest.json"
    path.write_text(
        path.read_text().replace('"packing_max_tokens": null', f'"packing_max_tokens": {value}')
    )
    with pytest.raises(
        BatchFormatError, match="packing_max_tokens must be a positive integer or null"
    ):
        Manifest.load(path)


def test_a_manifest_without_packing_max_tokens_is_unpacked(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=1)
    path = shm_root / "manifest.json"
    path.write_text(path.read_text().replace(', "packing_max_tokens": null', ""))
    assert "packing_max_tokens" not in path.read_text()
    assert Manifest.load(path).packing_max_tokens is None


def test_packed_columns_in_an_unpacked_batch_are_an_error(shm_root):
    a = packed_arrays(_rows(), patch_dim=D)
    path = write_batch(shm_root, 0, 0, packed_record_batch(a, patch_dim=D))  # no packing metadata
    with pytest.raises(BatchFormatError) as e:
        read_batch_file(path)
    msg = str(e.value)
    assert str(path) in msg
    assert "column 'sample_index' has type list<item: int64 not null>, expected int64" in msg
    assert "column 'position_ids' is only in packed batches" in msg
    assert "column 'cu_seqlens' is only in packed batches" in msg


def test_an_unpacked_layout_under_packing_metadata_is_an_error(shm_root):
    rb = build_record_batch(make_samples(0, 0, 4, patch_dim=D), patch_dim=D)
    path = write_batch(shm_root, 0, 0, rb, metadata=PACKED)
    with pytest.raises(BatchFormatError) as e:
        read_batch_file(path)
    msg = str(e.value)
    assert "column 'sample_index' has type int64, expected list<int64 not null>" in msg
    assert "missing column 'position_ids' (fixed_size_list<int64 not null>[4L])" in msg
    assert "missing column 'cu_seqlens'" in msg


# ------------------------------------------------------------------ adversarial layouts
def _set(a, key, r, i, v):
    a[key][r][i] = v


def _shift_text_axis(a):
    # the second sample of row 0 continues the first's text positions: attention would cross
    n0 = len(a["_rows"][0][0]["ids"])
    a["positions"][0, 0, n0:] += n0


def _wider_than_the_longest_row(a):
    """Every row padded 2 tokens past the longest (consistently: mask, labels, tails)."""
    for key, fill in (("ids", PAD), ("labels", -100), ("mask", 0)):
        a[key] = np.concatenate([a[key], np.full((a[key].shape[0], 2), fill)], axis=1)
    R, _, L = a["positions"].shape
    a["positions"] = np.concatenate([a["positions"], np.zeros((R, 4, 2), np.int64)], axis=2)
    for r, bounds in enumerate(a["cu"]):
        end = bounds[len(a["index"][r])]
        a["positions"][r, :, end:] = np.arange(L + 2 - end)
        a["cu"][r] = bounds[: len(a["index"][r]) + 1] + [L + 2]


def _row_without_a_sample(a):
    a["index"][1], a["source"][1], a["location"][1] = [], [], []


def _in_other_rows(column):
    """Moves all but the first of row 0's ``column`` entries to row 1."""

    def breaks(a):
        a[column][0], a[column][1] = a[column][0][:1], a[column][0][1:] + a[column][1]

    return breaks


def _two_boundaries_short(a):
    del a["cu"][2][1:3]


def _one_boundary_short(a):
    # [0, a, b, c, L] -> [0, b, c, L]: as many as 3 samples without a tail need, but then the
    # samples' tokens run into the padding
    del a["cu"][2][1]


def _decreasing(a):
    a["cu"][2][1], a["cu"][2][2] = a["cu"][2][2], a["cu"][2][1]


def _mask_hole(a):
    a["mask"][2, 1] = 0


def _tail_mask(a):
    a["mask"][0, -1] = 1


def _first_label(a):
    n0 = len(a["_rows"][0][0]["ids"])
    a["labels"][0, n0] = a["ids"][0, n0]  # the second sample's first token trained


def _tail_positions(a):
    a["positions"][0, 2, -1] = 7


def _tail_pad(a):
    a["ids"][0, -1] = 5


ADVERSARIAL = [
    (_shift_text_axis, r"position_ids' text axis at row 0, token \d+ is \d+, not 0"),
    (lambda a: _set(a, "cu", 2, -1, a["ids"].shape[1] - 1), "does not run from 0 to L"),
    (lambda a: _set(a, "cu", 0, 0, 1), "does not run from 0 to L"),
    (_decreasing, "is not strictly increasing"),
    (_two_boundaries_short, r"row 2's cu_seqlens has 3 boundaries for its 3 samples"),
    (_one_boundary_short, "row 2's attention_mask is not 1 on its"),
    (_row_without_a_sample, "row 1 of the packed batch lists no sample"),
    (_in_other_rows("source"), "sample_index and source list different samples per row"),
    (_in_other_rows("location"), "sample_index and location list different samples per row"),
    (_mask_hole, "row 2's attention_mask is not 1 on its"),
    (_tail_mask, "row 0's attention_mask is not 1 on its"),
    (_first_label, "row 0's labels are not -100 on every sample's first token"),
    (_tail_positions, "position_ids' axis 2 does not count 0 .. on the padding tail"),
    (_tail_pad, f"not padded with pad token {PAD}"),
    (_wider_than_the_longest_row, "the longest packed row holds"),
]


@pytest.mark.parametrize(
    ("breaks", "match"), ADVERSARIAL, ids=[str(i) for i in range(len(ADVERSARIAL))]
)
def test_a_broken_packed_layout_is_a_format_error_naming_the_file(shm_root, breaks, match):
    # rows of 2, 1 and 3 samples; the middle one the longest (no padding tail), the others not
    rows = _rows()
    rows[1] = [
        dict(rows[1][0], ids=list(range(100, 180)), grids=[], patches=np.zeros((0, D), np.float32))
    ]
    a = packed_arrays(rows, patch_dim=D)
    a["_rows"] = rows
    breaks(a)
    del a["_rows"]
    path = _write(shm_root, a)
    with pytest.raises(BatchFormatError, match=re.escape(str(path)) + ".*" + match):
        read_batch_file(path)


@pytest.mark.parametrize(
    ("value", "match"),
    [("6", r"distinct samples in \[0, 6\)"), ("1,1", "distinct"), ("x", "not comma-separated")],
)
def test_back_filled_positions_outside_the_samples_are_an_error(shm_root, value, match):
    path = _write(
        shm_root, packed_arrays(_rows(), patch_dim=D), metadata={"stoker.backfilled_slots": value}
    )
    with pytest.raises(BatchFormatError, match=match):
        read_batch_file(path)


def test_rows_longer_than_packing_max_tokens_are_an_error(shm_root):
    a = packed_arrays(_rows(), patch_dim=D)
    L = a["ids"].shape[1]
    path = _write(shm_root, a, metadata={"stoker.packing_max_tokens": str(L - 1)})
    with pytest.raises(
        BatchFormatError, match=f"rows of L={L} tokens, more than stoker.packing_max_tokens={L - 1}"
    ):
        read_batch_file(path)


@pytest.mark.parametrize("width", ["3L", "4L+2"])
def test_position_ids_of_another_width_is_a_schema_error(shm_root, width):
    a = packed_arrays(_rows(), patch_dim=D)
    rb = packed_record_batch(a, patch_dim=D)
    R, L = a["ids"].shape
    per_row = a["positions"].reshape(R, -1)
    per_row = per_row[:, : 3 * L] if width == "3L" else np.concatenate([per_row, per_row[:, :2]], 1)
    n = per_row.shape[1]
    typ = pa.list_(pa.field("item", pa.int64(), nullable=False), n)
    other = pa.FixedSizeListArray.from_arrays(pa.array(per_row.reshape(-1), pa.int64()), n).cast(
        typ
    )
    cols = [other if c == "position_ids" else rb.column(c) for c in rb.schema.names]
    fields = [
        pa.field(f.name, typ, nullable=False) if f.name == "position_ids" else f for f in rb.schema
    ]
    rb = pa.RecordBatch.from_arrays(cols, schema=pa.schema(fields))
    path = write_batch(shm_root, 0, 0, rb, metadata=PACKED)
    # 3L values: read as 4 * (3L/4), which disagrees with the other columns' L; 4L+2: no L at all
    match = (
        f"column 'position_ids' has L={3 * L // 4}, other columns have L={L}"
        if width == "3L"
        else re.escape(
            f"column 'position_ids' has type {typ}, expected fixed_size_list<int64 not null>[4L]"
        )
    )
    with pytest.raises(BatchFormatError, match=match):
        read_batch_file(path)


def test_pixel_values_must_match_the_grids_in_a_packed_batch_too(shm_root):
    a = packed_arrays(_rows(), patch_dim=D)
    assert any(a["grids"])
    r = next(i for i, g in enumerate(a["grids"]) if g)
    a["patches"][r] = a["patches"][r][1:]
    with pytest.raises(
        BatchFormatError, match="pixel_values has .* patches but image_grid_thw implies"
    ):
        read_batch_file(_write(shm_root, a))


def test_packed_samples_helpers_are_self_consistent():
    """The fixture's samples: image tokens as their grids need them, positions as documented."""
    for s in make_packed_samples(20, patch_dim=D):
        ids = np.asarray(s["ids"])
        assert int((ids == IMAGE_PAD).sum()) == sum(t * h * w // 4 for t, h, w in s["grids"])
        pos = mrope_positions(s["ids"], s["grids"])
        assert pos[0].tolist() == list(range(len(ids)))
        text = ids != IMAGE_PAD
        # text tokens count on by one from the last position on every M-RoPE axis
        assert (pos[1][text] == pos[2][text]).all() and (pos[2][text] == pos[3][text]).all()
