"""stoker.torch.StokerDataset under torch: DataLoader use, the num_workers > 0 error, rank
discovery, the checkpointable data state (round trip and every mismatch), the resume command
on a torch checkpoint, and the device hand-off.

The batches are written by the harness helpers (:mod:`harness.batches`) exactly as the protocol says; the reference
for every value is what the helpers wrote (``make_samples``), never the reader's output.
Runs in the model venv (torch, transformers), as the real-model tier.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from harness.batches import (
    MODEL_INPUT_NAMES,
    build_record_batch,
    make_job,
    make_packed_samples,
    make_samples,
    packed_arrays,
    packed_record_batch,
    rank_dir,
    write_batch,
    write_manifest,
)
from harness.paths import REPO_ROOT
from torch.utils.data import DataLoader
from transformers import Qwen2VLForConditionalGeneration

from stoker.data_state import STATE_FORMAT, DataStateError
from stoker.torch import StokerBatch, StokerDataset, discover_rank

W, B = 2, 4
FP = "sha256:" + "1" * 64
PRESET = "qwen2-vl"
RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


@pytest.fixture(autouse=True)
def _no_torchrun_env(monkeypatch):
    for name in RANK_VARS:
        monkeypatch.delenv(name, raising=False)


def job(root: Path, *, num_steps=6, first_step=0, generation="g1", world_size=W, **manifest):
    """Manifest and steps ``first_step .. num_steps-1`` of every rank; the samples written."""
    fields = {"dataset_fingerprint": FP, "model_preset": PRESET, "shuffle_seed": 0}
    fields.update(manifest)
    return make_job(
        root,
        world_size=world_size,
        num_steps=num_steps,
        micro_batch_size=B,
        generation=generation,
        first_step=first_step,
        **fields,
    )


def assert_is_sample_batch(batch, samples):
    """``batch`` holds exactly ``samples`` (as the helpers wrote them), in row order."""
    assert set(batch) == MODEL_INPUT_NAMES
    L = batch["input_ids"].shape[1]
    for row, s in enumerate(samples):
        n = len(s["ids"])
        assert batch["input_ids"][row, :n].tolist() == s["ids"]
        assert batch["attention_mask"][row].tolist() == [1] * n + [0] * (L - n)
    patches = np.concatenate([s["patches"] for s in samples])
    np.testing.assert_array_equal(batch["pixel_values"].numpy(), patches)
    grids = [g for s in samples for g in s["grids"]]
    assert batch["image_grid_thw"].tolist() == grids
    assert batch.sample_index.tolist() == [s["index"] for s in samples]
    assert batch.source == [s["source"] for s in samples]
    assert batch.location == [s["location"] for s in samples]


def consumed(root: Path, rank: int, generation="g1") -> int:
    return json.loads((rank_dir(root, rank, generation) / "ack.json").read_text())["consumed_step"]


# ---------------------------------------------------------------------- DataLoader
def test_dataloader_hands_over_every_step_with_the_models_keyword_arguments(shm_root):
    written = job(shm_root)
    ds = StokerDataset(shm_root, rank=1, world_size=W, timeout_s=10)
    loader = DataLoader(ds, batch_size=None, num_workers=0, pin_memory=True)
    forward = inspect.signature(Qwen2VLForConditionalGeneration.forward).parameters
    steps = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # pin_memory without an accelerator
        for batch in loader:
            assert isinstance(batch, StokerBatch)  # attributes survive default_convert
            assert MODEL_INPUT_NAMES <= set(forward), "model(**batch) takes every key"
            assert batch.rank == 1 and batch.generation == "g1"
            assert_is_sample_batch(batch, written[(batch.step, 1)])
            assert batch.keep.tolist() == [True] * B
            steps.append(batch.step)
        assert list(loader) == [], "iterating again continues after the last step: nothing left"
    assert steps == list(range(6))
    assert consumed(shm_root, 1) == 5
    assert ds.state_dict()["next_step"] == 6


def test_backfilled_rows_travel_as_an_attribute_and_can_be_masked_out_of_the_loss(shm_root):
    write_manifest(shm_root, world_size=1, num_steps=1, micro_batch_size=B, dataset_fingerprint=FP)
    samples = make_samples(0, 0, B)
    write_batch(
        shm_root, 0, 0, build_record_batch(samples), metadata={"stoker.backfilled_slots": "1,3"}
    )
    plain = next(iter(StokerDataset(shm_root, rank=0, world_size=1, timeout_s=10)))
    assert plain.backfilled_slots == (1, 3)
    assert plain.keep.tolist() == [True, False, True, False]
    masked = next(
        iter(StokerDataset(shm_root, rank=0, world_size=1, timeout_s=10, mask_backfilled=True))
    )
    want = plain["labels"].clone()
    want[[1, 3]] = -100
    assert torch.equal(masked["labels"], want)
    assert torch.equal(masked["labels"][[0, 2]], plain["labels"][[0, 2]])
    assert (plain["labels"][[1, 3]] != -100).any(), "the unmasked labels are the file's"


PACKED_INPUT_NAMES = (MODEL_INPUT_NAMES - {"attention_mask"}) | {"position_ids"}


def packed_job(root: Path, T: int = 128):
    """A one-step packed job of one rank: rows of 2, 1 and 3 samples; samples 1 and 4 back-filled."""
    write_manifest(
        root, world_size=1, num_steps=1, micro_batch_size=B, dataset_fingerprint=FP,
        packing_max_tokens=T,
    )  # fmt: skip
    s = make_packed_samples(6)
    rows = [s[0:2], s[2:3], s[3:6]]
    a = packed_arrays(rows)
    write_batch(
        root, 0, 0, packed_record_batch(a),
        metadata={"stoker.packing_max_tokens": str(T), "stoker.backfilled_slots": "1,4"},
    )  # fmt: skip
    return rows, a


@pytest.mark.parametrize("device", [None, "cpu"])
def test_a_packed_batch_gives_position_ids_not_the_attention_mask_and_masks_back_fills(
    shm_root, device
):
    rows, a = packed_job(shm_root)
    ds = StokerDataset(
        shm_root, rank=0, world_size=1, timeout_s=10, mask_backfilled=True, device=device
    )
    batch = next(iter(ds))
    assert set(batch) == PACKED_INPUT_NAMES | {"use_cache"}
    assert batch["use_cache"] is False  # see Batch.model_flags
    assert set(batch.tensors()) == PACKED_INPUT_NAMES
    assert batch.packing_max_tokens == 128
    pos = batch["position_ids"]
    assert pos.shape == (4, 3, a["ids"].shape[1]) and pos.dtype == torch.int64
    assert torch.equal(pos, torch.from_numpy(a["positions"]).permute(1, 0, 2))
    assert batch.sample_index.tolist() == [x["index"] for row in rows for x in row]
    assert batch.keep.tolist() == [True, False, True, True, False, True]
    labels = torch.from_numpy(a["labels"]).clone()
    for k in (1, 4):
        r, start, end = batch.sample_spans[k].tolist()
        assert (labels[r, start:end] != -100).any(), "the fixture trains every sample"
        labels[r, start:end] = -100
    assert torch.equal(batch["labels"], labels), "the back-fills' tokens masked, nothing else"


def test_to_torch_of_a_packed_batch_shares_the_mapping_and_gives_the_varlen_kwargs(shm_root):
    from stoker import BatchReader

    rows, a = packed_job(shm_root)
    b = next(BatchReader(shm_root, 0, timeout_s=10))
    inputs = b.to_torch()
    assert set(inputs) == PACKED_INPUT_NAMES | {"use_cache"} and inputs["use_cache"] is False
    assert b.model_flags() == {"use_cache": False}
    pos = inputs["position_ids"]
    assert pos.stride() == (b.seq_len, 4 * b.seq_len, 1), "a strided view, not a copy"
    lo, size = b.mapping_range
    assert lo <= pos.data_ptr() < lo + size
    assert torch.equal(pos[0], torch.from_numpy(a["positions"][:, 0]))
    kw = b.flash_varlen_kwargs()
    assert sorted(kw) == ["cu_seq_lens_k", "cu_seq_lens_q", "max_length_k", "max_length_q"]
    assert kw["cu_seq_lens_q"].dtype == torch.int32
    L = b.seq_len
    flat = [0] + [r * L + x for r, bounds in enumerate(a["cu"]) for x in bounds[1:]]
    assert kw["cu_seq_lens_q"].tolist() == flat
    assert kw["max_length_q"] == max(np.diff(flat))


def test_num_workers_fails_at_once_saying_why_and_what_to_do(shm_root):
    job(shm_root)
    ds = StokerDataset(shm_root, rank=0, world_size=W, timeout_s=10)
    # a spawned worker: a forked one can deadlock on a lock another thread of this process held
    # (megatron-core and torchtitan, imported by other modules of the tier, start threads), and
    # a timeout turns a worker that never answers into a failure with another message
    loader = DataLoader(
        ds, batch_size=None, num_workers=1, multiprocessing_context="spawn", timeout=120
    )
    with pytest.raises(RuntimeError) as err:
        next(iter(loader))
    message = str(err.value)
    assert "num_workers > 0" in message and "ack.json" in message
    assert "num_workers=0" in message
    assert not (rank_dir(shm_root, 0) / "ack.json").exists(), "no worker read anything"
    assert [b.step for b in DataLoader(ds, batch_size=None)] == list(range(6))


# ---------------------------------------------------------------------- ranks
def test_rank_comes_from_torchrun_variables_and_arguments_override_them(shm_root, monkeypatch):
    written = job(shm_root)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    ds = StokerDataset(shm_root, timeout_s=10)
    assert (ds.rank, ds.world_size, ds.ranks.local_rank, ds.ranks.source) == (
        1,
        2,
        1,
        "environment",
    )
    first = next(iter(ds))
    assert first.rank == 1
    assert_is_sample_batch(first, written[(0, 1)])
    ds.close()
    by_args = StokerDataset(shm_root, rank=0, world_size=2, local_rank=0, timeout_s=10)
    assert (by_args.rank, by_args.ranks.local_rank, by_args.ranks.source) == (0, 0, "arguments")
    assert ds._resolve_device("cuda") == torch.device("cuda", 1), "cuda = cuda:<local rank>"


def test_rank_comes_from_torch_distributed_when_initialised(shm_root, tmp_path, monkeypatch):
    job(shm_root, world_size=1, num_steps=2)
    monkeypatch.setenv("RANK", "3")  # torch.distributed wins over the variables
    monkeypatch.setenv("WORLD_SIZE", "8")
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        ds = StokerDataset(shm_root, timeout_s=10)
        assert (ds.rank, ds.world_size, ds.ranks.source) == (0, 1, "torch.distributed")
    finally:
        torch.distributed.destroy_process_group()


def test_world_size_other_than_the_jobs_is_a_clear_error(shm_root, monkeypatch):
    job(shm_root)
    with pytest.raises(ValueError) as err:
        StokerDataset(shm_root, timeout_s=10)  # no torchrun, no arguments: one process
    assert "DP world size 1 (from default)" in str(err.value)
    assert "world_size 2" in str(err.value) and "--stoker.dp-world-size 1" in str(err.value)
    with pytest.raises(ValueError, match=r"world size 4 \(from arguments\).*world_size 2"):
        StokerDataset(shm_root, rank=3, world_size=4, timeout_s=10)
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(ValueError, match="set both"):
        discover_rank()
    with pytest.raises(ValueError, match="rank 2 is outside world size 2"):
        discover_rank(2, 2)
    with pytest.raises(ValueError, match="both rank and world_size"):
        discover_rank(rank=0)


# ---------------------------------------------------------------------- state
def read_until(ds, stop_step):
    """Steps handed over until (and including) ``stop_step``."""
    out = []
    for batch in ds:
        out.append(batch)
        if batch.step == stop_step:
            break
    return out


def resubmit(root, first_step, generation="g2", **manifest):
    """The job resubmitted with --stoker.resume-step first_step - 1: a new generation."""
    return job(root, first_step=first_step, generation=generation, **manifest)


def test_state_round_trips_through_a_torch_checkpoint_to_exactly_the_next_batches(
    shm_root, tmp_path
):
    written = job(shm_root)
    ds = StokerDataset(shm_root, rank=1, world_size=W, timeout_s=10, stop_after_step=2)
    assert [b.step for b in ds] == [0, 1, 2]
    state = ds.state_dict()
    assert state == {
        "format": STATE_FORMAT,
        "next_step": 3,
        "rank": 1,
        "world_size": W,
        "job_name": "test-job",
        "generation": "g1",
        "sequence": {
            "dataset_fingerprint": FP,
            "num_records": 6 * W * B,
            "shuffle_seed": 0,
            "world_size": W,
            "micro_batch_size": B,
            "epochs": 1,
            "model_preset": PRESET,
            "packing_max_tokens": None,
            "mixture_start_step": 0,
            "mixture_start_position": 0,
        },
    }
    path = tmp_path / "ckpt.pt"
    torch.save({"model": torch.zeros(3), "data": state}, path)
    restored_state = torch.load(path, weights_only=True)["data"]

    resubmit(shm_root, first_step=3)
    restored = StokerDataset(shm_root, rank=1, world_size=W, timeout_s=10)
    restored.load_state_dict(restored_state)
    assert restored.state_dict() == state
    batches = list(restored)
    assert [b.step for b in batches] == [3, 4, 5]
    for b in batches:
        assert b.generation == "g2"
        assert_is_sample_batch(b, written[(b.step, 1)])
    assert restored.state_dict()["next_step"] == 6
    assert restored.state_dict()["generation"] == "g2"


def test_state_restores_against_the_same_generation_when_only_the_trainer_restarted(shm_root):
    written = job(shm_root)
    ds = StokerDataset(shm_root, rank=0, world_size=W, timeout_s=10, stop_after_step=1)
    list(ds)
    state = ds.state_dict()
    again = StokerDataset(shm_root, rank=0, world_size=W, timeout_s=10)
    again.load_state_dict(state)
    got = list(again)
    assert [b.step for b in got] == [2, 3, 4, 5]
    assert_is_sample_batch(got[0], written[(2, 0)])


def test_state_of_a_break_counts_only_the_batches_handed_over(shm_root):
    job(shm_root)
    ds = StokerDataset(shm_root, rank=0, world_size=W, timeout_s=10)
    assert [b.step for b in read_until(ds, 2)] == [0, 1, 2]
    assert ds.state_dict()["next_step"] == 3
    assert [b.step for b in ds] == [3, 4, 5], "iterating again continues"


def saved_state(root, stop=2, rank=0):
    ds = StokerDataset(root, rank=rank, world_size=W, timeout_s=10, stop_after_step=stop)
    list(ds)
    ds.close()
    return ds.state_dict()


def test_job_resumed_at_another_step_is_an_error_naming_both_steps(shm_root):
    job(shm_root)
    state = saved_state(shm_root)  # next step 3
    for first_step in (5, 1):
        resubmit(shm_root, first_step=first_step, generation=f"g{first_step}x")
        ds = StokerDataset(shm_root, rank=0, world_size=W, timeout_s=10)
        with pytest.raises(DataStateError) as err:
            ds.load_state_dict(state)
        message = str(err.value)
        assert "continues at step 3" in message
        assert f"first_step {first_step}" in message
        assert "--stoker.resume-step 2" in message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("dataset_fingerprint", "sha256:" + "2" * 64),
        ("shuffle_seed", 7),
        ("shuffle_seed", None),
        ("model_preset", "qwen3-vl"),
        ("epochs", 2),
        ("packing_max_tokens", 4096),
        ("job_name", "other-job"),
    ],
)
def test_another_dataset_seed_preset_epochs_or_job_is_an_error_naming_both(shm_root, field, value):
    job(shm_root)
    state = saved_state(shm_root)
    resubmit(shm_root, first_step=3, **{field: value})
    ds = StokerDataset(shm_root, rank=0, world_size=W, timeout_s=10)
    with pytest.raises(DataStateError) as err:
        ds.load_state_dict(state)
    before = state["job_name"] if field == "job_name" else state["sequence"][field]
    assert before != value
    assert f"{field}: checkpoint {before!r}, job {value!r}" in str(err.value)


def test_another_world_size_micro_batch_or_rank_is_an_error_naming_both(shm_root, tmp_path):
    job(shm_root)
    state = saved_state(shm_root)
    other = tmp_path / "w4"
    job(other, world_size=4, first_step=3)
    with pytest.raises(DataStateError, match="world_size: checkpoint 2, this trainer 4"):
        StokerDataset(other, rank=0, world_size=4, timeout_s=10).load_state_dict(state)
    other_b = tmp_path / "b8"
    write_manifest(
        other_b,
        world_size=W,
        num_steps=6,
        micro_batch_size=8,
        first_step=3,
        generation="g2",
        dataset_fingerprint=FP,
        model_preset=PRESET,
    )
    with pytest.raises(DataStateError, match="micro_batch_size: checkpoint 4, job 8"):
        StokerDataset(other_b, rank=0, world_size=W, timeout_s=10).load_state_dict(state)
    resubmit(shm_root, first_step=3)
    with pytest.raises(DataStateError, match="rank 0's, but this trainer is rank 1"):
        StokerDataset(shm_root, rank=1, world_size=W, timeout_s=10).load_state_dict(state)
    broken = dict(state, format="something/else")
    with pytest.raises(DataStateError, match="format"):
        StokerDataset(shm_root, rank=0, world_size=W, timeout_s=10).load_state_dict(broken)


def reading_steps_0_and_1_of_6(shm_root):
    """A dataset that has read steps 0 and 1 of generation g1 of a 6-step run, and its iterator."""
    job(shm_root, num_steps=2)  # g1 has steps 0, 1 of a 6-step run
    write_manifest(
        shm_root,
        world_size=W,
        num_steps=6,
        micro_batch_size=B,
        dataset_fingerprint=FP,
        model_preset=PRESET,
    )
    ds = StokerDataset(shm_root, rank=0, world_size=W, timeout_s=10)
    it = iter(ds)
    assert [next(it).step, next(it).step] == [0, 1]
    return ds, it


def test_a_generation_with_another_sequence_followed_while_reading_is_an_error(shm_root):
    ds, it = reading_steps_0_and_1_of_6(shm_root)
    resubmit(shm_root, first_step=2, shuffle_seed=5, num_steps=6)
    with pytest.raises(DataStateError, match="shuffle_seed: checkpoint 0, job 5"):
        next(it)
    assert ds.state_dict()["next_step"] == 2, "the batch of the other sequence was not handed over"


def test_a_new_stage_at_the_next_step_is_followed_while_reading_and_saved(shm_root):
    ds, it = reading_steps_0_and_1_of_6(shm_root)
    # the next curriculum stage takes over at step 2 (--stoker.mixture.start-step 2)
    other = "sha256:" + "3" * 64
    resubmit(shm_root, first_step=2, num_steps=6, mixture_start_step=2, dataset_fingerprint=other)
    assert next(it).step == 2
    state = ds.state_dict()
    assert state["next_step"] == 3
    assert (state["sequence"]["dataset_fingerprint"], state["sequence"]["mixture_start_step"]) == (
        other,
        2,
    )
    ds.close()


# ---------------------------------------------------------------------- resume command
def run_resume(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "python"))
    return subprocess.run(
        [sys.executable, "-m", "stoker.resume", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_resume_command_from_a_torch_checkpoint(shm_root, tmp_path):
    job(shm_root)
    state = saved_state(shm_root, stop=8 - 6)  # trained on 0 .. 2
    path = tmp_path / "trainer.pt"
    torch.save({"model": {"w": torch.ones(2)}, "optimizer": {}, "data": state}, path)
    done = run_resume(
        path, "--savepoint", "file:/ckpt/savepoint-1", "--", "--stoker.dataset.path", "/d"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "flink",
        "run",
        "-s",
        "file:/ckpt/savepoint-1",
        "job/target/stoker-job.jar",
        "--stoker.dataset.path",
        "/d",
        "--stoker.job-name",
        "test-job",
        "--stoker.dp-world-size",
        "2",
        "--stoker.micro-batch-size",
        "4",
        "--stoker.epochs",
        "1",
        "--stoker.shuffle.seed",
        "0",
        "--stoker.model.preset",
        "qwen2-vl",
        "--stoker.resume-step",
        "2",
    ]
    clash = run_resume(path, "--savepoint", "sp", "--", "--stoker.shuffle.seed", "4")
    assert clash.returncode == 2
    assert "--stoker.shuffle.seed 4 contradicts the data state" in clash.stderr
    # another world size: a stage from the next record, without the savepoint
    elastic = run_resume(path, "--savepoint", "sp", "--", "--stoker.dp-world-size", "4")
    assert elastic.returncode == 0, elastic.stderr
    assert "-s" not in elastic.stdout.split()
    assert "--stoker.mixture.start-position 24 --stoker.resume-step 2" in elastic.stdout
    junk = tmp_path / "junk.pt"
    torch.save({"model": torch.ones(1)}, junk)
    missing = run_resume(junk, "--savepoint", "sp")
    assert missing.returncode == 2 and "holds no dict with format" in missing.stderr


# ---------------------------------------------------------------------- device hand-off
@pytest.mark.parametrize("pin", [False, True])
def test_device_hand_off_gives_the_plain_paths_values_in_owned_memory(shm_root, pin):
    """Two copies of one job: rank 1 read plainly from one, through the hand-off from the other."""
    written = job(shm_root)
    twin = shm_root.parent / "twin"
    job(twin)
    plain = list(StokerDataset(shm_root, rank=1, world_size=W, timeout_s=10))
    ds = StokerDataset(twin, rank=1, world_size=W, timeout_s=10, device="cpu", pin_memory=pin)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        moved = list(ds)
    assert any("no accelerator" in str(w.message) for w in caught) == pin
    assert [b.step for b in moved] == [b.step for b in plain] == list(range(6))
    for p, m in zip(plain, moved, strict=True):
        assert_is_sample_batch(m, written[(m.step, 1)])
        assert set(m) == set(p) == MODEL_INPUT_NAMES
        for k in MODEL_INPUT_NAMES:
            assert m[k].dtype == p[k].dtype and m[k].device.type == "cpu"
            assert torch.equal(m[k], p[k]), k
            assert m[k].data_ptr() != p[k].data_ptr()
            m[k].add_(0)  # writable: memory the batch owns, not the read-only mapping
        assert (m.step, m.rank, m.generation, m.source, m.location, m.backfilled_slots) == (
            p.step,
            p.rank,
            p.generation,
            p.source,
            p.location,
            p.backfilled_slots,
        )
        assert torch.equal(m.sample_index, p.sample_index)
    assert ds.staged_step is None


def replace_batch(root, step, rank, seed):
    """Publish other content under (step, rank)'s name (atomic rename over the old file)."""
    samples = make_samples(step, rank, B, seed=seed, world_size=W)
    write_batch(root, step, rank, build_record_batch(samples))
    return samples


@pytest.mark.parametrize("device", [None, "cpu"])
def test_double_buffer_holds_the_next_batch_before_it_is_asked_for(shm_root, device):
    """Without the reader's own read-ahead, only the hand-off's double buffer takes step 1 before
    it is asked for: a file published over step 1's after step 0 was handed over is then not
    what step 1 holds. The plain path (device None) reads the replacement: the control."""
    written = job(shm_root)
    ds = StokerDataset(
        shm_root, rank=0, world_size=W, timeout_s=10, read_ahead=False, device=device
    )
    it = iter(ds)
    first = next(it)
    assert first.step == 0
    assert ds.state_dict()["next_step"] == 1, "the buffered batch is not counted"
    replacement = replace_batch(shm_root, 1, 0, seed=99)
    second = next(it)
    assert second.step == 1
    if device is None:
        assert ds.staged_step is None
        assert_is_sample_batch(second, replacement)
    else:
        assert ds.staged_step == 2, "step 2's copy is issued while step 1 trains"
        assert consumed(shm_root, 0) == 1, "fetching step 2 acknowledged step 1"
        assert_is_sample_batch(second, written[(1, 0)])
    assert ds.state_dict()["next_step"] == 2
