"""``stoker.megatron.StokerProvider`` in Megatron-LM's training loop, killed and resumed against a
real job, trains on exactly the batches of an uninterrupted run; and resumed at another DP world
size, on each record once.

The real job (embedded Flink, the jar ``./stoker test`` built) writes the shared LLaVA-style
dataset for W = 2 DP ranks, B = 2 rows (10 steps), prefetch depth 2, as
``test_train_example.py`` and ``test_torchtitan.py`` (all use ``harness.train_runs``).
``megatron_trainer.py`` trains a tiny random Qwen2-VL on it, one process per rank over gloo on
the CPU: megatron-core's ``parallel_state`` (TP = PP = 1), microbatch calculator, rerun state
machine and ``RerunDataIterator`` around the provider's iterator, in a reproduction of
``megatron/training``'s ``train_step`` / ``save_checkpoint`` / ``load_checkpoint`` (global batch
8 = 2 ranks x 2 rows x 2 micro-batches; a checkpoint every 2 iterations: ``iter_0000002`` after
Stoker step 3, ``iter_0000004`` after 7, and ``iter_0000005`` at the end).

1. An uninterrupted run: the trainer to the end over a copy of the tier's finished job
   (``uninterrupted_job``, run once with no prefetch bound for every kill-and-resume test); the
   trainer's record of every batch (step, rank, sample indices, sha256 of the tensors, loss) is
   the reference.
2. The same run, whose trainers are killed with SIGKILL once the tracker names iteration 2 and a
   rank trained on a later step; the job is stopped with a savepoint (REST ``POST
   /jobs/<id>/stop``); ``python -m stoker.resume`` on the two ``train_dataloader_dprank<r>.pt``
   of ``iter_0000002`` prints the resume command, which restarts the job from the savepoint; the
   trainers restart and load iteration 2. Asserted: per rank, the batches trained on up to the
   checkpoint and after the resume are the uninterrupted run's (steps 0 .. 9 once each, same
   samples and bytes, same losses: model and optimizer came back exactly), and the steps lost
   with the kill are trained again on the same batches.
3. From a copy of the same checkpoint: ``python -m stoker.resume ... -- --stoker.dp-world-size 1
   --stoker.micro-batch-size 4`` prints a command without the savepoint that starts a stage at
   step 4 from record 16 (in a new job directory); one rank of B = 4 (global batch still 8)
   loads the checkpoint of 2 DP ranks (dprank000's state, as it has no other). Asserted: the
   records trained on before and after are the uninterrupted run's, each once.

The module's fixture runs 1 and 2 up to the savepoint once; each test runs its resume. (Running
them side by side saves no time: the 2 cores are busy throughout.)

Besides, on batch files written as the protocol says (no job, one process): the iterator's
placeholders for a 0-row batch and for the last iteration's fill, its end, and the provider's
checks against Megatron's arguments at a restore.

Every process the test starts is stopped at the end, also on failure; the logs and records are
kept in ``.stoker/logs/megatron/``. Runs in the model venv (torch, transformers, megatron-core).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.distributed as dist
from harness import train_runs as tr
from harness.batches import build_record_batch, write_batch, write_manifest, write_steps
from harness.paths import REPO_ROOT
from harness.train_runs import TIMEOUT_S, B, W
from megatron.core import parallel_state
from megatron.core.rerun_state_machine import RerunDataIterator

from stoker.data_state import DataStateError
from stoker.megatron import StokerProvider, dataloader_state_path, train_iters

TRAINER = Path(__file__).with_name("megatron_trainer.py")
MICROBATCHES = 2
GLOBAL_BATCH = W * B * MICROBATCHES
LOGS = REPO_ROOT / ".stoker" / "logs" / "megatron"


def _trainers(
    procs: tr.Processes,
    job_dir: Path,
    save: Path,
    record: Path,
    log: str,
    *,
    world_size: int = W,
    micro_batch_size: int = B,
) -> list[subprocess.Popen[bytes]]:
    """``megatron_trainer.py``'s ranks with the variables torchrun sets, one thread each."""
    cmd = [
        sys.executable,
        str(TRAINER),
        "--root",
        str(job_dir),
        "--save",
        str(save),
        "--micro-batch-size",
        str(micro_batch_size),
        "--global-batch-size",
        str(GLOBAL_BATCH),
        "--record",
        str(record),
        "--data-timeout-s",
        str(TIMEOUT_S),
    ]
    return tr.start_ranks(procs, cmd, save.parent, log, world_size, REPO_ROOT / "examples")


def _tracker(save: Path) -> int | None:
    """The iteration Megatron's tracker file names (its latest complete checkpoint)."""
    try:
        return int((save / "latest_checkpointed_iteration.txt").read_text())
    except (OSError, ValueError):
        return None


def _states(save: Path, iteration: int) -> list[str]:
    return [str(dataloader_state_path(save / "dataloader", iteration, r)) for r in range(W)]


ADAPTER = tr.Adapter(
    name="megatron",
    trainers=_trainers,
    accumulation=MICROBATCHES,
    latest=_tracker,
    states=_states,
)


@pytest.fixture(scope="module")
def runs(uninterrupted_job: Path) -> Iterator[tr.KilledRun]:
    """The uninterrupted run, then the run killed after iteration 2's checkpoint (run once for
    the module: both tests resume it)."""
    yield from tr.killed_run(ADAPTER, uninterrupted_job, LOGS)


def test_killed_and_resumed_megatron_loop_trains_on_the_uninterrupted_runs_batches(
    runs: tr.KilledRun,
) -> None:
    tr.resume_killed_run(runs, ADAPTER)
    log = (runs.base / "run-2-rank-0.log").read_text()
    save = runs.base / "run-save"
    assert f"loaded checkpoint from {save} at iteration {ADAPTER.checkpoint}" in log
    assert "restored the Stoker data state from" in log


def test_megatron_loop_resumed_with_another_world_size_trains_on_each_record_once(
    runs: tr.KilledRun,
) -> None:
    """W=2, B=2 -> one rank of B=4 from the killed run's iteration 2
    (:func:`harness.train_runs.resume_elastic`): the one rank loads dprank000's state (it has no
    other)."""
    tr.resume_elastic(runs, ADAPTER)
    log = (runs.base / "elastic-rank-0.log").read_text()
    assert "train_dataloader_dprank000.pt (next step 4)" in log


@pytest.fixture()
def one_process() -> Iterator[None]:
    """``torch.distributed`` (gloo, 1 process) and megatron-core's model-parallel groups."""
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{tr.free_port()}", rank=0, world_size=1
    )
    parallel_state.initialize_model_parallel(1, 1)
    try:
        yield
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def test_iterator_fills_and_provider_checks_megatrons_arguments(
    shm_root: Path, one_process: None
) -> None:
    """On batch files written as the protocol says (no job): steps 0 and 1, a 0-row step 2, one
    placeholder filling the last iteration of 2 micro-batches, then the end; a restore checked
    against ``iteration`` and ``consumed_train_samples``; the errors of a wrong setup."""
    fields = {"dataset_fingerprint": "sha256:" + "1" * 64, "model_preset": "qwen2-vl"}
    write_manifest(shm_root, world_size=1, num_steps=3, micro_batch_size=4, **fields)
    write_steps(shm_root, range(2), world_size=1, micro_batch_size=4)
    write_batch(shm_root, 2, 0, build_record_batch([]), slots=4)  # all 4 slots dead-lettered
    assert train_iters(3, MICROBATCHES) == 2

    def args(**kw: Any) -> SimpleNamespace:
        base = {
            "micro_batch_size": 4,
            "global_batch_size": 8,
            "rampup_batch_size": None,
            "iteration": 0,
            "consumed_train_samples": 0,
            "dataloader_save": str(shm_root.parent / "dl"),
        }
        return SimpleNamespace(**{**base, **kw})

    given = args()
    provider = StokerProvider(shm_root, lambda: given, timeout_s=10)
    assert provider.is_distributed
    data, valid, test = provider()
    assert data is not None and valid is None and test is None
    it = RerunDataIterator(data)  # as Megatron wraps an external iterator
    assert [next(it).step for _ in range(2)] == [0, 1]  # iteration 1
    state = it.iterable.save_state()
    assert state["next_step"] == 2
    path = dataloader_state_path(given.dataloader_save, 1, 0)
    path.parent.mkdir(parents=True)
    torch.save({"dataloader_state_dict": state}, path)  # as maybe_save_dataloader_state does

    given = args(iteration=2, consumed_train_samples=16)
    with pytest.raises(DataStateError, match="no dataloader state .*iter_0000002"):
        provider()
    given = args(iteration=1, consumed_train_samples=8)  # 2 micro-batches per iteration: step 2
    data, _, _ = provider()
    assert data is not None
    it = RerunDataIterator(data)
    got = [next(it) for _ in range(2)]
    assert [b.step for b in got] == [2, 3]
    for b in got:  # the 0-row step and the fill: one token labelled -100, no samples
        assert b["input_ids"].shape == (1, 1) and b["labels"].tolist() == [[-100]]
        assert len(b.sample_index) == 0
    with pytest.raises(StopIteration):
        next(it)
    assert it.iterable.save_state()["next_step"] == 3  # the fill is no job step

    given = args(global_batch_size=4, iteration=1, consumed_train_samples=4)
    with pytest.raises(DataStateError, match="next step 2, but Megatron resumes after iteration 1"):
        provider()
    given = args(iteration=1, consumed_train_samples=16)
    with pytest.raises(DataStateError, match="consumed_train_samples is 16"):
        provider()
    given = args(iteration=1, dataloader_save=None)
    with pytest.raises(DataStateError, match="without --dataloader-save"):
        provider()
    given = args(micro_batch_size=2)
    with pytest.raises(ValueError, match="pass --micro-batch-size 4"):
        provider()
    given = args(global_batch_size=6)
    with pytest.raises(ValueError, match="not a multiple of DP size x micro-batch size = 4"):
        provider()
