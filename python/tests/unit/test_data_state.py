"""stoker.data_state and ``python -m stoker.resume`` on JSON checkpoints (no torch: the dev venv),
and that ``import stoker`` does not import torch. The torch side is in tests/model."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from harness.batches import write_manifest
from harness.paths import REPO_ROOT

from stoker import Manifest
from stoker.data_state import (
    STATE_FORMAT,
    DataStateError,
    as_rank,
    check_restore,
    find_states,
    make_state,
    next_position,
    validate_state,
)
from stoker.resume import main, resume_command

FP = "sha256:" + "a" * 64


def manifest(root, **kw):
    fields = {
        "world_size": 2,
        "num_steps": 6,
        "dataset_fingerprint": FP,
        "model_preset": "qwen2-vl",
    }
    fields.update(kw)
    write_manifest(root, **fields)
    return Manifest.load(root / "manifest.json")


def test_manifest_reads_the_fingerprint_and_preset_and_accepts_a_manifest_without(shm_root):
    m = manifest(shm_root)
    assert (m.dataset_fingerprint, m.model_preset) == (FP, "qwen2-vl")
    write_manifest(shm_root, world_size=2, num_steps=6)
    old = Manifest.load(shm_root / "manifest.json")
    assert (old.dataset_fingerprint, old.model_preset) == (None, None)


def test_import_stoker_does_not_import_torch():
    code = (
        "import sys, stoker, stoker.data_state, stoker.resume, stoker.images; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT / "python",
        check=True,
    )
    assert out.stdout.strip() == "False"


def test_check_restore_names_both_values(shm_root):
    m = manifest(shm_root, first_step=3, generation="g2")
    state = make_state(m, rank=1, next_step=3, generation="g1")
    check_restore(state, m, 1, 2, "here")  # continues exactly
    with pytest.raises(DataStateError, match=r"continues at step 4.*first_step 3.*resume-step 3"):
        check_restore(dict(state, next_step=4), m, 1, 2, "here")
    same_gen = dict(state, generation="g2", next_step=5)
    check_restore(same_gen, m, 1, 2, "here")  # the job was not resubmitted: the reader checks acks
    with pytest.raises(DataStateError, match="continues at step 2.*first_step 3"):
        check_restore(dict(same_gen, next_step=2), m, 1, 2, "here")
    seq = dict(state["sequence"], shuffle_seed=9)
    with pytest.raises(DataStateError, match="shuffle_seed: checkpoint 9, job 0"):
        check_restore(dict(state, sequence=seq), m, 1, 2, "here")


def test_as_rank_makes_one_ranks_state_restore_another_rank_of_the_same_checkpoint(shm_root):
    m = manifest(shm_root)
    state = make_state(m, rank=0, next_step=3, generation=m.generation)
    with pytest.raises(DataStateError, match="DP rank 0's, but this trainer is rank 1"):
        check_restore(state, m, 1, 2, "here")
    rank1 = as_rank(state, 1)
    assert rank1 == make_state(m, rank=1, next_step=3, generation=m.generation)
    check_restore(rank1, m, 1, 2, "here")
    assert state["rank"] == 0  # a copy
    with pytest.raises(DataStateError, match="rank 2 is outside the data state's world size 2"):
        as_rank(state, 2)


@pytest.mark.parametrize(
    ("broken", "match"),
    [
        ([], "is a dict"),
        ({"format": "x"}, "format 'x'"),
        ({"format": STATE_FORMAT}, "keys"),
    ],
)
def test_validate_state_rejects_what_is_not_a_state(broken, match):
    with pytest.raises(DataStateError, match=match):
        validate_state(broken)


def test_validate_state_rejects_bad_values(shm_root):
    state = make_state(manifest(shm_root), 0, 3, "g1")
    with pytest.raises(DataStateError, match="next_step=-1"):
        validate_state(dict(state, next_step=-1))
    with pytest.raises(DataStateError, match="sequence"):
        validate_state(dict(state, sequence={"world_size": 2}))


def test_find_states_in_nested_checkpoints_and_by_key(shm_root):
    state = make_state(manifest(shm_root), 0, 3, "g1")
    # torchdata's StatefulDataLoader keeps the dataset's state under "dataset_state"
    ckpt = {"model": {"w": [1.0]}, "loader": {"_num_yielded": 3, "dataset_state": state}}
    assert find_states(ckpt) == [state]
    assert find_states(ckpt, "loader.dataset_state") == [state]
    assert find_states({"ranks": [state, dict(state, rank=1)]}, "ranks") == [
        state,
        dict(state, rank=1),
    ]
    with pytest.raises(DataStateError, match="no 'loader.nope'"):
        find_states(ckpt, "loader.nope")
    with pytest.raises(DataStateError, match="holds no dict"):
        find_states({"model": {}})


def test_resume_command_from_json_states(shm_root, tmp_path, capsys):
    state = make_state(manifest(shm_root, shuffle_seed=None), 0, 10, "g1")
    a, b = tmp_path / "rank0.json", tmp_path / "rank1.json"
    a.write_text(json.dumps({"data": state}))
    b.write_text(json.dumps({"data": dict(state, rank=1)}))
    argv = [str(a), str(b), "--savepoint", "s3://ckpt/sp-1", "--jar", "stoker-job.jar"]
    assert main([*argv, "--", "--stoker.dataset.path", "s3://d", "--stoker.job-name=test-job"]) == 0
    assert capsys.readouterr().out.split() == [
        "flink",
        "run",
        "-s",
        "s3://ckpt/sp-1",
        "stoker-job.jar",
        "--stoker.dataset.path",
        "s3://d",
        "--stoker.job-name=test-job",
        "--stoker.dp-world-size",
        "2",
        "--stoker.micro-batch-size",
        "4",
        "--stoker.epochs",
        "1",
        "--stoker.shuffle",
        "false",
        "--stoker.model.preset",
        "qwen2-vl",
        "--stoker.resume-step",
        "9",
    ]
    b.write_text(json.dumps(dict(state, rank=1, next_step=11)))
    assert main(argv) == 2
    assert "disagree on next_step: rank 0 has 10, rank 1 has 11" in capsys.readouterr().err
    assert main([str(a), "--savepoint", "sp", "--", "--stoker.resume-step", "3"]) == 2
    assert "leave --stoker.resume-step out" in capsys.readouterr().err
    assert main([str(a), "--savepoint", "sp", "--", "--stoker.job-name", "x"]) == 2
    assert "--stoker.job-name x contradicts the data state" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.json"), "--savepoint", "sp"]) == 2
    with pytest.raises(DataStateError, match="no data state"):
        resume_command([], "sp")


def test_packing_max_tokens_is_part_of_the_sequence(shm_root):
    packed = manifest(shm_root, packing_max_tokens=4096)
    assert packed.packing_max_tokens == 4096
    state = make_state(packed, 0, 0, "g1")
    assert state["sequence"]["packing_max_tokens"] == 4096
    check_restore(state, packed, 0, 2, "here")
    unpacked = manifest(shm_root)
    with pytest.raises(DataStateError, match="packing_max_tokens: checkpoint 4096, job None"):
        check_restore(state, unpacked, 0, 2, "here")
    other = manifest(shm_root, packing_max_tokens=2048)
    with pytest.raises(DataStateError, match="packing_max_tokens: checkpoint 4096, job 2048"):
        check_restore(state, other, 0, 2, "here")
    with pytest.raises(DataStateError, match="packing_max_tokens='4096' is not an int"):
        validate_state(dict(state, sequence=dict(state["sequence"], packing_max_tokens="4096")))


def test_a_state_saved_before_packing_existed_reads_as_unpacked(shm_root):
    m = manifest(shm_root)
    state = make_state(m, 0, 3, "g1")
    old = dict(
        state, sequence={k: v for k, v in state["sequence"].items() if k != "packing_max_tokens"}
    )
    assert validate_state(old) == state
    assert "packing_max_tokens" not in old["sequence"]  # not changed in place
    check_restore(validate_state(old), m, 0, 2, "here")


def test_resume_command_of_a_packed_state_turns_packing_on(shm_root):
    state = make_state(manifest(shm_root, packing_max_tokens=4096), 0, 10, "g1")
    cmd = resume_command([state], "sp", jar="j.jar", options=["--stoker.dataset.path", "d"])
    i = cmd.index("--stoker.packing.enabled")
    assert cmd[i : i + 4] == [
        "--stoker.packing.enabled",
        "true",
        "--stoker.packing.max-tokens",
        "4096",
    ]
    with pytest.raises(DataStateError, match="--stoker.packing.max-tokens 2048 contradicts"):
        resume_command([state], "sp", options=["--stoker.packing.max-tokens", "2048"])
    with pytest.raises(DataStateError, match="--stoker.packing.enabled false contradicts"):
        resume_command([state], "sp", options=["--stoker.packing.enabled", "false"])
    unpacked = make_state(manifest(shm_root), 0, 10, "g1")
    assert "--stoker.packing.enabled" not in resume_command([unpacked], "sp")
    with pytest.raises(
        DataStateError,
        match="--stoker.packing.enabled true contradicts the data state, which was trained on unpacked",
    ):
        resume_command([unpacked], "sp", options=["--stoker.packing.enabled", "true"])


FP2 = "sha256:" + "b" * 64


def _stage2(root, history, **kw):
    """Stage 2 of a run: another dataset from step 6 (W=2, 12 steps), generation g2."""
    fields = {
        "generation": "g2",
        "first_step": 6,
        "num_steps": 12,
        "mixture_start_step": 6,
        "dataset_fingerprint": FP2,
        "plan_history": history,
    }
    fields.update(kw)
    return manifest(root, **fields)


def test_a_new_stage_continues_a_state_of_the_stage_before_at_its_start_step_only(shm_root):
    stage1 = manifest(shm_root, generation="g1")
    state = make_state(stage1, 1, 6, "g1")  # trained on steps 0..5 of stage 1
    assert state["sequence"]["mixture_start_step"] == 0
    seq2 = dict(state["sequence"], dataset_fingerprint=FP2, mixture_start_step=6, num_records=96)
    history = [{"mixture": "s1.yaml", **state["sequence"]}, {"mixture": "s2.yaml", **seq2}]
    stage2 = _stage2(shm_root, history)
    assert (stage2.mixture_start_step, stage2.plan_history) == (6, tuple(history))
    check_restore(state, stage2, 1, 2, "here")  # the stage starts at the checkpoint's step
    after = make_state(stage2, 1, 9, "g2")
    assert after["sequence"] == seq2
    # the stage resumed later goes on in its own sequence only
    resumed = _stage2(shm_root, history, generation="g3", first_step=9)
    check_restore(after, resumed, 1, 2, "here")
    with pytest.raises(DataStateError, match=r"dataset_fingerprint: checkpoint 'sha256:a+', job"):
        check_restore(dict(state, next_step=9), resumed, 1, 2, "here")

    # a checkpoint of another step than the stage's start: refused, naming what to pass
    at7 = _stage2(shm_root, history, first_step=7, mixture_start_step=7)
    with pytest.raises(
        DataStateError,
        match=r"mixture_start_step: checkpoint 0, job 7.*--stoker.mixture.start-step 6 and "
        r"--stoker.resume-step 5",
    ):
        check_restore(state, at7, 1, 2, "here")
    # the previous stage in the history is another sequence than the checkpoint's
    other = [{"mixture": "s0.yaml", **dict(state["sequence"], shuffle_seed=9)}, history[1]]
    with pytest.raises(
        DataStateError,
        match=r"new stage at step 6 after the stage of mixture 's0.yaml'.*shuffle_seed: "
        r"checkpoint 0, job 9",
    ):
        check_restore(state, _stage2(shm_root, other), 1, 2, "here")
    # a job directory that never saw the previous stage: the stated step is enough
    check_restore(state, _stage2(shm_root, [history[1]]), 1, 2, "here")
    # a state saved before stages existed is of a mixture that started at step 0
    old = dict(
        state, sequence={k: v for k, v in state["sequence"].items() if k != "mixture_start_step"}
    )
    assert validate_state(old) == state
    with pytest.raises(DataStateError, match="mixture_start_step=-1 is not an integer >= 0"):
        validate_state(dict(state, sequence=dict(state["sequence"], mixture_start_step=-1)))


def test_resume_command_keeps_a_stage_and_changes_the_mixture_only_when_told(shm_root):
    stage1 = manifest(shm_root, generation="g1")
    state = make_state(stage1, 0, 6, "g1")
    seq2 = dict(state["sequence"], dataset_fingerprint=FP2, mixture_start_step=6, num_records=96)
    stage2 = _stage2(shm_root, [{"mixture": "s2.yaml", **seq2}])
    in_stage2 = make_state(stage2, 0, 9, "g2")
    cmd = resume_command([in_stage2], "sp", options=["--stoker.mixture.path", "s2.yaml"])
    assert cmd[2:4] == ["-s", "sp"]
    i = cmd.index("--stoker.mixture.start-step")
    assert cmd[i + 1] == "6" and cmd[-2:] == ["--stoker.resume-step", "8"]
    with pytest.raises(DataStateError, match="--stoker.mixture.start-step 0 contradicts"):
        resume_command([in_stage2], "sp", options=["--stoker.mixture.start-step", "0"])
    # the next stage at the checkpoint's step: its own epochs and seed, the job and world size
    # still the state's
    change = [
        "--stoker.mixture.path",
        "s3.yaml",
        "--stoker.mixture.start-step",
        "6",
        "--stoker.epochs",
        "3",
        "--stoker.shuffle.seed",
        "4",
    ]
    cmd = resume_command([state], "sp", options=change)
    assert cmd[:3] == ["flink", "run", "job/target/stoker-job.jar"]  # no savepoint: a new stage
    assert cmd[cmd.index("--stoker.dp-world-size") + 1] == "2"
    assert cmd.count("--stoker.epochs") == 1 and cmd.count("--stoker.shuffle.seed") == 1
    assert cmd[-2:] == ["--stoker.resume-step", "5"]
    # a new stage may also change the world size
    cmd = resume_command([state], "sp", options=[*change, "--stoker.dp-world-size", "4"])
    assert cmd.count("--stoker.dp-world-size") == 1
    assert cmd[cmd.index("--stoker.dp-world-size") + 1] == "4"


def _consumed_by_simulation(n, epochs, plans, next_step):
    """Records of ``epochs`` x ``n`` consumed through step ``next_step - 1`` when ``plans`` (a
    list of (start step, W, B)) take turns, each stage filling its steps from the next unread
    record and padding the last step of every epoch: one step at a time, not the plan's formula."""
    read, step = 0, 0
    for i, (start, w, b) in enumerate(plans):
        assert start == step
        end = plans[i + 1][0] if i + 1 < len(plans) else next_step
        while step < end and read < epochs * n:
            epoch_end = (read // n + 1) * n
            read = min(read + w * b, epoch_end)  # a step never crosses into the next epoch
            step += 1
        step = end
    return read


@pytest.mark.parametrize("n", [1, 7, 23, 24])
def test_next_position_counts_the_records_before_the_next_step(n):
    for cut in range(0, 10):
        for next_step in range(cut, cut + 12):
            first = {"mixture_start_step": 0, "mixture_start_position": 0}
            seq1 = {"num_records": n, "epochs": 3, "world_size": 4, "micro_batch_size": 2, **first}
            q = next_position({"sequence": seq1, "next_step": cut})
            assert q == _consumed_by_simulation(n, 3, [(0, 4, 2)], cut)
            seq2 = dict(seq1, world_size=3, micro_batch_size=3)
            seq2.update(mixture_start_step=cut, mixture_start_position=q)
            assert next_position({"sequence": seq2, "next_step": next_step}) == (
                _consumed_by_simulation(n, 3, [(0, 4, 2), (cut, 3, 3)], next_step)
            ), (n, cut, next_step)


def test_a_stage_of_another_world_size_restores_any_rank_at_the_next_record(shm_root):
    stage1 = manifest(shm_root, generation="g1")  # W=2, 6 steps of B=4: 48 records
    state = make_state(stage1, 1, 3, "g1")  # trained on steps 0..2: 24 records
    assert next_position(state) == 24
    seq2 = dict(state["sequence"], world_size=3, mixture_start_step=3, mixture_start_position=24)
    history = [{"mixture": "s.yaml", **state["sequence"]}, {"mixture": "s.yaml", **seq2}]
    elastic = manifest(
        shm_root,
        generation="g2",
        world_size=3,
        first_step=3,
        num_steps=5,
        mixture_start_step=3,
        mixture_start_position=24,
        plan_history=history,
    )
    assert elastic.mixture_start_position == 24
    for rank in range(3):  # rank 1's state restores every rank of the new world size
        check_restore(state, elastic, rank, 3, "here")
    with pytest.raises(DataStateError, match="world_size: job 3 .here., this trainer 2"):
        check_restore(state, elastic, 1, 2, "here")
    # the job goes on elsewhere than where this trainer stopped
    with pytest.raises(
        DataStateError,
        match="from record 24 of the mixture's order, but the "
        "trainer's data state has consumed 16.*start-position 16",
    ):
        check_restore(
            dict(state, next_step=2),
            manifest(
                shm_root,
                generation="g2",
                world_size=3,
                first_step=2,
                num_steps=5,
                mixture_start_step=2,
                mixture_start_position=24,
                plan_history=history,
            ),
            0,
            3,
            "here",
        )
    # without a stage at the checkpoint's step, another world size is refused, naming the way
    with pytest.raises(DataStateError, match="resubmit the job with --stoker.dp-world-size 3"):
        check_restore(state, stage1, 1, 3, "here")
    # a state of the new stage carries its sequence, and a state saved before elastic stages
    # existed started at position 0
    after = make_state(elastic, 2, 4, "g2")["sequence"]
    assert (after["world_size"], after["mixture_start_position"]) == (3, 24)
    old = dict(
        state,
        sequence={k: v for k, v in state["sequence"].items() if k != "mixture_start_position"},
    )
    assert validate_state(old) == state


def test_resume_command_with_another_world_size_starts_a_stage_at_the_next_record(shm_root):
    state = make_state(manifest(shm_root, generation="g1"), 0, 3, "g1")
    cmd = resume_command([state], "sp", options=["--stoker.dp-world-size", "3"])
    assert cmd[:3] == ["flink", "run", "job/target/stoker-job.jar"]  # no savepoint
    opts = dict(zip(cmd[3::2], cmd[4::2], strict=True))
    assert opts["--stoker.dp-world-size"] == "3"
    assert opts["--stoker.micro-batch-size"] == "4"
    assert opts["--stoker.mixture.start-step"] == "3"
    assert opts["--stoker.mixture.start-position"] == "24"
    assert cmd[-2:] == ["--stoker.resume-step", "2"]
    # a later resume inside that stage keeps its start step and position, from its savepoint
    elastic = manifest(
        shm_root,
        generation="g2",
        world_size=3,
        micro_batch_size=8,
        first_step=3,
        num_steps=5,
        mixture_start_step=3,
        mixture_start_position=24,
    )
    later = make_state(elastic, 2, 4, "g2")
    cmd = resume_command([later], "sp")
    assert cmd[2:4] == ["-s", "sp"]
    opts = dict(zip(cmd[5::2], cmd[6::2], strict=True))
    assert opts["--stoker.mixture.start-position"] == "24"
    assert opts["--stoker.micro-batch-size"] == "8"
