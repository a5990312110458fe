"""Kill-and-resume runs of the example trainers and the framework adapters against the real job:
the job's shape (the shared LLaVA-style dataset, W = 2 ranks of B = 2 rows, 10 steps), the
processes a test starts (each in its own session, all stopped at the end), the job's REST calls,
and the records the trainers write (one JSON line per batch trained on: step, rank, rows,
sample indices, locations, back-filled rows, tensor SHA-256, tokens, loss) and what is asserted
on them. Used by tests/model/test_train_example.py, test_torchtitan.py and test_megatron.py."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

from harness.jobs import job_command
from harness.paths import DATASET, REPO_ROOT

W, B = 2, 2
NUM_STEPS = 10  # ceil(38 records / (W * B))
GRAD_ACCUM, CHECKPOINT_EVERY = 2, 2  # checkpoints after steps 3, 7 and 9 (the end)
KILL_AFTER_CHECKPOINT = 3
MAX_PIXELS = 12544  # 16 merged image tokens at most: a CPU step of the tiny model is short
TIMEOUT_S = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def terminated(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # so that the test's finally stops its processes


class Processes:
    """Every process the test starts, each in its own session so that a kill reaches its
    children too; :meth:`stop_all` ends those still running (also when pytest gets SIGTERM)."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> Any:
        with log.open("ab") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.procs.append(proc)
        return proc

    @staticmethod
    def kill(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop_all(self) -> None:
        for proc in self.procs:
            self.kill(proc)


def wait(what: str, condition: Any, timeout_s: float = TIMEOUT_S, logs: list[Path] = ()) -> Any:
    """``condition()``'s first truthy value, polled every 20 ms; fails the test after
    ``timeout_s`` with the tails of ``logs``."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}\n{tails(logs)}")
        time.sleep(0.02)


MAIN_CLASS = "dev.stoker.job.StokerJob"


def job_parts(
    out_root: Path, job_name: str, base: Path, rest_port: int, prefetch_depth: int = 2
) -> tuple[list[str], list[str]]:
    """The real job's command line split after its main class: (the JVM's part, the job's
    ``--key value`` options); ``prefetch_depth`` 0: no prefetch bound (no trainer needed)."""
    cmd = job_command(
        out_root,
        job_name,
        "--stoker.image.max-pixels",
        str(MAX_PIXELS),
        "--stoker.prefetch-depth",
        str(prefetch_depth),
        "--rest.port",
        str(rest_port),
        "--execution.checkpointing.dir",
        (base / "checkpoints").as_uri(),
        dataset=DATASET,
        world_size=W,
        micro_batch_size=B,
    )
    cut = cmd.index(MAIN_CLASS) + 1
    return cmd[:cut], cmd[cut:]


def finished_job(base: Path) -> Path:
    """Run the job of these runs once to its end with no prefetch bound, into
    ``base/uninterrupted``: every batch file stays there (no trainer acknowledges or unlinks
    one). Its directory, which :func:`copy_job` copies for each uninterrupted trainer run (a
    reader unlinks the files it consumed). The batches are those of any run of the same job
    (the sequence is a function of the dataset, seed, W and B only), which the kill-and-resume
    tests check against the killed runs' tensors."""
    java, options = job_parts(base, "uninterrupted", base, free_port(), prefetch_depth=0)
    log = base / "uninterrupted-job.log"
    with log.open("wb") as out:
        proc = subprocess.run(
            [*java, *options], stdout=out, stderr=subprocess.STDOUT, timeout=TIMEOUT_S
        )
    assert proc.returncode == 0, (
        f"the uninterrupted run's job exited {proc.returncode}:\n{tails([log])}"
    )
    return base / "uninterrupted"


def copy_job(job_dir: Path, dest: Path) -> Path:
    """A copy of the finished job directory ``job_dir`` (:func:`finished_job`) at ``dest``, for
    one trainer run to consume."""
    shutil.copytree(job_dir, dest)
    return dest


def tails(logs: Any) -> str:
    """The last 3000 characters of each existing file of ``logs``, for a failure message."""
    return "\n".join(f"--- {p}:\n{p.read_text()[-3000:]}" for p in sorted(logs) if p.exists())


def finish(proc: subprocess.Popen[bytes], what: str, base: Path) -> None:
    """Wait for ``proc`` to exit 0; else fail with the tails of every log in ``base``."""
    try:
        rc = proc.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what} did not end within {TIMEOUT_S}s:\n{tails(base.glob('*.log'))}")
    assert rc == 0, f"{what} exited {rc}:\n{tails(base.glob('*.log'))}"


def records(path: Path) -> list[dict[str, Any]]:
    """The trainer's record file ``path`` (one JSON line per batch; a torn last line skipped)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def rest(port: int, path: str, body: dict[str, Any] | None = None) -> Any:
    """GET (or, with ``body``, POST) ``path`` of the job's REST API on ``port``, as JSON."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="GET" if body is None else "POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def stop_with_savepoint(port: int, target: Path) -> str:
    """``POST /jobs/<id>/stop`` (no drain) on the only job; the savepoint's path."""
    (job,) = rest(port, "/jobs/overview")["jobs"]
    trigger = rest(port, f"/jobs/{job['jid']}/stop", {"targetDirectory": target.as_uri()})
    url = f"/jobs/{job['jid']}/savepoints/{trigger['request-id']}"
    status = wait(
        "the savepoint",
        lambda: (s := rest(port, url))["status"]["id"] != "IN_PROGRESS" and s,
        timeout_s=120,
    )
    assert "location" in status["operation"], f"the savepoint failed: {status}"
    return str(status["operation"]["location"])


def generation(job_dir: Path) -> str | None:
    """The generation ``job_dir/manifest.json`` names (``None``: no readable manifest yet)."""
    try:
        return str(json.loads((job_dir / "manifest.json").read_text())["generation"])
    except (OSError, ValueError, KeyError):
        return None


def by_rank(records: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """``records`` per rank (0 .. W-1), each in its order."""
    out: dict[int, list[dict[str, Any]]] = {r: [] for r in range(W)}
    for rec in records:
        out[rec["rank"]].append(rec)
    return out


def batch(rec: dict[str, Any]) -> tuple[Any, ...]:
    """What identifies the batch a record trained on: step, rank, rows, samples, tensor bytes."""
    return (rec["step"], rec["rank"], rec["rows"], tuple(rec["sample_index"]), rec["sha256"])


def assert_same_training(got: list[dict[str, Any]], want: list[dict[str, Any]], what: str) -> None:
    """``got`` trained on ``want``'s batches in order, with the same tokens and losses."""
    assert [batch(r) for r in got] == [batch(r) for r in want], what
    for g, w in zip(got, want, strict=True):
        assert g["tokens"] == w["tokens"], (what, g["step"])
        if w["loss"] is not None:
            assert g["loss"] == pytest.approx(w["loss"], rel=1e-6), (what, g["step"])


def trained_samples(records: list[dict[str, Any]]) -> dict[int, str]:
    """Slot index -> location of every sample trained on (back-filled copies left out)."""
    out: dict[int, str] = {}
    for rec in records:
        for row, (index, location) in enumerate(
            zip(rec["sample_index"], rec["location"], strict=True)
        ):
            if row not in rec["backfilled"]:
                assert index not in out, f"sample {index} trained on twice"
                out[index] = location
    return out


def rank_env(rank: int, world_size: int, port: str, *paths: Path) -> dict[str, str]:
    """The environment of one trainer rank as torchrun sets it (gloo on 127.0.0.1:``port``), on
    the CPU with one thread, with ``paths`` and ``python/`` on ``PYTHONPATH``."""
    return dict(
        os.environ,
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=port,
        OMP_NUM_THREADS="1",
        CUDA_VISIBLE_DEVICES="",
        PYTHONPATH=os.pathsep.join(
            [str(REPO_ROOT / "python"), *map(str, paths), os.environ.get("PYTHONPATH", "")]
        ),
    )


def start_ranks(
    procs: Processes, cmd: list[str], logs: Path, log: str, world_size: int, *paths: Path
) -> list[subprocess.Popen[bytes]]:
    """``cmd`` once per rank of ``world_size``, each with :func:`rank_env` (one free port for
    all) and its output in ``logs/<log>-rank-<r>.log``."""
    port = str(free_port())
    return [
        procs.start(cmd, logs / f"{log}-rank-{rank}.log", rank_env(rank, world_size, port, *paths))
        for rank in range(world_size)
    ]


def resume_command(states: list[str], savepoint: str, options: list[str]) -> list[str]:
    """The command ``python -m stoker.resume STATES --savepoint SAVEPOINT -- OPTIONS`` prints
    (``states``: the trainer checkpoint's data states, or its folder), split into words."""
    printed = subprocess.run(
        [sys.executable, "-m", "stoker.resume", *states, "--savepoint", savepoint, "--", *options],
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT / "python")),
    )
    assert printed.returncode == 0, printed.stderr
    return shlex.split(printed.stdout)


def elastic_options(options: list[str], out_root: Path | None = None) -> list[str]:
    """The job's ``options`` for one rank of B = W x B (the elastic resume), writing under
    ``out_root`` if given."""
    replace = {"--stoker.dp-world-size": "1", "--stoker.micro-batch-size": str(W * B)}
    if out_root is not None:
        replace["--stoker.output.root"] = str(out_root)
    kept = [
        part
        for i, part in enumerate(options)
        if part not in replace and (i == 0 or options[i - 1] not in replace)
    ]
    return kept + [part for pair in replace.items() for part in pair]


def assert_elastic_command(resume_cmd: list[str]) -> None:
    """The elastic resume command restores no savepoint and starts at the record after the
    checkpoint's last step."""
    assert resume_cmd[:3] == ["flink", "run", "job/target/stoker-job.jar"], resume_cmd
    start = resume_cmd.index("--stoker.mixture.start-position")
    assert resume_cmd[start + 1] == str((KILL_AFTER_CHECKPOINT + 1) * W * B)


def up_to_checkpoint(records: list[dict[str, Any]], generation: str | None) -> list[dict[str, Any]]:
    """The records of ``generation`` (the killed run's) up to the checkpoint's last step."""
    return [
        r for r in records if r["generation"] == generation and r["step"] <= KILL_AFTER_CHECKPOINT
    ]


def keep_logs(base: Path, dest: Path) -> None:
    """Replace ``dest`` with the logs and trainer records in ``base``."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for path in [*base.glob("*.log"), *base.glob("*.jsonl")]:
        shutil.copy(path, dest)


class Trainers(Protocol):
    """Starts a framework adapter's trainer ranks on the job directory ``job_dir``, checkpointing
    into ``save`` and recording each batch in ``record``; logs ``<save's parent>/<log>-rank-<r>.log``."""

    def __call__(
        self,
        procs: Processes,
        job_dir: Path,
        save: Path,
        record: Path,
        log: str,
        *,
        world_size: int = W,
        micro_batch_size: int = B,
    ) -> list[subprocess.Popen[bytes]]: ...


@dataclass(frozen=True)
class Adapter:
    """What a framework adapter's kill-and-resume tests (``test_torchtitan``, ``test_megatron``)
    differ in: its trainers, its checkpoint after Stoker step :data:`KILL_AFTER_CHECKPOINT`
    (``checkpoint``, counted in optimizer steps or iterations of ``accumulation`` batches), the
    latest complete checkpoint in a save folder, and the data states ``stoker.resume`` reads."""

    name: str
    trainers: Trainers
    accumulation: int
    latest: Callable[[Path], int | None]
    states: Callable[[Path, int], list[str]]

    @property
    def checkpoint(self) -> int:
        return (KILL_AFTER_CHECKPOINT + 1) // self.accumulation


@dataclass
class KilledRun:
    """An adapter's runs, shared by its module's tests: the uninterrupted reference and the run
    killed after its checkpoint, its job stopped with a savepoint; ``run-save`` is its trainers'
    save folder and ``elastic-save`` a copy of it as the kill left it."""

    base: Path
    procs: Processes
    reference: list[dict[str, Any]]
    java: list[str]
    options: list[str]
    first_generation: str | None
    savepoint: str
    lost: list[dict[str, Any]]

    def first_run(self) -> list[dict[str, Any]]:
        """The killed run's batches up to its checkpoint."""
        return up_to_checkpoint(records(self.base / "run.jsonl"), self.first_generation)


def killed_run(adapter: Adapter, uninterrupted_job: Path, logs: Path) -> Iterator[KilledRun]:
    """The body of a module fixture: the uninterrupted run (the trainers over a copy of
    ``uninterrupted_job``), then the run whose trainers are killed with SIGKILL once the
    checkpoint is the latest and a rank trained on a later step, its job stopped with a savepoint.
    Every process is stopped at the end; the logs and records are kept in ``logs``."""
    base = Path(tempfile.mkdtemp(prefix=f"stoker-{adapter.name}-", dir="/dev/shm"))
    procs = Processes()
    on_sigterm = signal.signal(signal.SIGTERM, terminated)
    try:
        ref, ref_dir = base / "ref.jsonl", copy_job(uninterrupted_job, base / "ref")
        for r, t in enumerate(adapter.trainers(procs, ref_dir, base / "ref-save", ref, "ref")):
            finish(t, f"the uninterrupted trainer's rank {r}", base)

        port = free_port()
        java, options = job_parts(base, "run", base, port)
        job = procs.start([*java, *options], base / "run-job.log")
        save, record = base / "run-save", base / "run.jsonl"
        trainers = adapter.trainers(procs, base / "run", save, record, "run")
        wait(
            f"checkpoint {adapter.checkpoint} and a step after it",
            lambda: (
                adapter.latest(save) == adapter.checkpoint
                and any(r["step"] > KILL_AFTER_CHECKPOINT for r in records(record))
            ),
            logs=[base / "run-job.log", base / "run-rank-0.log", base / "run-rank-1.log"],
        )
        for t in trainers:
            Processes.kill(t)
        assert adapter.latest(save) == adapter.checkpoint, "killed too late"
        shutil.copytree(save, base / "elastic-save")
        first_generation = generation(base / "run")
        savepoint = stop_with_savepoint(port, base / "savepoints")
        assert job.wait(timeout=60) == 0, "the job stopped with a savepoint exited non-zero"
        yield KilledRun(
            base=base,
            procs=procs,
            reference=records(ref),
            java=java,
            options=options,
            first_generation=first_generation,
            savepoint=savepoint,
            lost=[r for r in records(record) if r["step"] > KILL_AFTER_CHECKPOINT],
        )
    finally:
        procs.stop_all()
        signal.signal(signal.SIGTERM, on_sigterm)
        keep_logs(base, logs)
        shutil.rmtree(base, ignore_errors=True)


def resume_killed_run(runs: KilledRun, adapter: Adapter) -> None:
    """Resume the killed run from the command ``stoker.resume`` prints for its checkpoint and the
    savepoint, restart its trainers, and assert that per rank the batches trained on up to the
    checkpoint and after the resume are the uninterrupted run's (steps 0 .. N-1 once each, same
    samples, bytes and losses) and that the steps lost to the kill are trained again on the same
    batches; and that the trainers checkpointed the last step."""
    reference = by_rank(runs.reference)
    for r in range(W):
        assert [rec["step"] for rec in reference[r]] == list(range(NUM_STEPS)), r
    assert max(r["step"] for r in runs.lost) < NUM_STEPS - 1, "killed after the end"
    save = runs.base / "run-save"
    resume_cmd = resume_command(
        adapter.states(save, adapter.checkpoint), runs.savepoint, runs.options
    )
    assert resume_cmd[:4] == ["flink", "run", "-s", runs.savepoint], resume_cmd
    assert resume_cmd[-2:] == ["--stoker.resume-step", str(KILL_AFTER_CHECKPOINT)]
    job = runs.procs.start(
        [*runs.java, *resume_cmd[5:], "--execution.state-recovery.path", runs.savepoint],
        runs.base / "run-job-2.log",
    )
    wait(
        "the resumed job's new generation",
        lambda: generation(runs.base / "run") not in (None, runs.first_generation),
        logs=[runs.base / "run-job-2.log"],
    )
    record = runs.base / "run.jsonl"
    for r, t in enumerate(adapter.trainers(runs.procs, runs.base / "run", save, record, "run-2")):
        finish(t, f"the resumed trainer's rank {r}", runs.base)
    finish(job, "the resumed job", runs.base)

    after = [r for r in records(record) if r["generation"] != runs.first_generation]
    for r in range(W):
        assert_same_training(
            by_rank(runs.first_run())[r] + by_rank(after)[r], reference[r], f"rank {r}"
        )
        replayed = {rec["step"]: rec for rec in by_rank(after)[r]}
        for rec in by_rank(runs.lost)[r]:  # trained again, on the same batch
            assert_same_training([rec], [replayed[rec["step"]]], f"rank {r} lost step")
    assert after[0]["step"] == KILL_AFTER_CHECKPOINT + 1
    assert adapter.latest(save) == NUM_STEPS // adapter.accumulation  # the last step's


def resume_elastic(runs: KilledRun, adapter: Adapter) -> None:
    """W=2, B=2 -> one rank of B=4 from the copy of the killed run's checkpoint (16 records
    trained on): the printed command restores no savepoint and starts a stage at step 4 from
    record 16, here in a job directory of its own. Asserted: the records trained on before and
    after are the uninterrupted run's, each once, at the same positions."""
    elastic_root, elastic_save = runs.base / "elastic", runs.base / "elastic-save"
    resume_cmd = resume_command(
        adapter.states(elastic_save, adapter.checkpoint),
        runs.savepoint,
        elastic_options(runs.options, elastic_root),
    )
    assert_elastic_command(resume_cmd)
    job = runs.procs.start([*runs.java, *resume_cmd[3:]], runs.base / "elastic-job.log")
    record = runs.base / "elastic.jsonl"
    (one,) = adapter.trainers(
        runs.procs,
        elastic_root / "run",
        elastic_save,
        record,
        "elastic",
        world_size=1,
        micro_batch_size=W * B,
    )
    finish(one, "the resumed trainer", runs.base)
    finish(job, "the resumed job", runs.base)

    after = records(record)
    assert {r["rank"] for r in after} == {0} and after[0]["step"] == KILL_AFTER_CHECKPOINT + 1
    assert all(r["rows"] <= W * B for r in after)
    assert trained_samples(runs.first_run() + after) == trained_samples(runs.reference)
