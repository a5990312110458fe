"""examples/train_qwen_vl.py (a plain loop) and examples/train_qwen_vl_hf.py (the Hugging Face
``Trainer`` through ``stoker.hf.StokerTrainer``), each killed and resumed against a real job,
train on exactly the batches of an uninterrupted run.

The real job (embedded Flink, the jar ``./stoker test`` built) writes the shared LLaVA-style
dataset for W = 2 DP ranks, B = 2 rows (10 steps), with a prefetch depth of 2; the example
trains a tiny random Qwen2-VL on it as two processes (one per rank, ``torch.distributed`` over
gloo, launched with the variables torchrun sets), 2 batches per optimizer step, a checkpoint every
2 optimizer steps (after steps 3 and 7) and at the end.

1. An uninterrupted run: the trainer to the end over a copy of the tier's finished job
   (``uninterrupted_job``: the job run once with no prefetch bound for every kill-and-resume
   test); its record of every batch trained on (step, rank, sample indices, sha256 of the batch's
   tensors, loss) is the reference (run once per example for the module: both Trainer tests
   compare with it).
2. The same run, whose trainer processes are killed with SIGKILL once the checkpoint at step 3
   is written and a rank trained on a later step; the job is stopped with a savepoint (REST
   ``POST /jobs/<id>/stop``) while it idles at its prefetch bound; ``python -m stoker.resume``
   on the checkpoint's data states prints the resume command, whose options (with
   ``--stoker.resume-step 3``) restart the job from the savepoint; the trainers restart with
   ``--resume``.

Asserted: the batches trained on up to the checkpoint and after the resume are, per rank, the
uninterrupted run's in order (steps 0 .. 9 once each, same sample indices and tensor bytes), with
the same losses (the model and optimizer come back exactly); the steps trained after the
checkpoint and lost with the kill are trained again on the same batches. The reference for batch
identity is the uninterrupted run's own record: the sequence is a function of the dataset, seed,
W and B only (README, "Dataflow"). Every process the test starts is stopped at the end, also on
failure; the logs and records of the last run are kept in ``.stoker/logs/train-example/<kind>/``.
Runs in the model venv (torch, transformers, accelerate). The Trainer's checkpoints are
``checkpoint-<N>`` per optimizer step N (after Stoker steps 3 and 7), and its resume restores each
rank's data state from the folder, with ``ignore_data_skip``: no batch is skipped twice.

3. The Trainer killed the same way and resumed at another world size (one rank of B = 4, as after
   losing a node): the records trained on before and after are the uninterrupted run's, each once.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness import train_runs as tr
from harness.paths import REPO_ROOT
from harness.train_runs import (
    CHECKPOINT_EVERY,
    GRAD_ACCUM,
    KILL_AFTER_CHECKPOINT,
    NUM_STEPS,
    TIMEOUT_S,
    B,
    W,
)

EXAMPLE = REPO_ROOT / "examples" / "train_qwen_vl.py"
EXAMPLE_HF = REPO_ROOT / "examples" / "train_qwen_vl_hf.py"
#: The last run's logs and records (jobs, trainer ranks), kept after the test.
LOGS = REPO_ROOT / ".stoker" / "logs" / "train-example"


@dataclass(frozen=True)
class Example:
    """One of the example trainers: where its checkpoints go and what it keeps there.

    ``loop``: examples/train_qwen_vl.py, ``<ckpt>/step-<S>/data-rank-<r>.pt`` and ``latest``;
    ``hf``: examples/train_qwen_vl_hf.py (the Hugging Face Trainer, stoker.hf.StokerTrainer),
    ``<ckpt>/checkpoint-<N>/stoker-data-state-rank-<r>.json``, N the optimizer step."""

    kind: str

    @property
    def script(self) -> Path:
        return EXAMPLE if self.kind == "loop" else EXAMPLE_HF

    def options(self, ckpt: Path) -> list[str]:
        if self.kind == "loop":
            return ["--checkpoint-dir", str(ckpt), "--checkpoint-every", str(CHECKPOINT_EVERY)]
        return ["--output-dir", str(ckpt), "--save-steps", str(CHECKPOINT_EVERY)]

    def checkpoint(self, ckpt: Path, step: int) -> Path:
        """The folder of the checkpoint taken after Stoker step ``step``."""
        if self.kind == "loop":
            return ckpt / f"step-{step:010d}"
        return ckpt / f"checkpoint-{(step + 1) // GRAD_ACCUM}"

    def is_latest(self, ckpt: Path, step: int) -> bool:
        """Whether the checkpoint after ``step`` is complete and the last one."""
        if self.kind == "loop":
            latest = ckpt / "latest"
            return latest.exists() and latest.read_text().strip() == f"step-{step:010d}"
        folder = self.checkpoint(ckpt, step)
        done = [p for p in ckpt.glob("checkpoint-*") if (p / "trainer_state.json").exists()]
        last = max(done, key=lambda p: int(p.name.split("-")[1]), default=None)
        return len(self.states(folder)) == W and last == folder

    def states(self, folder: Path) -> list[Path]:
        pattern = "data-rank-*.pt" if self.kind == "loop" else "stoker-data-state-rank-*.json"
        return sorted(folder.glob(pattern))


def _trainers(
    procs: tr.Processes,
    example: Example,
    job_dir: Path,
    base: Path,
    name: str,
    *extra: str,
    world_size: int = W,
) -> list[subprocess.Popen[bytes]]:
    """The example's ranks (both, or ``world_size``), with the variables torchrun sets, on the
    CPU, one thread each."""
    port = str(tr.free_port())
    out = []
    for rank in range(world_size):
        env = tr.rank_env(rank, world_size, port)
        cmd = [
            sys.executable,
            str(example.script),
            "--root",
            str(job_dir),
            "--model",
            "tiny",
            "--grad-accum",
            str(GRAD_ACCUM),
            *example.options(base / f"{name}-ckpt"),
            "--record",
            str(base / f"{name}.jsonl"),
            "--data-timeout-s",
            str(TIMEOUT_S),
            *extra,
        ]
        out.append(procs.start(cmd, base / f"{name}-rank-{rank}.log", env))
    return out


@pytest.fixture(scope="module")
def uninterrupted(uninterrupted_job: Path) -> Iterator[Callable[[Example], list[dict[str, Any]]]]:
    """The uninterrupted run of an example (both ranks to the end over a copy of the tier's
    finished job, ``uninterrupted_job``): its record of every batch trained on. Run once per
    example kind for the module, as the tests that compare with it share it; its logs are kept in
    ``.stoker/logs/train-example/<kind>-uninterrupted/``."""
    base = Path(tempfile.mkdtemp(prefix="stoker-train-ref-", dir="/dev/shm"))
    procs = tr.Processes()
    on_sigterm = signal.signal(signal.SIGTERM, tr.terminated)
    runs: dict[str, list[dict[str, Any]]] = {}

    def run(example: Example) -> list[dict[str, Any]]:
        if example.kind not in runs:
            name = f"{example.kind}-ref"
            job_dir = tr.copy_job(uninterrupted_job, base / name)
            for r, t in enumerate(_trainers(procs, example, job_dir, base, name)):
                tr.finish(t, f"the uninterrupted {example.kind} trainer's rank {r}", base)
            runs[example.kind] = tr.records(base / f"{name}.jsonl")
        return runs[example.kind]

    try:
        yield run
    finally:
        procs.stop_all()
        signal.signal(signal.SIGTERM, on_sigterm)
        for kind in runs:
            logs_dir = LOGS / f"{kind}-uninterrupted"
            shutil.rmtree(logs_dir, ignore_errors=True)
            logs_dir.mkdir(parents=True)
            for path in [*base.glob(f"{kind}-ref*.log"), *base.glob(f"{kind}-ref.jsonl")]:
                shutil.copy(path, logs_dir)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("example", [Example("loop"), Example("hf")], ids=lambda e: e.kind)
def test_killed_and_resumed_trainer_trains_on_the_uninterrupted_runs_batches(
    example: Example, uninterrupted: Callable[[Example], list[dict[str, Any]]]
) -> None:
    t_start = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="stoker-train-example-", dir="/dev/shm"))
    procs = tr.Processes()
    on_sigterm = signal.signal(signal.SIGTERM, tr.terminated)
    try:
        # 1. the uninterrupted run
        reference = tr.by_rank(uninterrupted(example))
        for r in range(W):
            assert [rec["step"] for rec in reference[r]] == list(range(NUM_STEPS)), r
        t_ref = time.monotonic()

        # 2. the run that is killed after its checkpoint at step KILL_AFTER_CHECKPOINT
        port = tr.free_port()
        job_dir, ckpt, record = base / "run", base / "run-ckpt", base / "run.jsonl"
        java, options = tr.job_parts(base, "run", base, port)
        job = procs.start([*java, *options], base / "run-job.log")
        trainers = _trainers(procs, example, job_dir, base, "run")
        logs = [base / "run-job.log", base / "run-rank-0.log", base / "run-rank-1.log"]
        checkpoint = example.checkpoint(ckpt, KILL_AFTER_CHECKPOINT)

        def past_checkpoint() -> bool:
            if not example.is_latest(ckpt, KILL_AFTER_CHECKPOINT):
                return False
            return any(rec["step"] > KILL_AFTER_CHECKPOINT for rec in tr.records(record))

        tr.wait(f"checkpoint {checkpoint} and a step after it", past_checkpoint, logs=logs)
        for t in trainers:
            tr.Processes.kill(t)
        assert example.is_latest(ckpt, KILL_AFTER_CHECKPOINT), "killed too late"
        lost = [r for r in tr.records(record) if r["step"] > KILL_AFTER_CHECKPOINT]
        assert max(r["step"] for r in lost) < NUM_STEPS - 1, "killed after the end"
        first_generation = tr.generation(job_dir)

        savepoint = tr.stop_with_savepoint(port, base / "savepoints")
        # the stopped run ends cleanly: a run stopped with a savepoint before its last step is
        # not an accounting failure (StokerJob.main logs its counts and exits 0)
        assert job.wait(timeout=60) == 0, "the job stopped with a savepoint exited non-zero"

        # the resume command from the trainer checkpoint's data states
        states = [str(p) for p in example.states(checkpoint)]
        assert len(states) == W
        resume_cmd = tr.resume_command(states, savepoint, options)
        assert resume_cmd[:4] == ["flink", "run", "-s", savepoint], resume_cmd
        assert resume_cmd[-2:] == ["--stoker.resume-step", str(KILL_AFTER_CHECKPOINT)]
        resumed_options = resume_cmd[5:]  # after the jar: what `flink run` would pass the job
        job2 = procs.start(
            [*java, *resumed_options, "--execution.state-recovery.path", savepoint],
            base / "run-job-2.log",
        )
        tr.wait(
            "the resumed job's new generation",
            lambda: tr.generation(job_dir) not in (None, first_generation),
            logs=[base / "run-job-2.log"],
        )
        for r, t in enumerate(_trainers(procs, example, job_dir, base, "run", "--resume")):
            tr.finish(t, f"the resumed trainer's rank {r}", base)
        tr.finish(job2, "the resumed job", base)
        t_end = time.monotonic()

        after = [r for r in tr.records(record) if r["generation"] != first_generation]
        before = tr.up_to_checkpoint(tr.records(record), first_generation)
        for r in range(W):
            trained = tr.by_rank(before)[r] + tr.by_rank(after)[r]
            tr.assert_same_training(trained, reference[r], f"rank {r}")
            replayed = {rec["step"]: rec for rec in tr.by_rank(after)[r]}
            for rec in tr.by_rank(lost)[r]:  # trained again, on the same batch, from the checkpoint
                tr.assert_same_training([rec], [replayed[rec["step"]]], f"rank {r} lost step")
        assert after[0]["step"] == KILL_AFTER_CHECKPOINT + 1
        assert example.is_latest(ckpt, NUM_STEPS - 1)  # both save at the end too
        if example.kind == "hf":  # saved with the Trainer's optimizer step 2: steps 0..3 done
            assert [json.loads(Path(p).read_text())["next_step"] for p in states] == [4] * W
        print(
            f"uninterrupted run {t_ref - t_start:.0f} s (0 if another test ran it); killed at steps "
            f"{sorted({r['step'] for r in lost})}, resumed from {checkpoint}; "
            f"interrupted run {t_end - t_ref:.0f} s"
        )
    finally:
        procs.stop_all()
        signal.signal(signal.SIGTERM, on_sigterm)
        tr.keep_logs(base, LOGS / example.kind)
        shutil.rmtree(base, ignore_errors=True)


def test_hf_trainer_resumed_with_another_world_size_trains_on_each_record_once(
    uninterrupted: Callable[[Example], list[dict[str, Any]]],
) -> None:
    """The Trainer at W=2, B=2, killed after its checkpoint at step 3 (16 records trained on), goes
    on as one rank of B=4: ``python -m stoker.resume ... -- --stoker.dp-world-size 1
    --stoker.micro-batch-size 4`` prints a command without the savepoint that starts a stage at
    step 4 from record 16; the single rank restores rank 0's data state. The records trained on
    up to the checkpoint and after the resume are the uninterrupted run's, each once, at the same
    positions (W*B is 4 in both, so a slot index is the same position of the order)."""
    example = Example("hf")
    base = Path(tempfile.mkdtemp(prefix="stoker-train-elastic-", dir="/dev/shm"))
    procs = tr.Processes()
    on_sigterm = signal.signal(signal.SIGTERM, tr.terminated)
    try:
        reference = tr.trained_samples(uninterrupted(example))

        port = tr.free_port()
        job_dir, ckpt, record = base / "run", base / "run-ckpt", base / "run.jsonl"
        java, options = tr.job_parts(base, "run", base, port)
        job = procs.start([*java, *options], base / "run-job.log")
        trainers = _trainers(procs, example, job_dir, base, "run")
        tr.wait(
            "checkpoint-2 and a step after it",
            lambda: (
                example.is_latest(ckpt, KILL_AFTER_CHECKPOINT)
                and any(rec["step"] > KILL_AFTER_CHECKPOINT for rec in tr.records(record))
            ),
            logs=[base / "run-job.log", base / "run-rank-0.log", base / "run-rank-1.log"],
        )
        for t in trainers:
            tr.Processes.kill(t)
        first_generation = tr.generation(job_dir)
        savepoint = tr.stop_with_savepoint(port, base / "savepoints")
        assert job.wait(timeout=60) == 0
        states = [str(p) for p in example.states(example.checkpoint(ckpt, KILL_AFTER_CHECKPOINT))]
        resume_cmd = tr.resume_command(states, savepoint, tr.elastic_options(options))
        tr.assert_elastic_command(resume_cmd)
        job2 = procs.start([*java, *resume_cmd[3:]], base / "run-job-2.log")
        tr.wait(
            "the resumed job's new generation",
            lambda: tr.generation(job_dir) not in (None, first_generation),
            logs=[base / "run-job-2.log"],
        )
        (one,) = _trainers(procs, example, job_dir, base, "run", "--resume", world_size=1)
        tr.finish(one, "the resumed trainer", base)
        tr.finish(job2, "the resumed job", base)

        records = tr.records(record)
        before = tr.up_to_checkpoint(records, first_generation)
        after = [r for r in records if r["generation"] != first_generation]
        assert {r["rank"] for r in after} == {0} and after[0]["step"] == KILL_AFTER_CHECKPOINT + 1
        assert all(r["rows"] <= W * B for r in after)
        trained = tr.trained_samples(before + after)
        assert trained == reference
    finally:
        procs.stop_all()
        signal.signal(signal.SIGTERM, on_sigterm)
        tr.keep_logs(base, LOGS / "hf-elastic")
        shutil.rmtree(base, ignore_errors=True)
