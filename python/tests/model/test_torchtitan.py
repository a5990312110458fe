"""``stoker.torchtitan.StokerDataLoader`` in torchtitan's training loop and DCP checkpoints,
killed and resumed against a real job, trains on exactly the batches of an uninterrupted run; and
resumed at another DP world size, on each record once.

The real job (embedded Flink, the jar ``./stoker test`` built) writes the shared LLaVA-style
dataset for W = 2 DP ranks, B = 2 rows (10 steps), prefetch depth 2, as
``test_train_example.py`` (both use ``harness.train_runs``). ``torchtitan_trainer.py`` trains a
tiny random Qwen2-VL on it, one process per rank over gloo on the CPU: the real
``StokerDataLoader`` (a torchtitan ``BaseDataLoader`` built from its ``Config``), torchtitan's
``OptimizersContainer``, ``LRSchedulersContainer``, ``CrossEntropyLoss`` and DCP
``CheckpointManager`` (model, optimizer, lr scheduler, data loader, train state), in the loop of
``Trainer.train``, 2 batches per optimizer step, a checkpoint every 2 optimizer steps
(``step-2`` after Stoker step 3, ``step-4`` after 7) and at the last (``step-5``).
torchtitan's ``Trainer`` itself does not run on a CPU (it selects a CUDA device whatever the
machine has), hence that loop.

1. An uninterrupted run: job and trainer to the end; the trainer's record of every batch
   (step, rank, sample indices, sha256 of the tensors, loss) is the reference.
2. The same run, whose trainers are killed with SIGKILL once ``step-2`` is written and a rank
   trained on a later step; the job is stopped with a savepoint (REST ``POST
   /jobs/<id>/stop``); ``python -m stoker.resume`` on the DCP folder ``step-2`` prints the resume
   command, which restarts the job from the savepoint; the trainers restart and load ``step-2``.
   Asserted: per rank, the batches trained on up to the checkpoint and after the resume are the
   uninterrupted run's (steps 0 .. 9 once each, same samples and bytes, same losses: model,
   optimizer and lr schedule came back exactly), and the steps lost with the kill are trained
   again on the same batches.
3. From a copy of the same ``step-2``: ``python -m stoker.resume ... -- --stoker.dp-world-size 1
   --stoker.micro-batch-size 4`` prints a command without the savepoint that starts a stage at
   step 4 from record 16 (in a new job directory); one rank of B = 4 loads the checkpoint of 2
   ranks (the data loader's state has the same key at every world size). Asserted: the records
   trained on before and after are the uninterrupted run's, each once, at the same positions.

The module's fixture runs 1 and 2 up to the savepoint once; each test runs its resume.

Besides, on batch files written as the protocol says (no job): the loader built from
torchtitan's ``Trainer.Config``, its batches' keys and shifted labels, rank 0's state restoring
rank 1, and the errors of a wrong setup.

Every process the test starts is stopped at the end, also on failure; the logs and records are
kept in ``.stoker/logs/torchtitan/``. Runs in the model venv (torch, transformers, torchtitan).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from harness import train_runs as tr
from harness.batches import make_job
from harness.paths import REPO_ROOT
from harness.train_runs import KILL_AFTER_CHECKPOINT, NUM_STEPS, TIMEOUT_S, B, W
from torchtitan.trainer import Trainer

from stoker.data_state import DataStateError
from stoker.torchtitan import STATE_KEY, StokerDataLoader, training_steps

TRAINER = Path(__file__).with_name("torchtitan_trainer.py")
GRAD_ACCUM = 2
CHECKPOINT = (KILL_AFTER_CHECKPOINT + 1) // GRAD_ACCUM  # torchtitan's step-2: Stoker steps 0..3
LOGS = REPO_ROOT / ".stoker" / "logs" / "torchtitan"


def _trainers(
    procs: tr.Processes,
    job_dir: Path,
    dump: Path,
    record: Path,
    log: str,
    *,
    world_size: int = W,
    micro_batch_size: int = B,
) -> list[subprocess.Popen[bytes]]:
    """``torchtitan_trainer.py``'s ranks with the variables torchrun sets, one thread each."""
    port = str(tr.free_port())
    out = []
    for rank in range(world_size):
        env = dict(
            os.environ,
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(world_size),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            OMP_NUM_THREADS="1",
            CUDA_VISIBLE_DEVICES="",
            PYTHONPATH=os.pathsep.join(
                [str(REPO_ROOT / "python"), str(REPO_ROOT / "examples")]
                + [os.environ.get("PYTHONPATH", "")]
            ),
        )
        cmd = [
            sys.executable,
            str(TRAINER),
            "--root",
            str(job_dir),
            "--dump-folder",
            str(dump),
            "--local-batch-size",
            str(micro_batch_size),
            "--grad-accum",
            str(GRAD_ACCUM),
            "--record",
            str(record),
            "--data-timeout-s",
            str(TIMEOUT_S),
        ]
        out.append(procs.start(cmd, dump.parent / f"{log}-rank-{rank}.log", env))
    return out


def _step_folder(dump: Path, step: int) -> Path:
    return dump / "checkpoint" / f"step-{step}"


def _resume_command(checkpoint: Path, savepoint: str, options: list[str]) -> list[str]:
    printed = subprocess.run(
        [sys.executable, "-m", "stoker.resume", str(checkpoint), "--savepoint", savepoint, "--"]
        + options,
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT / "python")),
    )
    assert printed.returncode == 0, printed.stderr
    return shlex.split(printed.stdout)


@dataclass
class Runs:
    """The module's runs: the uninterrupted reference and the killed run, with what the
    resumes need."""

    base: Path
    procs: tr.Processes
    reference: list[dict[str, Any]]
    java: list[str]
    options: list[str]
    first_generation: str | None
    savepoint: str
    lost: list[dict[str, Any]]


def _elastic_options(options: list[str], out_root: Path) -> list[str]:
    """The job's ``options`` for one rank of B = W x B, writing under ``out_root``."""
    replace = {
        "--stoker.dp-world-size": "1",
        "--stoker.micro-batch-size": str(W * B),
        "--stoker.output.root": str(out_root),
    }
    kept = [
        part
        for i, part in enumerate(options)
        if part not in replace and (i == 0 or options[i - 1] not in replace)
    ]
    return kept + [part for pair in replace.items() for part in pair]


@pytest.fixture(scope="module")
def runs() -> Iterator[Runs]:
    """The uninterrupted run, then the run killed after ``step-2`` with its job stopped at a
    savepoint and a copy of ``step-2`` in ``elastic-dump/`` (run once for the module: both tests
    resume it)."""
    base = Path(tempfile.mkdtemp(prefix="stoker-torchtitan-", dir="/dev/shm"))
    procs = tr.Processes()
    on_sigterm = signal.signal(signal.SIGTERM, tr.terminated)
    try:
        java, options = tr.job_parts(base, "ref", base, tr.free_port())
        job = procs.start([*java, *options], base / "ref-job.log")
        ref = base / "ref.jsonl"
        for r, t in enumerate(_trainers(procs, base / "ref", base / "ref-dump", ref, "ref")):
            tr.finish(t, f"the uninterrupted trainer's rank {r}", base)
        tr.finish(job, "the uninterrupted run's job", base)

        port = tr.free_port()
        java, options = tr.job_parts(base, "run", base, port)
        job = procs.start([*java, *options], base / "run-job.log")
        dump, record = base / "run-dump", base / "run.jsonl"
        trainers = _trainers(procs, base / "run", dump, record, "run")
        checkpoint = _step_folder(dump, CHECKPOINT)
        tr.wait(
            f"{checkpoint} and a step after it",
            lambda: (
                (checkpoint / ".metadata").exists()
                and any(r["step"] > KILL_AFTER_CHECKPOINT for r in tr.records(record))
            ),
            logs=[base / "run-job.log", base / "run-rank-0.log", base / "run-rank-1.log"],
        )
        for t in trainers:
            tr.Processes.kill(t)
        assert not _step_folder(dump, CHECKPOINT + 1).exists(), "killed too late"
        elastic_dump = base / "elastic-dump"
        shutil.copytree(checkpoint, _step_folder(elastic_dump, CHECKPOINT))
        first_generation = tr.generation(base / "run")
        savepoint = tr.stop_with_savepoint(port, base / "savepoints")
        assert job.wait(timeout=60) == 0, "the job stopped with a savepoint exited non-zero"
        lost = [r for r in tr.records(record) if r["step"] > KILL_AFTER_CHECKPOINT]

        yield Runs(
            base=base,
            procs=procs,
            reference=tr.records(ref),
            java=java,
            options=options,
            first_generation=first_generation,
            savepoint=savepoint,
            lost=lost,
        )
    finally:
        procs.stop_all()
        signal.signal(signal.SIGTERM, on_sigterm)
        shutil.rmtree(LOGS, ignore_errors=True)
        LOGS.mkdir(parents=True)
        for path in [*base.glob("*.log"), *base.glob("*.jsonl")]:
            shutil.copy(path, LOGS)
        shutil.rmtree(base, ignore_errors=True)


def _first_run(runs: Runs) -> list[dict[str, Any]]:
    """The killed run's batches up to its checkpoint."""
    return [
        r
        for r in tr.records(runs.base / "run.jsonl")
        if r["generation"] == runs.first_generation and r["step"] <= KILL_AFTER_CHECKPOINT
    ]


def test_killed_and_resumed_torchtitan_trainer_trains_on_the_uninterrupted_runs_batches(
    runs: Runs,
) -> None:
    reference = tr.by_rank(runs.reference)
    for r in range(W):
        assert [rec["step"] for rec in reference[r]] == list(range(NUM_STEPS)), r
    assert max(r["step"] for r in runs.lost) < NUM_STEPS - 1, "killed after the end"

    dump = runs.base / "run-dump"
    resume_cmd = _resume_command(_step_folder(dump, CHECKPOINT), runs.savepoint, runs.options)
    assert resume_cmd[:4] == ["flink", "run", "-s", runs.savepoint], resume_cmd
    assert resume_cmd[-2:] == ["--stoker.resume-step", str(KILL_AFTER_CHECKPOINT)]
    job = runs.procs.start(
        [*runs.java, *resume_cmd[5:], "--execution.state-recovery.path", runs.savepoint],
        runs.base / "run-job-2.log",
    )
    tr.wait(
        "the resumed job's new generation",
        lambda: tr.generation(runs.base / "run") not in (None, runs.first_generation),
        logs=[runs.base / "run-job-2.log"],
    )
    record = runs.base / "run.jsonl"
    for r, t in enumerate(_trainers(runs.procs, runs.base / "run", dump, record, "run-2")):
        tr.finish(t, f"the resumed trainer's rank {r}", runs.base)
    tr.finish(job, "the resumed job", runs.base)

    after = [r for r in tr.records(record) if r["generation"] != runs.first_generation]
    before = _first_run(runs)
    for r in range(W):
        trained = tr.by_rank(before)[r] + tr.by_rank(after)[r]
        tr.assert_same_training(trained, reference[r], f"rank {r}")
        replayed = {rec["step"]: rec for rec in tr.by_rank(after)[r]}
        for rec in tr.by_rank(runs.lost)[r]:  # trained again, on the same batch
            tr.assert_same_training([rec], [replayed[rec["step"]]], f"rank {r} lost step")
    assert after[0]["step"] == KILL_AFTER_CHECKPOINT + 1
    log = (runs.base / "run-2-rank-0.log").read_text()
    assert f"Loading the checkpoint from {_step_folder(dump, CHECKPOINT)}" in log
    assert "data state next step 8; to resume the job for it: python -m stoker.resume" in log
    assert (_step_folder(dump, NUM_STEPS // GRAD_ACCUM) / ".metadata").exists()  # the last step


def test_torchtitan_trainer_resumed_with_another_world_size_trains_on_each_record_once(
    runs: Runs,
) -> None:
    """W=2, B=2 -> one rank of B=4 from the killed run's ``step-2`` (16 records trained on): the
    printed command restores no savepoint and starts a stage at step 4 from record 16, here in a
    job directory of its own."""
    elastic_root, elastic_dump = runs.base / "elastic", runs.base / "elastic-dump"
    resume_cmd = _resume_command(
        _step_folder(elastic_dump, CHECKPOINT),
        runs.savepoint,
        _elastic_options(runs.options, elastic_root),
    )
    assert resume_cmd[:3] == ["flink", "run", "job/target/stoker-job.jar"], resume_cmd
    start = resume_cmd.index("--stoker.mixture.start-position")
    assert resume_cmd[start + 1] == str((KILL_AFTER_CHECKPOINT + 1) * W * B)
    job = runs.procs.start([*runs.java, *resume_cmd[3:]], runs.base / "elastic-job.log")
    record = runs.base / "elastic.jsonl"
    (one,) = _trainers(
        runs.procs,
        elastic_root / "run",
        elastic_dump,
        record,
        "elastic",
        world_size=1,
        micro_batch_size=W * B,
    )
    tr.finish(one, "the resumed trainer", runs.base)
    tr.finish(job, "the resumed job", runs.base)

    after = tr.records(record)
    assert {r["rank"] for r in after} == {0} and after[0]["step"] == KILL_AFTER_CHECKPOINT + 1
    assert all(r["rows"] <= W * B for r in after)
    assert tr.trained_samples(_first_run(runs) + after) == tr.trained_samples(runs.reference)


def _loader(
    root: Path, rank: int, local_batch_size: int = 4, accumulation: int = 1
) -> StokerDataLoader:
    """Built as ``Trainer.__init__`` builds ``config.dataloader``."""
    config = Trainer.Config(
        dataloader=StokerDataLoader.Config(
            root=str(root), timeout_s=10, gradient_accumulation_steps=accumulation
        )
    )
    return config.dataloader.build(
        dp_world_size=2,
        dp_rank=rank,
        tokenizer=None,
        seq_len=64,
        local_batch_size=local_batch_size,
        snapshot_every_n_steps=None,
    )


def test_loader_yields_torchtitans_batches_and_restores_any_ranks_state(shm_root: Path) -> None:
    """On batch files written as the protocol says (no job): ``(input_dict, labels)`` with the
    model's keys and labels shifted by one; rank 0's state restores rank 1 at its next step;
    the errors a wrong setup gets; placeholder batches filling the last optimizer step."""
    fields = {"dataset_fingerprint": "sha256:" + "1" * 64, "model_preset": "qwen2-vl"}
    written = make_job(shm_root, world_size=2, num_steps=4, micro_batch_size=4, **fields)
    assert training_steps(shm_root, 2) == 2
    assert training_steps(shm_root, 3) == 2  # the last optimizer step is filled
    with pytest.raises(
        ValueError, match="local_batch_size is 2.*set training.local_batch_size = 4"
    ):
        _loader(shm_root, 0, local_batch_size=2)

    rank0 = _loader(shm_root, 0)
    it = iter(rank0)
    for step in range(2):
        input_dict, labels = next(it)
        assert (input_dict.step, input_dict.rank) == (step, 0)
        assert set(input_dict) == {
            "input",
            "attention_mask",
            "mm_token_type_ids",
            "pixel_values",
            "image_grid_thw",
        }
        assert input_dict["input"].dtype == labels.dtype == torch.int64
        assert labels.shape == input_dict["input"].shape
        assert (labels[:, -1] == -100).all()
    saved = rank0.state_dict()
    assert set(saved) == {STATE_KEY}

    rank1 = _loader(shm_root, 1)
    rank1.load_state_dict(saved)  # rank 0's, as DCP may have kept it
    assert rank1.dataset.state_dict()["rank"] == 1 and rank1.dataset.next_step == 2
    input_dict, labels = next(iter(rank1))
    assert (input_dict.step, input_dict.rank) == (2, 1)
    for row, sample in enumerate(written[(2, 1)]):  # labels: the second half of the ids
        ids, n = sample["ids"], len(sample["ids"])
        assert input_dict["input"][row, :n].tolist() == ids
        want = [-100] * (n // 2 - 1) + ids[n // 2 :] + [-100] * (labels.shape[1] - n + 1)
        assert labels[row].tolist() == want  # position t is scored against token t + 1
    with pytest.raises(DataStateError, match="not a checkpoint of a stoker.torchtitan"):
        _loader(shm_root, 1).load_state_dict({"dp_rank_1": b"", "world_size": 2})

    # 3 batches per optimizer step over the job's 4 steps: steps 2 and 3, then two placeholder
    # batches (one token, label -100) fill the second optimizer step, and the iteration ends
    rest = _loader(shm_root, 0, accumulation=3)
    rest.load_state_dict(saved)
    got = list(rest)
    assert [d.step for d, _ in got] == [2, 3, 4, 5]
    for d, lab in got[2:]:
        assert d["input"].shape == (1, 1) and lab.tolist() == [[-100]] and len(d.sample_index) == 0
    assert rest.dataset.state_dict()["next_step"] == 4  # the placeholders are no job steps
