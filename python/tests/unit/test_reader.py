import json
import os
import re
import shutil
import struct
import threading
import time

import numpy as np
import pyarrow as pa
import pytest
from harness.batches import (
    GEN,
    MODEL_INPUT_NAMES,
    PAD,
    PATCH_DIM,
    bf16_rne,
    build_record_batch,
    make_job,
    make_samples,
    rank_dir,
    write_batch,
    write_manifest,
    write_steps,
)
from harness.paths import SCHEMA_JSON
from harness.polling import eventually

from stoker import (
    BatchFormatError,
    BatchReader,
    Manifest,
    ResumeError,
    VisionSettings,
    bfloat16_to_float32,
    read_batch_file,
)
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
        # make_samples has no videos
        "pixel_values_videos": np.zeros((0, PATCH_DIM), np.float32),
        "video_grid_thw": np.zeros((0, 3), np.int64),
        "second_per_grid_ts": np.zeros((0,), np.float32),
        "sample_index": np.array([s["index"] for s in samples], dtype=np.int64),
        "source": [s["source"] for s in samples],
        "location": [s["location"] for s in samples],
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
            "PV": 0,
            "V": 0,
        }
        for name, col in spec.items():
            got = getattr(b, name)
            if col.get("packed_only"):
                assert got is None, name  # not a packed batch
                continue
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
    # every array but mm_token_type_ids (computed from input_ids, documented as a new array)
    views = {k: v for k, v in b.arrays().items() if k != "mm_token_type_ids"}
    assert sorted(views) == [
        "attention_mask",
        "image_grid_thw",
        "input_ids",
        "labels",
        "pixel_values",
    ]
    for name, a in views.items():
        assert a.size > 0, name
        assert not a.flags.writeable, name
        assert not a.flags.owndata, name
        assert start <= a.ctypes.data and a.ctypes.data + a.nbytes <= start + size, name
    whole = np.frombuffer(b._keepalive[1], dtype=np.uint8)
    for name, a in views.items():
        assert np.shares_memory(a, whole), name
    assert not b.arrays()["mm_token_type_ids"].flags.writeable


@pytest.mark.parametrize("read_ahead", [False, True])
def test_ack_written_and_file_unlinked_only_when_next_step_requested(shm_root, read_ahead):
    make_job(shm_root, world_size=1, num_steps=3)
    rdir = rank_dir(shm_root, 0)
    reader = BatchReader(shm_root, 0, timeout_s=5, read_ahead=read_ahead)
    b0 = next(reader)
    assert reader.rank_dir == rdir and reader.generation == GEN
    ack = rdir / "ack.json"
    assert not ack.exists()
    assert (rdir / "step-0000000000.arrow").exists()
    keep = b0.input_ids.copy()
    b1 = next(reader)
    step0 = rdir / "step-0000000000.arrow"
    if read_ahead:  # acked and unlinked by the background thread
        assert eventually(lambda: ack.exists() and not step0.exists())
    else:
        assert ack.exists() and not step0.exists()
    assert (rdir / "step-0000000001.arrow").exists()
    content = json.loads(ack.read_text())
    assert set(content) == {"consumed_step", "data_wait_s", "elapsed_s", "wait_time_ratio"}
    assert content["consumed_step"] == 0
    assert 0 <= content["data_wait_s"] <= content["elapsed_s"] + 1e-3
    # the ratio is computed before both times are rounded to 1 us: allow for that rounding
    assert content["wait_time_ratio"] == pytest.approx(
        min(1.0, content["data_wait_s"] / content["elapsed_s"]),
        abs=1e-5 + 2e-6 / content["elapsed_s"],
    )
    # memory of the unlinked file stays valid while the arrays are alive
    np.testing.assert_array_equal(b0.input_ids, keep)
    assert b1.step == 1
    next(reader)
    with pytest.raises(StopIteration):
        next(reader)
    assert json.loads(ack.read_text())["consumed_step"] == 2
    assert sorted(p.name for p in rdir.iterdir()) == ["ack.json"]  # no tmp files left over
    assert oct(ack.stat().st_mode & 0o777) == oct(0o600)
    assert reader.steps_acked == 3 and reader.batches_read == 3
    assert reader.batches_read_ahead == (2 if read_ahead else 0)
    assert reader.samples_read == 12
    assert 0.0 <= reader.wait_time_ratio <= 1.0


def test_waits_for_manifest_and_file_published_later(shm_root):
    samples = make_samples(0, 0, 2)
    delay = 0.3

    def publisher():
        time.sleep(delay / 2)
        write_manifest(shm_root, world_size=1, num_steps=1, micro_batch_size=2)
        time.sleep(delay / 2)
        write_batch(shm_root, 0, 0, build_record_batch(samples), slots=2)

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


def test_read_ahead_maps_a_file_published_while_the_trainer_computes(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=2)
    written = write_steps(shm_root, [0], world_size=1)
    reader = BatchReader(shm_root, 0, poll_interval_s=0.005, timeout_s=10)
    assert next(reader).step == 0
    assert reader.batches_read_ahead == 0  # the first batch is mapped in the request

    # published after the request returned, while the "trainer" computes
    later = threading.Timer(0.1, lambda: written.update(write_steps(shm_root, [1], world_size=1)))
    later.start()
    later.join()
    assert eventually(lambda: reader._ahead is not None and reader._ahead.wait(0))
    b1 = next(reader)
    assert (b1.step, reader.batches_read_ahead) == (1, 1)
    exp = _expected_arrays(written[(1, 0)])
    np.testing.assert_array_equal(b1.input_ids, exp["input_ids"])
    np.testing.assert_array_equal(b1.pixel_values, exp["pixel_values"])
    with pytest.raises(StopIteration):
        next(reader)


@pytest.mark.parametrize("depth", [1, 2])
def test_a_job_gated_by_the_acks_is_read_to_the_end(shm_root, depth):
    """The job writes step s only once step s - depth is acked (its prefetch gate). A request
    whose file is not there yet hands over its ack before it waits, one whose batch the
    read-ahead had mapped at its end; either way neither side waits for the other. Depth 1
    gives the read-ahead nothing to map ahead, depth 2 the next step while the trainer
    computes."""
    write_manifest(shm_root, world_size=1, num_steps=6)
    ack = rank_dir(shm_root, 0) / "ack.json"

    def job():
        for step in range(6):
            if not eventually(lambda s=step: s <= _consumed_step(ack) + depth, timeout_s=5):
                return
            write_steps(shm_root, [step], world_size=1)

    t = threading.Thread(target=job)
    t.start()
    reader = BatchReader(shm_root, 0, timeout_s=5)
    steps = []
    for b in reader:
        steps.append(b.step)
        time.sleep(0.05)  # the trainer computes
    t.join()
    assert steps == list(range(6))
    assert _consumed_step(ack) == 5


def _consumed_step(ack):
    """``consumed_step`` of ``ack.json``, or -1 while there is none."""
    try:
        return json.loads(ack.read_text())["consumed_step"]
    except (OSError, ValueError):
        return -1


def test_read_ahead_format_error_is_raised_by_the_request_for_that_step(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=3)
    write_steps(shm_root, [0], world_size=1)
    (rank_dir(shm_root, 0) / "step-0000000001.arrow").write_bytes(b"not arrow at all" * 10)
    reader = BatchReader(shm_root, 0, timeout_s=5)
    assert next(reader).step == 0  # the background thread's failure is not this request's
    assert eventually(lambda: reader._ahead.wait(0))
    for _ in range(2):  # and it repeats, as a failure read in the request does
        with pytest.raises(BatchFormatError, match=r"step-0000000001\.arrow.*not an Arrow IPC"):
            next(reader)
    assert reader.batches_read == 1
    # the request that raised still acked step 0
    rdir = rank_dir(shm_root, 0)
    assert eventually(
        lambda: (
            _consumed_step(rdir / "ack.json") == 0 and not (rdir / "step-0000000000.arrow").exists()
        )
    )


def test_close_ends_the_background_thread(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=5)
    write_steps(shm_root, [0], world_size=1)
    # close() stops the read-ahead at once, not after its poll interval
    reader = BatchReader(shm_root, 0, timeout_s=60, poll_interval_s=10)
    before = set(threading.enumerate())
    next(reader)  # its read-ahead now waits for step 1, which never comes
    (thread,) = set(threading.enumerate()) - before
    assert thread.name == "stoker-read-ahead-rank-0" and thread.daemon
    time.sleep(0.2)  # the read-ahead is in its poll wait by now
    reader.close()
    assert eventually(lambda: not thread.is_alive(), timeout_s=2)
    with pytest.raises(StopIteration):
        next(reader)


def test_an_ack_that_cannot_be_written_fails_a_later_request(shm_root):
    make_job(shm_root, world_size=1, num_steps=3)
    reader = BatchReader(shm_root, 0, timeout_s=5)
    assert next(reader).step == 0
    (rank_dir(shm_root, 0) / "ack.json").mkdir()  # renaming the new ack onto it fails
    steps = []
    with pytest.raises(IsADirectoryError):
        for _ in range(3):  # the ack thread's error, at the latest when the last request flushes
            steps.append(next(reader).step)
    assert steps in ([1], [1, 2])


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
    write_batch(shm_root, 1, 0, build_record_batch(make_samples(1, 0, 4)))
    reader = BatchReader(shm_root, 0, timeout_s=5)
    b = next(reader)
    assert b.num_samples == 0
    assert b.input_ids.shape == (0, seq_len) and b.input_ids.dtype == np.int64
    assert b.labels.shape == (0, seq_len) and b.attention_mask.shape == (0, seq_len)
    assert b.pixel_values.shape == (0, PATCH_DIM) and b.pixel_values.dtype == np.float32
    assert b.image_grid_thw.shape == (0, 3) and b.image_grid_thw.dtype == np.int64
    assert b.sample_index.shape == (0,)
    assert b.source == [] and b.location == []
    assert b.backfilled_slots == ()
    assert next(reader).num_samples == 4  # an empty step does not stop the epoch
    assert reader.samples_read == 4


def test_file_with_no_record_batch_reads_as_empty(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=1)
    rank_dir(shm_root, 0).mkdir()
    p = rank_dir(shm_root, 0) / "step-0000000000.arrow"
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
    rank_dir(shm_root, 0).mkdir()
    rb = build_record_batch(make_samples(0, 0, 4))
    p = rank_dir(shm_root, 0) / "step-0000000000.arrow"
    with pa.OSFile(str(p), "wb") as sink, pa.ipc.new_file(sink, rb.schema) as w:
        w.write_batch(rb)
        w.write_batch(rb)
    with pytest.raises(BatchFormatError, match="2 record batches"):
        next(BatchReader(shm_root, 0, timeout_s=5))


def test_compressed_file_is_refused_rather_than_copied(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=1)
    rank_dir(shm_root, 0).mkdir()
    rb = build_record_batch(make_samples(0, 0, 4))
    p = rank_dir(shm_root, 0) / "step-0000000000.arrow"
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
    b = read_batch_file(path)  # without micro_batch_size: any row count
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
    assert b.location == exp["location"][2:5]


def test_in_memory_offsets_are_respected_without_copy():
    """Directly exercise the offset arithmetic on in-memory sliced arrays (buffers not rewritten)."""
    from stoker.arrow_columns import fixed_rows, list_of_fixed

    samples = make_samples(1, 0, 5)
    rb = build_record_batch(samples).slice(1, 3)
    assert rb.column("input_ids").offset == 1
    ids = fixed_rows(rb.column("input_ids"), "mem", "input_ids", "int64")
    exp = _expected_arrays(samples)
    np.testing.assert_array_equal(ids, exp["input_ids"][1:4])
    assert np.shares_memory(
        ids, np.frombuffer(rb.column("input_ids").values.buffers()[1], np.int64)
    )
    pv = list_of_fixed(rb.column("pixel_values"), "mem", "pixel_values", "float32")
    np.testing.assert_array_equal(pv, np.concatenate([s["patches"] for s in samples[1:4]]))


def test_wrong_schema_raises_clear_error_naming_file(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=1)
    rb = build_record_batch(make_samples(0, 0, 4))
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
        shm_root, 0, 0, build_record_batch(make_samples(0, 0, 4, patch_dim=588), patch_dim=588)
    )
    with pytest.raises(BatchFormatError, match="patch_dim=1176"):
        next(BatchReader(shm_root, 0, timeout_s=5))


def test_step_metadata_must_match_file_name(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=1)
    write_batch(
        shm_root, 0, 0, build_record_batch(make_samples(0, 0, 4)), metadata={"stoker.step": "7"}
    )
    with pytest.raises(BatchFormatError, match="stoker.step"):
        next(BatchReader(shm_root, 0, timeout_s=5))


def test_garbage_file_is_a_clear_error(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=1)
    rank_dir(shm_root, 0).mkdir()
    p = rank_dir(shm_root, 0) / "step-0000000000.arrow"
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


def test_stop_after_step_acks_the_last_step_and_leaves_later_ones(shm_root):
    make_job(shm_root, world_size=1, num_steps=6)
    reader = BatchReader(shm_root, 0, timeout_s=5, start_step=1, stop_after_step=3)
    assert reader.end_step == 4
    assert [b.step for b in reader] == [1, 2, 3]
    # step 3 was acknowledged (and unlinked) by the request that ended the iteration
    assert json.loads((rank_dir(shm_root, 0) / "ack.json").read_text())["consumed_step"] == 3
    assert sorted(p.name for p in rank_dir(shm_root, 0).glob("step-*.arrow")) == [
        "step-0000000004.arrow",
        "step-0000000005.arrow",
    ]
    # a trainer restarted from its checkpoint at step 3 goes on with step 4
    assert [b.step for b in BatchReader(shm_root, 0, timeout_s=5, start_step=4)] == [4, 5]
    # beyond the run: the run's last step
    assert BatchReader(shm_root, 0, stop_after_step=99).end_step == 6
    with pytest.raises(ValueError, match="stop_after_step"):
        BatchReader(shm_root, 0, stop_after_step=-2)


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
    # exactly the HF processor's names: model(**batch.to_torch()) takes every key
    assert set(t) == MODEL_INPUT_NAMES
    assert t["mm_token_type_ids"].dtype == torch.int64


def test_mm_token_type_ids_mark_the_image_pads(shm_root):
    """mm_token_type_ids is 1 exactly at <|image_pad|> ids (HF create_mm_token_type_ids), 0 on
    text, vision start/end tokens and padding; the id comes from the file's metadata."""
    ids = [151644, 872, 198, 151652, 151655, 151655, 151655, 151653, 9707, 151645, 198]
    samples = make_samples(0, 0, 2)
    samples[0]["ids"] = ids
    samples[1]["ids"] = ids[:4] + [151655] + ids[7:]
    write_manifest(shm_root, world_size=1, num_steps=1, micro_batch_size=2)
    write_batch(shm_root, 0, 0, build_record_batch(samples), slots=2)
    b = next(BatchReader(shm_root, 0, timeout_s=5))
    expected = np.zeros(b.input_ids.shape, np.int64)
    expected[0, 4:7] = 1
    expected[1, 4] = 1
    assert b.image_token_id == 151655
    np.testing.assert_array_equal(b.mm_token_type_ids, expected)
    assert b.mm_token_type_ids.dtype == np.int64
    np.testing.assert_array_equal(b.arrays()["mm_token_type_ids"], expected)

    write_batch(
        shm_root, 0, 0, build_record_batch(samples), slots=2, metadata={"stoker.image_token_id": ""}
    )
    with pytest.raises(BatchFormatError, match="stoker.image_token_id"):
        read_batch_file(rank_dir(shm_root, 0) / "step-0000000000.arrow").arrays()


# ------------------------------------------------------------------ bfloat16 pixel_values

#: (float32 value, expected bfloat16 bits), the same cases as the Java sink's PixelDtypeTest.
BF16_CASES = [
    (1.0, 0x3F80),
    (-2.5, 0xC020),
    (1.00390625, 0x3F80),  # 1 + 2^-8: a tie, to even (down)
    (1.01171875, 0x3F82),  # 1 + 3 * 2^-8: a tie, to even (up)
    (1.0039064, 0x3F81),  # one float32 step above the tie: up
    (float("inf"), 0x7F80),
    (float("-inf"), 0xFF80),
    (3.4028235e38, 0x7F80),  # float32 max rounds beyond bfloat16 max: inf
    (float("nan"), 0x7FC0),
    (0.0, 0x0000),
    (-0.0, 0x8000),
    (1e-40, 0x0001),  # a float32 subnormal keeps its upper bits
]


def test_bf16_reference_rounding_matches_the_java_cases():
    values = np.array([v for v, _ in BF16_CASES], np.float32)
    assert bf16_rne(values).tolist() == [b for _, b in BF16_CASES]


def test_bfloat16_batch_reads_as_uint16_bits_and_widens_exactly(shm_root):
    samples = make_samples(0, 0, 3)
    floats = [s["patches"] for s in samples]
    for s in samples:
        s["patches"] = bf16_rne(s["patches"])
    path = write_batch(
        shm_root,
        0,
        0,
        build_record_batch(samples, pixel_dtype="bfloat16"),
        slots=3,
        metadata={"stoker.pixel_dtype": "bfloat16"},
    )
    b = read_batch_file(path, micro_batch_size=3)
    patches = sum(len(f) for f in floats)
    assert patches > 0
    assert b.pixel_dtype == "bfloat16"
    assert b.pixel_values.dtype == np.uint16 and b.pixel_values.shape == (patches, PATCH_DIM)
    lo, size = b.mapping_range
    assert lo <= b.pixel_values.ctypes.data < lo + size  # still a view of the file
    expected = np.concatenate(floats)
    assert np.array_equal(b.pixel_values, bf16_rne(expected))
    widened = bfloat16_to_float32(b.pixel_values)
    assert widened.dtype == np.float32
    assert np.all(np.abs(widened - expected) <= np.abs(expected) * 2.0**-8)
    try:
        import torch
    except ImportError:
        return
    t = b.to_torch()["pixel_values"]
    assert t.dtype == torch.bfloat16 and t.data_ptr() == b.pixel_values.ctypes.data
    assert torch.equal(t.float(), torch.from_numpy(widened))


@pytest.mark.parametrize(
    "pixel_dtype, metadata, match",
    [
        ("bfloat16", {}, "expected list<fixed_size_list<float32"),
        (
            "float32",
            {"stoker.pixel_dtype": "bfloat16"},
            r"uint16 not null>\[D\]> \(stoker.pixel_dtype",
        ),
        ("float32", {"stoker.pixel_dtype": "float16"}, "stoker.pixel_dtype='float16'"),
        ("uint8", {}, "expected list<fixed_size_list<float32"),
        ("uint8", {"stoker.pixel_dtype": "bfloat16"}, r"uint16 not null>\[D\]> \(stoker"),
        ("float32", {"stoker.pixel_dtype": "uint8"}, r"uint8 not null>\[D\]> \(stoker"),
    ],
)
def test_pixel_dtype_and_column_type_must_agree(shm_root, pixel_dtype, metadata, match):
    samples = make_samples(0, 0, 2)
    if pixel_dtype == "bfloat16":
        for s in samples:
            s["patches"] = bf16_rne(s["patches"])
    if pixel_dtype == "uint8":
        samples = _uint8_samples(2)
    path = write_batch(
        shm_root, 0, 0, build_record_batch(samples, pixel_dtype=pixel_dtype), metadata=metadata
    )
    with pytest.raises(BatchFormatError, match=match):
        read_batch_file(path)


# ------------------------------------------------------------------ uint8 pixel_values
def _uint8_samples(n: int, seed: int = 0):
    """``make_samples`` with uint8 patches covering every byte value."""
    samples = make_samples(0, 0, n, seed=seed)
    rng = np.random.default_rng(seed)
    for s in samples:
        s["patches"] = rng.integers(0, 256, size=s["patches"].shape, dtype=np.uint8)
    assert sum(len(s["patches"]) for s in samples) > 0
    return samples


def _f32(x: float) -> float:
    """``x`` rounded to float32 (pure Python: struct)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _scalar_normalized(u: int, c: int, vision: VisionSettings) -> float:
    """One value by the documented order of operations, in Python scalars: the float64 product
    rounded to float32, then float32 subtraction and division (each computed in double, which
    rounds to the float32 result exactly, and rounded)."""
    x = _f32(float(u) * vision.rescale_factor)
    x = _f32(x - _f32(vision.image_mean[c]))
    return _f32(x / _f32(vision.image_std[c]))


def test_uint8_batch_is_a_uint8_view_normalized_as_documented(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=1)
    vision = Manifest.load(shm_root / "manifest.json").vision
    samples = _uint8_samples(3)
    path = write_batch(
        shm_root,
        0,
        0,
        build_record_batch(samples, pixel_dtype="uint8"),
        slots=3,
        metadata={"stoker.pixel_dtype": "uint8"},
    )
    b = read_batch_file(path, micro_batch_size=3, vision=vision)
    expected = np.concatenate([s["patches"] for s in samples])
    assert b.pixel_dtype == "uint8" and b.vision == vision
    assert b.pixel_values.dtype == np.uint8 and b.pixel_values.shape == expected.shape
    lo, size = b.mapping_range
    assert lo <= b.pixel_values.ctypes.data < lo + size  # a view of the file
    assert np.array_equal(b.pixel_values, expected)
    table = np.array(
        [[_scalar_normalized(u, c, vision) for u in range(256)] for c in range(3)], np.float32
    )
    per_channel = PATCH_DIM // 3
    channel = np.arange(PATCH_DIM) // per_channel
    reference = table[channel[None, :], expected]
    got = b.pixel_values_float32()
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert np.array_equal(got.view(np.uint32), reference.view(np.uint32))
    assert b.arrays()["pixel_values"] is b.pixel_values  # arrays() are the file's


def test_uint8_batch_without_vision_settings_or_for_another_d_is_an_error(shm_root):
    samples = _uint8_samples(1)
    path = write_batch(
        shm_root,
        0,
        0,
        build_record_batch(samples, pixel_dtype="uint8"),
        slots=1,
        metadata={"stoker.pixel_dtype": "uint8"},
    )
    bare = read_batch_file(path)
    with pytest.raises(ValueError, match=r"vision=Manifest.load\(<job dir>/manifest.json\)"):
        bare.pixel_values_float32()
    qwen3 = VisionSettings(16, 2, 2, 1 / 255, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    with pytest.raises(
        BatchFormatError, match="pixel_values has D=1176, the vision settings give 1536"
    ):
        read_batch_file(path, vision=qwen3)


# ------------------------------------------------------------------ resume, generations,
# back-fill


def _ack(shm_root, rank=0, generation=GEN):
    return json.loads((rank_dir(shm_root, rank, generation) / "ack.json").read_text())


def _step_files(d):
    return sorted(p.name for p in d.glob("step-*.arrow"))


def test_default_start_is_the_manifest_first_step(shm_root):
    make_job(shm_root, world_size=2, num_steps=6, first_step=3)
    reader = BatchReader(shm_root, 1, timeout_s=5)
    assert reader.start_step == 3 and reader.next_step == 3
    b = next(reader)
    assert b.step == 3 and reader.manifest.first_step == 3
    # starting exactly at first_step needs no announcement: the job assumes first_step - 1
    assert not (rank_dir(shm_root, 1) / "ack.json").exists()
    assert [x.step for x in reader] == [4, 5]
    assert _ack(shm_root, 1)["consumed_step"] == 5


def test_start_after_first_step_acks_the_skip_and_unlinks_earlier_steps(shm_root):
    make_job(shm_root, world_size=1, num_steps=6, first_step=1)
    rdir = rank_dir(shm_root, 0)
    # a straggler of an earlier generation's layout in .staging must be left alone
    (rdir / ".staging").mkdir()
    (rdir / ".staging" / "step-0000000002.slot-0").write_bytes(b"x")
    reader = BatchReader(shm_root, 0, timeout_s=5, start_step=4)
    b = next(reader)
    assert b.step == 4
    ack = _ack(shm_root)
    assert ack["consumed_step"] == 3  # the job's gate moves on; the sink skips steps <= 3
    assert set(ack) == {"consumed_step", "data_wait_s", "elapsed_s", "wait_time_ratio"}
    assert _step_files(rdir) == ["step-0000000004.arrow", "step-0000000005.arrow"]
    assert (rdir / ".staging" / "step-0000000002.slot-0").exists()
    assert reader.last_acked_step == 3 and reader.steps_acked == 0
    assert [x.step for x in reader] == [5]


def test_start_ack_is_written_before_the_rank_dir_exists(shm_root):
    """The reader announces its start even before the sink wrote anything for the rank."""
    write_manifest(shm_root, world_size=1, num_steps=8, first_step=0)
    reader = BatchReader(shm_root, 0, timeout_s=0.2, start_step=6)
    with pytest.raises(TimeoutError, match="step-0000000006.arrow"):
        next(reader)
    assert _ack(shm_root)["consumed_step"] == 5
    assert oct(rank_dir(shm_root, 0).stat().st_mode & 0o777) == oct(0o700)


def test_start_step_before_first_step_is_a_clear_error(shm_root):
    make_job(shm_root, world_size=1, num_steps=6, first_step=3)
    reader = BatchReader(shm_root, 0, timeout_s=5, start_step=1)
    with pytest.raises(ValueError) as ei:
        next(reader)
    assert isinstance(ei.value, ResumeError)
    msg = str(ei.value)
    assert "start_step 1" in msg and "first_step 3" in msg
    assert "--stoker.resume-step 0" in msg
    with pytest.raises(ResumeError):  # stays failed
        next(reader)
    assert not (rank_dir(shm_root, 0) / "ack.json").exists()


def test_start_step_already_consumed_in_this_generation_is_a_clear_error(shm_root):
    """The trainer restarted from an older checkpoint than the job's progress: no silent hang."""
    make_job(shm_root, world_size=1, num_steps=6)
    (rank_dir(shm_root, 0) / "ack.json").write_text(json.dumps({"consumed_step": 4}))
    with pytest.raises(ResumeError, match=r"step 4 was already consumed.*--stoker.resume-step 2"):
        next(BatchReader(shm_root, 0, timeout_s=5, start_step=3))
    # continuing right after the acked step is fine
    assert next(BatchReader(shm_root, 0, timeout_s=5, start_step=5)).step == 5


def _publish_generation(shm_root, generation, first_step, *, num_steps, files_first=False):
    """Like a resubmitted job: the new generation's manifest and its files (steps first_step..)."""
    steps = range(first_step, num_steps)
    if files_first:  # as if the sink had written them before the reader noticed the manifest
        write_steps(shm_root, steps, world_size=1, generation=generation)
    write_manifest(
        shm_root, world_size=1, num_steps=num_steps, generation=generation, first_step=first_step
    )
    if not files_first:
        time.sleep(0.2)
        write_steps(shm_root, steps, world_size=1, generation=generation)


def test_generation_switch_mid_iteration_continues_at_the_next_step(shm_root):
    make_job(shm_root, world_size=1, num_steps=2)  # g1: steps 0, 1 only (the job was stopped)
    write_manifest(shm_root, world_size=1, num_steps=6)  # the full run, steps 2.. never come
    reader = BatchReader(shm_root, 0, timeout_s=10, manifest_poll_interval_s=0.05)
    assert [next(reader).step, next(reader).step] == [0, 1]
    errors = []

    def resubmit():
        try:
            time.sleep(0.3)  # the reader is waiting for g1's step 2
            # resumed at step 0 (one behind the trainer): g2 produces steps 1..5
            _publish_generation(shm_root, "g2", 1, num_steps=6, files_first=True)
            shutil.rmtree(shm_root / f"gen-{GEN}")  # the new sink removes other generations
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=resubmit)
    t.start()
    b2 = next(reader)
    t.join()
    assert not errors
    assert b2.step == 2 and "gen-g2" in b2.path
    assert reader.generation == "g2" and reader.generation_switches == 1
    g2 = rank_dir(shm_root, 0, "g2")
    assert reader.rank_dir == g2
    # the switch acked step 1 in the new generation and removed its step-1 file
    assert _ack(shm_root, 0, "g2")["consumed_step"] == 1
    assert "step-0000000001.arrow" not in _step_files(g2)
    np.testing.assert_array_equal(b2.sample_index, [s["index"] for s in make_samples(2, 0, 4)])
    # a file of a skipped step the sink published while it learnt of the ack goes at the next ack
    write_steps(shm_root, [1], world_size=1, generation="g2")
    assert next(reader).step == 3
    files = ["step-0000000003.arrow", "step-0000000004.arrow", "step-0000000005.arrow"]
    assert eventually(lambda: _step_files(g2) == files)  # on the ack thread
    assert [b.step for b in reader] == [4, 5]
    assert _ack(shm_root, 0, "g2")["consumed_step"] == 5
    assert reader.batches_read == 6


def test_generation_switch_while_the_old_files_are_still_there(shm_root):
    """Checked before each wait too: a switch is followed even if the old generation's next file
    exists (its directory is about to be removed)."""
    make_job(shm_root, world_size=1, num_steps=4)
    reader = BatchReader(shm_root, 0, timeout_s=5, manifest_poll_interval_s=0.01)
    assert next(reader).step == 0
    _publish_generation(shm_root, "g2", 1, num_steps=4)
    time.sleep(0.02)
    b = next(reader)
    assert b.step == 1 and "gen-g2" in b.path
    assert _ack(shm_root, 0, "g2")["consumed_step"] == 0


def test_switch_to_a_generation_that_starts_after_the_reader_is_a_clear_error(shm_root):
    make_job(shm_root, world_size=1, num_steps=2)
    write_manifest(shm_root, world_size=1, num_steps=8)
    reader = BatchReader(shm_root, 0, timeout_s=10, manifest_poll_interval_s=0.05)
    assert [b.step for b in (next(reader), next(reader))] == [0, 1]

    def resubmit():
        time.sleep(0.2)
        _publish_generation(shm_root, "g2", 5, num_steps=8)

    t = threading.Thread(target=resubmit)
    t.start()
    with pytest.raises(ResumeError) as ei:
        next(reader)
    t.join()
    msg = str(ei.value)
    assert "g2" in msg and "first_step 5" in msg and "step 2" in msg
    assert "--stoker.resume-step 1" in msg
    assert not (rank_dir(shm_root, 0, "g2") / "ack.json").exists()
    with pytest.raises(ResumeError):
        next(reader)


def test_switch_to_another_world_size_is_a_format_error(shm_root):
    make_job(shm_root, world_size=1, num_steps=1)
    write_manifest(shm_root, world_size=1, num_steps=4)
    reader = BatchReader(shm_root, 0, timeout_s=10, manifest_poll_interval_s=0.05)
    next(reader)
    threading.Timer(
        0.1, lambda: write_manifest(shm_root, world_size=2, num_steps=4, generation="g2")
    ).start()
    with pytest.raises(BatchFormatError, match="world_size 2"):
        next(reader)


def test_manifest_rewritten_with_the_same_generation_is_not_a_switch(shm_root):
    make_job(shm_root, world_size=1, num_steps=1)
    write_manifest(shm_root, world_size=1, num_steps=2)
    reader = BatchReader(shm_root, 0, timeout_s=5, manifest_poll_interval_s=0.01)
    next(reader)

    def failover():  # each sink subtask (re)writes the same manifest
        time.sleep(0.1)
        write_manifest(shm_root, world_size=1, num_steps=2)
        time.sleep(0.1)
        write_steps(shm_root, [1], world_size=1)

    t = threading.Thread(target=failover)
    t.start()
    assert next(reader).step == 1
    t.join()
    assert reader.generation_switches == 0


def test_backfilled_slots_are_parsed(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=2)
    samples = make_samples(0, 0, 4)
    # slots 0 and 2 were dead-lettered: each holds a copy of the next filled slot
    rows = [samples[1], samples[1], samples[3], samples[3]]
    write_batch(
        shm_root, 0, 0, build_record_batch(rows), metadata={"stoker.backfilled_slots": "0,2"}
    )
    write_steps(shm_root, [1], world_size=1)
    reader = BatchReader(shm_root, 0, timeout_s=5)
    b = next(reader)
    assert b.backfilled_slots == (0, 2)
    assert b.num_samples == 4
    assert b.sample_index.tolist() == [1, 1, 3, 3]
    assert next(reader).backfilled_slots == ()
    assert reader.backfilled_read == 2 and reader.samples_read == 8


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("0,x", "not comma-separated integers"),
        ("4", r"\[0, 4\)"),
        ("1,1", "distinct"),
        ("0,1,2,3", "every row"),
    ],
)
def test_invalid_backfilled_slots_is_a_format_error(shm_root, value, match):
    write_manifest(shm_root, world_size=1, num_steps=1)
    write_batch(
        shm_root,
        0,
        0,
        build_record_batch(make_samples(0, 0, 4)),
        metadata={"stoker.backfilled_slots": value},
    )
    with pytest.raises(BatchFormatError, match=match):
        next(BatchReader(shm_root, 0, timeout_s=5))


def test_row_count_other_than_micro_batch_size_is_a_format_error(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=1, micro_batch_size=4)
    write_batch(shm_root, 0, 0, build_record_batch(make_samples(0, 0, 3)))
    with pytest.raises(BatchFormatError, match="holds 3 rows, expected micro_batch_size 4"):
        next(BatchReader(shm_root, 0, timeout_s=5))


def test_manifest_fields(shm_root):
    write_manifest(shm_root, world_size=2, num_steps=6, epochs=2, first_step=3, shuffle_seed=None)
    m = BatchReader(shm_root, 0, timeout_s=5).manifest
    assert (m.format_version, m.generation, m.world_size, m.micro_batch_size) == (4, GEN, 2, 4)
    assert (m.epochs, m.steps_per_epoch, m.num_steps, m.first_step) == (2, 3, 6, 3)
    assert m.shuffle_seed is None and m.num_records == 24 and m.patch_dim == PATCH_DIM


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (
            {"format_version": 2},
            r"format_version 2 is not supported \(expected 4\); the job and the reader come from "
            "different releases",
        ),
        ({"generation": "../x"}, "invalid generation"),
        ({"first_step": None}, "invalid manifest"),
    ],
)
def test_invalid_manifest_is_a_format_error(shm_root, change, match):
    """A manifest that breaks the protocol fails the first request, naming the file."""
    write_manifest(shm_root, world_size=1, num_steps=1)
    path = shm_root / "manifest.json"
    raw = json.loads(path.read_text())
    raw.update(change)
    path.write_text(json.dumps(raw))
    with pytest.raises(BatchFormatError, match=match):
        next(BatchReader(shm_root, 0, timeout_s=5))


@pytest.mark.parametrize(
    "missing", ["patch_size", "temporal_patch_size", "rescale_factor", "image_mean"]
)
def test_a_manifest_without_the_vision_settings_is_a_format_error(shm_root, missing):
    """An older job's manifest (no vision settings) is refused, naming the file and the field:
    the job and the reader ship together."""
    write_manifest(shm_root, world_size=1, num_steps=1)
    path = shm_root / "manifest.json"
    raw = json.loads(path.read_text())
    del raw[missing]
    path.write_text(json.dumps(raw))
    with pytest.raises(
        BatchFormatError, match=rf"{re.escape(str(path))}: manifest lacks {missing}"
    ):
        next(BatchReader(shm_root, 0, timeout_s=5))


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"patch_size": 0}, "patch_size must be a positive integer"),
        ({"merge_size": 2.0}, "merge_size must be a positive integer"),
        ({"image_mean": [0.5, 0.5]}, "image_mean must be 3 numbers"),
        ({"image_std": [0.5, 0.0, 0.5]}, "image_std must be positive"),
        ({"rescale_factor": 0}, "rescale_factor must be a positive number"),
        ({"rescale_factor": "1/255"}, "rescale_factor must be a positive number"),
    ],
)
def test_invalid_vision_settings_are_a_format_error(shm_root, change, match):
    write_manifest(shm_root, world_size=1, num_steps=1)
    path = shm_root / "manifest.json"
    raw = json.loads(path.read_text())
    raw.update(change)
    path.write_text(json.dumps(raw))
    with pytest.raises(BatchFormatError, match=match):
        Manifest.load(path)


def test_manifest_vision_settings_are_the_written_values(shm_root):
    vision = {
        "patch_size": 16,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "rescale_factor": 0.00392156862745098,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
    }
    write_manifest(shm_root, world_size=1, num_steps=1, patch_dim=1536, vision=vision)
    m = Manifest.load(shm_root / "manifest.json")
    assert m.vision == VisionSettings(16, 2, 2, 1 / 255, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    assert m.vision.patch_dim == m.patch_dim == 1536
