import json
import os
import threading
import time

import numpy as np
import pyarrow as pa
import pytest
from conftest import (
    PAD,
    PATCH_DIM,
    SCHEMA_JSON,
    build_record_batch,
    make_job,
    make_samples,
    write_batch,
    write_manifest,
)

from stoker import BatchFormatError, BatchReader, read_batch_file
from stoker.schema import arrow_schema


def _expected_arrays(samples):
    rb = build_record_batch(samples)
    L = rb.schema.field("input_ids").type.list_size
    B = len(samples)
    return {
        "input_ids": np.array(rb.column("input_ids").flatten()).reshape(B, L),
        "labels": np.array(rb.column("labels").flatten()).reshape(B, L),
        "attention_mask": np.array(rb.column("attention_mask").flatten()).reshape(B, L),
        "pixel_values": np.concatenate([s["patches"] for s in samples])
        if samples
        else np.zeros((0, PATCH_DIM)),
        "image_grid_thw": np.array(
            [g for s in samples for g in s["grids"]], dtype=np.int64
        ).reshape(-1, 3),
        "sample_index": np.array([s["index"] for s in samples], dtype=np.int64),
        "source": [s["source"] for s in samples],
    }


def test_shapes_dtypes_and_values_follow_batch_schema(shm_root):
    written = make_job(shm_root, world_size=2, num_steps=3)
    spec = {c["name"]: c for c in json.loads(SCHEMA_JSON.read_text())["columns"]}
    batches = list(BatchReader(shm_root, 1, timeout_s=5))
    assert [b.step for b in batches] == [0, 1, 2]
    assert all(b.rank == 1 for b in batches)
    for b in batches:
        exp = _expected_arrays(written[(b.step, 1)])
        B, L = exp["input_ids"].shape
        dims = {
            "B": B,
            "L": L,
            "P": exp["pixel_values"].shape[0],
            "D": PATCH_DIM,
            "I": exp["image_grid_thw"].shape[0],
        }
        for name, col in spec.items():
            got = getattr(b, name)
            want_shape = tuple(dims.get(d, d) for d in col["reader_shape"])
            if col["reader_dtype"] == "str":
                assert (
                    isinstance(got, list) and len(got) == B and all(isinstance(x, str) for x in got)
                )
                assert got == exp[name]
            else:
                assert got.dtype == np.dtype(col["reader_dtype"]), name
                assert got.shape == want_shape, name
                np.testing.assert_array_equal(got, exp[name])
        assert b.pad_token_id == PAD
        assert b.metadata["stoker.slots"] == "4"
        assert b.num_images == dims["I"]
        # the P = sum(t*h*w) relation of the schema holds
        assert b.pixel_values.shape[0] == int(np.prod(b.image_grid_thw, axis=1).sum())


def test_arrays_are_zero_copy_views_of_the_mapping(shm_root):
    make_job(shm_root, world_size=1, num_steps=1)
    b = next(iter(BatchReader(shm_root, 0, timeout_s=5)))
    start, size = b.mapping_range
    assert size == os.path.getsize(b.path)
    for name, a in b.arrays().items():
        assert a.size > 0, name
        assert not a.flags.writeable, name
        assert not a.flags.owndata, name
        assert start <= a.ctypes.data and a.ctypes.data + a.nbytes <= start + size, name
    whole = np.frombuffer(b._keepalive[1], dtype=np.uint8)
    for name, a in b.arrays().items():
        assert np.shares_memory(a, whole), name


def test_ack_written_and_file_unlinked_only_when_next_step_requested(shm_root):
    make_job(shm_root, world_size=1, num_steps=3)
    rank_dir = shm_root / "rank-0"
    reader = BatchReader(shm_root, 0, timeout_s=5)
    b0 = next(reader)
    ack = rank_dir / "ack.json"
    assert not ack.exists()
    assert (rank_dir / "step-0000000000.arrow").exists()
    keep = b0.input_ids.copy()
    b1 = next(reader)
    assert not (rank_dir / "step-0000000000.arrow").exists()
    assert (rank_dir / "step-0000000001.arrow").exists()
    content = json.loads(ack.read_text())
    assert set(content) == {"consumed_step", "data_wait_s", "elapsed_s", "wait_time_ratio"}
    assert content["consumed_step"] == 0
    assert 0 <= content["data_wait_s"] <= content["elapsed_s"] + 1e-3
    assert content["wait_time_ratio"] == pytest.approx(
        min(1.0, content["data_wait_s"] / content["elapsed_s"]), abs=1e-5
    )
    # memory of the unlinked file stays valid while the arrays are alive
    np.testing.assert_array_equal(b0.input_ids, keep)
    assert b1.step == 1
    next(reader)
    with pytest.raises(StopIteration):
        next(reader)
    assert json.loads(ack.read_text())["consumed_step"] == 2
    assert sorted(p.name for p in rank_dir.iterdir()) == ["ack.json"]  # no tmp files left over
    assert oct(ack.stat().st_mode & 0o777) == oct(0o600)
    assert reader.steps_acked == 3 and reader.batches_read == 3
    assert reader.samples_read == 12
    assert 0.0 <= reader.wait_time_ratio <= 1.0


def test_waits_for_manifest_and_file_published_later(shm_root):
    samples = make_samples(0, 0, 2)
    delay = 0.3

    def publisher():
        time.sleep(delay / 2)
        write_manifest(shm_root, world_size=1, num_steps=1)
        time.sleep(delay / 2)
        write_batch(shm_root, 0, 0, build_record_batch(samples))

    t = threading.Thread(target=publisher)
    reader = BatchReader(shm_root, 0, poll_interval_s=0.005, timeout_s=10)
    t0 = time.monotonic()
    t.start()
    b = next(reader)
    waited = time.monotonic() - t0
    t.join()
    assert waited >= delay * 0.9
    assert b.sample_index.tolist() == [s["index"] for s in samples]
    assert reader.data_wait_s >= delay * 0.9
    assert reader.wait_time_ratio > 0.5


def test_timeout_names_the_missing_file(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=2)
    reader = BatchReader(shm_root, 0, poll_interval_s=0.01, timeout_s=0.1)
    with pytest.raises(TimeoutError, match="step-0000000000.arrow"):
        next(reader)


@pytest.mark.parametrize("seq_len", [0, 4])
def test_empty_batch_b0(shm_root, seq_len):
    write_manifest(shm_root, world_size=1, num_steps=2)
    write_batch(
        shm_root, 0, 0, pa.RecordBatch.from_pylist([], schema=arrow_schema(seq_len, PATCH_DIM))
    )
    write_batch(shm_root, 1, 0, build_record_batch(make_samples(1, 0, 1)))
    reader = BatchReader(shm_root, 0, timeout_s=5)
    b = next(reader)
    assert b.num_samples == 0
    assert b.input_ids.shape == (0, seq_len) and b.input_ids.dtype == np.int64
    assert b.labels.shape == (0, seq_len) and b.attention_mask.shape == (0, seq_len)
    assert b.pixel_values.shape == (0, PATCH_DIM) and b.pixel_values.dtype == np.float32
    assert b.image_grid_thw.shape == (0, 3) and b.image_grid_thw.dtype == np.int64
    assert b.sample_index.shape == (0,)
    assert b.source == []
    assert next(reader).num_samples == 1  # an empty step does not stop the epoch
    assert reader.samples_read == 1


def test_file_with_no_record_batch_reads_as_empty(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=1)
    (shm_root / "rank-0").mkdir()
    p = shm_root / "rank-0" / "step-0000000000.arrow"
    with pa.OSFile(str(p), "wb") as sink, pa.ipc.new_file(sink, arrow_schema(3, PATCH_DIM)):
        pass
    b = next(BatchReader(shm_root, 0, timeout_s=5))
    assert (
        b.num_samples == 0
        and b.input_ids.shape == (0, 3)
        and b.pixel_values.shape == (0, PATCH_DIM)
    )


def test_two_record_batches_is_an_error(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=1)
    (shm_root / "rank-0").mkdir()
    rb = build_record_batch(make_samples(0, 0, 2))
    p = shm_root / "rank-0" / "step-0000000000.arrow"
    with pa.OSFile(str(p), "wb") as sink, pa.ipc.new_file(sink, rb.schema) as w:
        w.write_batch(rb)
        w.write_batch(rb)
    with pytest.raises(BatchFormatError, match="2 record batches"):
        next(BatchReader(shm_root, 0, timeout_s=5))


def test_compressed_file_is_refused_rather_than_copied(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=1)
    (shm_root / "rank-0").mkdir()
    rb = build_record_batch(make_samples(0, 0, 2))
    p = shm_root / "rank-0" / "step-0000000000.arrow"
    opts = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.OSFile(str(p), "wb") as sink, pa.ipc.new_file(sink, rb.schema, options=opts) as w:
        w.write_batch(rb)
    with pytest.raises(BatchFormatError, match="not inside the file mapping"):
        next(BatchReader(shm_root, 0, timeout_s=5))


def test_sliced_arrays_respect_offsets(shm_root):
    """A batch whose columns are slices (non-zero Arrow offsets) reads the right rows."""
    samples = make_samples(0, 0, 6)
    full = build_record_batch(samples)
    sliced = full.slice(2, 3)
    write_manifest(shm_root, world_size=1, num_steps=1)
    path = write_batch(shm_root, 0, 0, sliced)
    b = read_batch_file(path)
    exp = _expected_arrays(samples)
    L = exp["input_ids"].shape[1]
    np.testing.assert_array_equal(b.input_ids, exp["input_ids"][2:5])
    assert b.input_ids.shape == (3, L)
    np.testing.assert_array_equal(b.sample_index, exp["sample_index"][2:5])
    np.testing.assert_array_equal(
        b.pixel_values, np.concatenate([s["patches"] for s in samples[2:5]])
    )
    np.testing.assert_array_equal(
        b.image_grid_thw,
        np.array([g for s in samples[2:5] for g in s["grids"]], np.int64).reshape(-1, 3),
    )
    assert b.source == exp["source"][2:5]


def test_in_memory_offsets_are_respected_without_copy():
    """Directly exercise the offset arithmetic on in-memory sliced arrays (buffers not rewritten)."""
    from stoker.reader import _fixed_rows, _list_of_fixed

    samples = make_samples(1, 0, 5)
    rb = build_record_batch(samples).slice(1, 3)
    assert rb.column("input_ids").offset == 1
    ids = _fixed_rows(rb.column("input_ids"), "mem", "input_ids", "int64")
    exp = _expected_arrays(samples)
    np.testing.assert_array_equal(ids, exp["input_ids"][1:4])
    assert np.shares_memory(
        ids, np.frombuffer(rb.column("input_ids").values.buffers()[1], np.int64)
    )
    pv = _list_of_fixed(rb.column("pixel_values"), "mem", "pixel_values", "float32")
    np.testing.assert_array_equal(pv, np.concatenate([s["patches"] for s in samples[1:4]]))


def test_wrong_schema_raises_clear_error_naming_file(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=1)
    rb = build_record_batch(make_samples(0, 0, 2))
    # input_ids as int32 and pixel_values missing
    bad = pa.RecordBatch.from_arrays(
        [
            rb.column("sample_index"),
            rb.column("source"),
            pa.FixedSizeListArray.from_arrays(
                rb.column("input_ids").flatten().cast(pa.int32()),
                rb.schema.field("input_ids").type.list_size,
            ),
            rb.column("labels"),
            rb.column("attention_mask"),
            rb.column("image_grid_thw"),
        ],
        names=["sample_index", "source", "input_ids", "labels", "attention_mask", "image_grid_thw"],
    )
    path = write_batch(shm_root, 0, 0, bad)
    with pytest.raises(BatchFormatError) as ei:
        next(BatchReader(shm_root, 0, timeout_s=5))
    msg = str(ei.value)
    assert str(path) in msg
    assert "missing column 'pixel_values'" in msg
    assert "'input_ids'" in msg and "int32" in msg


def test_patch_dim_mismatch_with_manifest_is_an_error(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=1, patch_dim=1176)
    write_batch(
        shm_root, 0, 0, build_record_batch(make_samples(0, 0, 2, patch_dim=588), patch_dim=588)
    )
    with pytest.raises(BatchFormatError, match="patch_dim=1176"):
        next(BatchReader(shm_root, 0, timeout_s=5))


def test_step_metadata_must_match_file_name(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=1)
    write_batch(
        shm_root, 0, 0, build_record_batch(make_samples(0, 0, 1)), metadata={"stoker.step": "7"}
    )
    with pytest.raises(BatchFormatError, match="stoker.step"):
        next(BatchReader(shm_root, 0, timeout_s=5))


def test_garbage_file_is_a_clear_error(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=1)
    (shm_root / "rank-0").mkdir()
    p = shm_root / "rank-0" / "step-0000000000.arrow"
    p.write_bytes(b"not arrow at all" * 10)
    with pytest.raises(BatchFormatError, match="not an Arrow IPC file"):
        next(BatchReader(shm_root, 0, timeout_s=5))


def test_rank_outside_world_size(shm_root):
    write_manifest(shm_root, world_size=2, num_steps=1)
    with pytest.raises(ValueError, match="world_size 2"):
        next(BatchReader(shm_root, 2, timeout_s=5))


def test_start_step_resumes(shm_root):
    make_job(shm_root, world_size=1, num_steps=4)
    assert [b.step for b in BatchReader(shm_root, 0, timeout_s=5, start_step=2)] == [2, 3]


def test_to_torch_shares_memory_or_raises_clear_import_error(shm_root):
    make_job(shm_root, world_size=1, num_steps=1)
    b = next(BatchReader(shm_root, 0, timeout_s=5))
    try:
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="needs PyTorch"):
            b.to_torch()
        return
    t = b.to_torch()
    assert t["input_ids"].dtype == torch.int64 and tuple(t["input_ids"].shape) == b.input_ids.shape
    assert t["pixel_values"].data_ptr() == b.pixel_values.ctypes.data
