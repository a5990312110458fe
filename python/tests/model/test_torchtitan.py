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

1. An uninterrupted run: the trainer to the end over a copy of the tier's finished job
   (``uninterrupted_job``, run once with no prefetch bound for every kill-and-resume test); the
   trainer's record of every batch (step, rank, sample indices, sha256 of the tensors, loss) is
   the reference.
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

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from harness import train_runs as tr
from harness.batches import make_job
from harness.paths import REPO_ROOT
from harness.train_runs import TIMEOUT_S, B, W
from torchtitan.trainer import Trainer

from stoker.data_state import DataStateError
from stoker.torchtitan import STATE_KEY, StokerDataLoader, training_steps

TRAINER = Path(__file__).with_name("torchtitan_trainer.py")
GRAD_ACCUM = 2
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
    return tr.start_ranks(procs, cmd, dump.parent, log, world_size, REPO_ROOT / "examples")


def _step_folder(dump: Path, step: int) -> Path:
    return dump / "checkpoint" / f"step-{step}"


def _latest(dump: Path) -> int | None:
    """The last complete DCP checkpoint's step in ``dump`` (torchtitan loads the last folder
    ``step-<N>`` with a ``.metadata``)."""
    done = [int(p.name[5:]) for p in dump.glob("checkpoint/step-*") if (p / ".metadata").exists()]
    return max(done, default=None)


ADAPTER = tr.Adapter(
    name="torchtitan",
    trainers=_trainers,
    accumulation=GRAD_ACCUM,
    latest=_latest,
    states=lambda dump, step: [str(_step_folder(dump, step))],
)


@pytest.fixture(scope="module")
def runs(uninterrupted_job: Path) -> Iterator[tr.KilledRun]:
    """The uninterrupted run, then the run killed after ``step-2`` (run once for the module:
    both tests resume it)."""
    yield from tr.killed_run(ADAPTER, uninterrupted_job, LOGS)


def test_killed_and_resumed_torchtitan_trainer_trains_on_the_uninterrupted_runs_batches(
    runs: tr.KilledRun,
) -> None:
    tr.resume_killed_run(runs, ADAPTER)
    log = (runs.base / "run-2-rank-0.log").read_text()
    checkpoint = _step_folder(runs.base / "run-save", ADAPTER.checkpoint)
    assert f"Loading the checkpoint from {checkpoint}" in log
    assert "data state next step 8; to resume the job for it: python -m stoker.resume" in log


def test_torchtitan_trainer_resumed_with_another_world_size_trains_on_each_record_once(
    runs: tr.KilledRun,
) -> None:
    """W=2, B=2 -> one rank of B=4 from the killed run's ``step-2``: its data loader's state has
    the same key at every world size (:func:`harness.train_runs.resume_elastic`)."""
    tr.resume_elastic(runs, ADAPTER)


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
    rank0.dataset.close()  # the trainer that saved it ends: one reader per rank at a time
    rest = _loader(shm_root, 0, accumulation=3)
    rest.load_state_dict(saved)
    got = list(rest)
    assert [d.step for d, _ in got] == [2, 3, 4, 5]
    for d, lab in got[2:]:
        assert d["input"].shape == (1, 1) and lab.tolist() == [[-100]] and len(d.sample_index) == 0
    assert rest.dataset.state_dict()["next_step"] == 4  # the placeholders are no job steps
