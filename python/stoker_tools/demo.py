"""``./stoker demo`` once its set-up is done: the job on embedded Flink, fed from a local S3 server,
and a simulated trainer with two DP ranks reading every batch.

    python -m stoker_tools.demo --tokenizer DIR [--repo DIR] [--state-dir DIR] \\
        -- [DATASET_DIR | s3://bucket/prefix] [--key value ...]

``./stoker`` does the set-up (the Maven build, the venv, the tokenizer) and then runs this. Steps:

1. The dataset: the one given, else the sample dataset in ``STATE/sample-dataset`` (generated once
   with ``scripts/make_sample_dataset.py``).
2. A local dataset is served by a local S3 server (``dev.stoker.testkit.LocalS3Server``, S3Proxy,
   from ``testkit/target``) on ``127.0.0.1:$STOKER_S3_PORT`` (default 9000; 0 = a free port),
   uploaded to ``s3://stoker-demo/sample``. Its endpoint is read from that process's own output,
   after the upload (never from a file an earlier run may have left). ``STOKER_DEMO_S3=0``: the
   job reads the local folder.
3. The job (:func:`stoker_tools.job.embedded_command`: ``$STOKER_JAR``, ``$STOKER_CLASSPATH_FILE``,
   the JVM flags of ``flink-conf/jvm-opens.args``) with the demo's defaults below; an option given as
   ``--key value`` wins over a default. Its log: ``STATE/logs/<job>.log``.
4. The simulated trainer (``stoker_tools.simulate``, 20 ms per step), then the job's accounting line,
   the dead letters (:func:`print_results`), and one line on what the wait-time figures mean.
   ``STOKER_DEMO_TRAINER=0``: no trainer, no prefetch gate; every batch stays in
   ``<output root>/stoker-demo`` for ``notebooks/batch-viewer.ipynb``.

Every process it starts is stopped when it ends, also on failure or Ctrl-C (the S3 server also
ends by itself when this process dies: it exits when its standard input closes).

Exit code 0 when the trainer received every batch and the job's accounting line was found; 1 when
the job, the trainer or the S3 server failed; 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from stoker.dead_letters import main as print_dead_letters
from stoker.printable import escape_unencodable_stdout, printable
from stoker_tools.job import EMBEDDED_JVM_OPTS, JobBuild, JobBuildMissing, embedded_command

BUCKET = "stoker-demo"
S3_PREFIX = "sample"
#: The local S3 server's keys (LocalS3Server.ACCESS_KEY / SECRET_KEY; test credentials).
S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "stoker-local",
    "AWS_SECRET_ACCESS_KEY": "stoker-local-secret",
    "AWS_EC2_METADATA_DISABLED": "true",
}
STEP_TIME_MS = 20
#: What the job logs (dev.stoker.job.StokerJob) when a run from step 0 ends with its accounting
#: checked: "Run finished: records in steps 0..N=R, read=R, samples emitted=E, dead letters=D".
ACCOUNTING_MARK = "Run finished: "


def meaning(world_size: int, micro_batch_size: int, step_time_ms: float, cpus: int) -> str:
    """One line on what the trainer's wait-time figures mean, with this run's numbers."""
    wanted = world_size * micro_batch_size * 1000 / step_time_ms
    return (
        "wait_time_ratio is the share of the trainer's time spent waiting for its next batch "
        "(0 = never waited). The whole-run figure counts the start-up once (first_batch_s: the "
        "trainer starts before the JVM, Flink and the first images); steady_wait_time_ratio is "
        "after the first batch, what a long run sees. The simulated trainer takes "
        f"{step_time_ms:g} ms a step, so it wants {wanted:.0f} samples/s ({world_size} ranks x "
        f"{micro_batch_size}); a steady figure above 0 means the job made fewer on this "
        f"machine's {cpus} CPU cores (a real training step of a vision-language model is far "
        "longer than that)."
    )


class DemoError(Exception):
    """A step of the demo failed; the message says which and where its log is."""


class UsageError(DemoError):
    """The command line is wrong (exit code 2)."""


def log(msg: str) -> None:
    """``msg`` on standard error after a bold ``[stoker]``; any text from the data or the job in it
    must have gone through :func:`printable` already."""
    print(f"\033[1m[stoker]\033[0m {msg}", file=sys.stderr, flush=True)


def parse_job_args(args: Sequence[str]) -> tuple[str | None, dict[str, str]]:
    """``[DATASET] [--key value ...]`` -> (dataset or None, {key: value}); later keys win.

    Raises:
        UsageError: an option without a value, or a word that is not ``--key``.
    """
    rest = list(args)
    dataset = rest.pop(0) if rest and not rest[0].startswith("--") else None
    if len(rest) % 2:
        raise UsageError(f"options are --key value pairs: '{printable(rest[-1])}' has no value")
    options: dict[str, str] = {}
    for key, value in zip(rest[::2], rest[1::2], strict=True):
        if not key.startswith("--") or len(key) < 3:
            raise UsageError(
                f"options are --key value pairs: expected --key, got '{printable(key)}'"
            )
        options[key[2:]] = value
    return dataset, options


def demo_defaults(with_trainer: bool, pid: int) -> dict[str, str]:
    """The demo's job options, before the command line's."""
    defaults = {
        "stoker.job-name": f"stoker-demo-{pid}" if with_trainer else "stoker-demo",
        "stoker.output.root": "/dev/shm/stoker",
        "rest.port": os.environ.get("STOKER_REST_PORT", "8081"),
        "stoker.dp-world-size": "2",
        "stoker.micro-batch-size": "4",
        # the web UI (and the trainer's status line) refresh metrics every second
        "metrics.fetcher.update-interval": "1000",
    }
    if not with_trainer:
        defaults["stoker.prefetch-depth"] = "0"  # no trainer acknowledges: write every batch
    return defaults


def sample_dataset(repo: Path, state: Path) -> Path:
    """The sample dataset in ``state/sample-dataset``, generated the first time."""
    out = state / "sample-dataset"
    if not (out / ".complete").is_file():
        log(f"generating the sample dataset in {printable(out)}")
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run(
            [sys.executable, str(repo / "scripts" / "make_sample_dataset.py"), str(out)],
            stdout=subprocess.DEVNULL,
            check=True,
        )
        (out / ".complete").touch()
    return out


def _tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a log (UTF-8), each escaped with :func:`printable` (the job logs
    record text: its ``Dead letter: ...`` lines); a carriage return is escaped too."""
    try:
        text = path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return f"({printable(path)} unreadable)"
    return printable("\n".join(text.rstrip("\n").split("\n")[-lines:]), keep_newlines=True)


class LocalS3:
    """The testkit's LocalS3Server as a child process, the dataset uploaded before it answers."""

    def __init__(
        self, repo: Path, dataset: Path, state: Path, port: int, timeout_s: float = 300
    ) -> None:
        testkit = repo / "testkit" / "target"
        jar, cp_file = testkit / "stoker-testkit.jar", testkit / "runtime-classpath.txt"
        if not jar.is_file() or not cp_file.is_file():
            raise DemoError(
                f"{printable(jar)} or {printable(cp_file)} is missing: build with mvn package"
            )
        basedir = state / "s3"
        shutil.rmtree(basedir, ignore_errors=True)
        self.log_file = state / "logs" / "s3proxy.log"
        self.err_file = state / "logs" / "s3proxy.err"
        self.target = f"s3://{BUCKET}/{S3_PREFIX}"
        log(
            f"starting a local S3 server (S3Proxy) on 127.0.0.1:{port} and uploading "
            f"{printable(dataset)} to {self.target}  (log: {printable(self.log_file)})"
        )
        with self.err_file.open("w") as err:
            self.proc = subprocess.Popen(
                [
                    "java",
                    f"-Dlog.file={self.log_file}",
                    f"-Dlog4j.configurationFile=file:{repo / 'flink-conf' / 'log4j-s3proxy.properties'}",
                    "-cp",
                    f"{jar}:{cp_file.read_text().strip()}",
                    "dev.stoker.testkit.LocalS3Server",
                    "--port",
                    str(port),
                    "--basedir",
                    str(basedir),
                    "--upload",
                    str(dataset),
                    self.target,
                    "--exit-on-stdin-eof",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self.endpoint = self._await_endpoint(timeout_s)

    def _await_endpoint(self, timeout_s: float) -> str:
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                lines.put(line.rstrip("\n"))
            lines.put(None)

        threading.Thread(target=pump, name="s3-server-output", daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.stop()
                raise DemoError(
                    f"the local S3 server did not answer within {timeout_s:.0f} s; "
                    f"see {printable(self.log_file)}"
                ) from None
            if line is None:
                self.proc.wait()
                raise DemoError(
                    f"the local S3 server exited ({self.proc.returncode}) before serving:\n"
                    f"{_tail(self.err_file)}\n(log: {printable(self.log_file)})"
                )
            if line.startswith("endpoint="):
                return line.removeprefix("endpoint=")

    def stop(self) -> None:
        if self.proc.poll() is None:
            if self.proc.stdin is not None:
                self.proc.stdin.close()  # it exits when its standard input closes
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def accounting_line(job_log: Path) -> str:
    """The job's ``Run finished: ...`` accounting line from its log (escaped with
    :func:`printable`).

    Raises:
        DemoError: the log has none (the job did not check its accounting).
    """
    try:
        text = job_log.read_text(errors="replace")
    except OSError as e:
        raise DemoError(f"cannot read the job's log: {printable(e)}") from e
    for line in text.split("\n"):
        at = line.find(ACCOUNTING_MARK)
        if at >= 0:
            return printable(line[at:].rstrip("\r"))
    raise DemoError(
        f"the job's log {printable(job_log)} has no accounting line ({ACCOUNTING_MARK!r}...)"
    )


def print_results(job_log: Path, job_dir: Path) -> None:
    """What the demo prints on standard output once the trainer got every batch: the job's
    accounting line (from ``job_log``) and the job's dead letters (under ``job_dir``, with
    :func:`stoker.dead_letters.main`). Text from the job is escaped (:func:`printable`), and
    standard output escapes what its encoding cannot encode (:func:`escape_unencodable_stdout`),
    so no record makes it fail or takes over the terminal.

    Raises:
        DemoError: the log has no accounting line.
    """
    escape_unencodable_stdout()
    print(f"[job] {accounting_line(job_log)}", flush=True)
    print_dead_letters([str(job_dir / "dead-letters")])


def job_command(
    repo: Path, tokenizer: Path, dataset: str | None, options: dict[str, str], job_log: Path
) -> list[str]:
    """The embedded job's command line (:func:`stoker_tools.job.embedded_command`, the build of
    ``repo``, :data:`~stoker_tools.job.EMBEDDED_JVM_OPTS`, logging to ``job_log``) over ``dataset``
    (``stoker.dataset.path``; ``None`` when ``options`` name a ``stoker.mixture.path`` instead),
    its REST API on 127.0.0.1.

    Raises:
        DemoError: the job jar or its classpath file is missing.
    """
    merged = {
        **({"stoker.dataset.path": dataset} if dataset is not None else {}),
        "stoker.tokenizer.path": str(tokenizer),
        "rest.address": "127.0.0.1",
        "rest.bind-address": "127.0.0.1",
        **options,
    }
    try:
        return embedded_command(
            merged,
            build=JobBuild.from_env(repo),
            jvm_opts=EMBEDDED_JVM_OPTS,
            log_file=job_log,
        )
    except JobBuildMissing as e:
        raise DemoError(printable(str(e))) from None


def _supervise(
    job: subprocess.Popen[bytes], trainer: subprocess.Popen[bytes], job_log: Path
) -> int:
    """Wait for the trainer; fail at once if the job fails first. The trainer's exit code."""
    while trainer.poll() is None:
        rc = job.poll()
        if rc is not None and rc != 0:
            _stop(trainer)
            raise DemoError(
                f"the job failed (exit {rc}); last lines of {printable(job_log)}:\n{_tail(job_log)}"
            )
        time.sleep(0.2)
    if trainer.returncode != 0:
        return trainer.returncode
    try:  # every batch was acknowledged: the job ends by itself
        rc = job.wait(timeout=120)
    except subprocess.TimeoutExpired:
        raise DemoError(
            f"the job did not end within 120 s of the trainer's last batch; see {printable(job_log)}"
        ) from None
    if rc != 0:
        raise DemoError(
            f"the job failed (exit {rc}); last lines of {printable(job_log)}:\n{_tail(job_log)}"
        )
    return 0


def run(repo: Path, state: Path, tokenizer: Path, args: Sequence[str]) -> int:
    with_trainer = os.environ.get("STOKER_DEMO_TRAINER", "1") != "0"
    dataset, given = parse_job_args(args)
    options = {**demo_defaults(with_trainer, os.getpid()), **given}
    job_name, port = options["stoker.job-name"], options["rest.port"]
    job_dir = Path(options["stoker.output.root"]) / job_name
    (state / "logs").mkdir(parents=True, exist_ok=True)
    job_log = state / "logs" / f"{job_name}.log"
    if dataset is None:
        dataset = str(sample_dataset(repo, state))
    elif not dataset.startswith("s3://"):
        if not Path(dataset).is_dir():
            raise UsageError(f"dataset directory '{printable(dataset)}' not found")
        dataset = str(Path(dataset).resolve())
    shutil.rmtree(job_dir, ignore_errors=True)

    s3: LocalS3 | None = None
    job: subprocess.Popen[bytes] | None = None
    trainer: subprocess.Popen[bytes] | None = None
    env = dict(os.environ, FLINK_PLUGINS_DIR=str(repo / "job" / "target" / "plugins"))
    try:
        if not dataset.startswith("s3://") and os.environ.get("STOKER_DEMO_S3", "1") != "0":
            s3 = LocalS3(repo, Path(dataset), state, int(os.environ.get("STOKER_S3_PORT", "9000")))
            dataset = s3.target
            # credentials through the standard AWS chain, for the S3 plugin and the image fetch
            env.update(S3_CREDENTIALS)
            options = {
                "s3.endpoint": s3.endpoint,
                "s3.path.style.access": "true",
                "execution.checkpointing.dir": f"s3://{BUCKET}/checkpoints/{job_name}",
                **options,
            }
        log(f"dataset: {printable(dataset)}")
        log(
            f"starting the job on embedded Flink; web UI: http://127.0.0.1:{printable(port)}  (log: {printable(job_log)})"
        )
        job = subprocess.Popen(job_command(repo, tokenizer, dataset, options, job_log), env=env)
        if with_trainer:
            trainer = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "stoker_tools.simulate",
                    "--root",
                    str(job_dir),
                    "--step-time-ms",
                    str(STEP_TIME_MS),
                    "--flink-rest",
                    f"http://127.0.0.1:{port}",
                    "--timeout-s",
                    "600",
                ]
            )
            rc = _supervise(job, trainer, job_log)
        else:
            rc = job.wait()
            if rc != 0:
                raise DemoError(
                    f"the job failed (exit {rc}); last lines of {printable(job_log)}:\n{_tail(job_log)}"
                )
        if rc != 0:
            log(
                f"the trainer did not get every batch (exit {rc}); the job's log: {printable(job_log)}"
            )
            return 1
        print_results(job_log, job_dir)
        if with_trainer:
            world_size = int(options["stoker.dp-world-size"])
            micro_batch_size = int(options["stoker.micro-batch-size"])
            log(meaning(world_size, micro_batch_size, STEP_TIME_MS, os.cpu_count() or 1))
        else:
            log(
                f"every batch is in {printable(job_dir)} (no trainer consumed them); look at them with "
                "notebooks/batch-viewer.ipynb"
            )
        return 0
    finally:
        _stop(trainer)
        _stop(job)
        if s3 is not None:
            s3.stop()
        if with_trainer and job_name == f"stoker-demo-{os.getpid()}":
            shutil.rmtree(job_dir, ignore_errors=True)


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # runs run()'s clean-up


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stoker_tools.demo", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--tokenizer", required=True, type=Path, help="Qwen tokenizer directory")
    parser.add_argument(
        "--repo",
        type=Path,
        default=Path(__file__).resolve().parents[2],
        help="the Stoker checkout (default: the one this module is in)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="logs, the sample dataset and the S3 server's data (default: REPO/.stoker)",
    )
    parser.add_argument("job_args", nargs=argparse.REMAINDER, help="-- [DATASET] [--key value ...]")
    args = parser.parse_args(argv)
    job_args = args.job_args[1:] if args.job_args[:1] == ["--"] else args.job_args
    state = args.state_dir or args.repo / ".stoker"
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return run(args.repo.resolve(), state.resolve(), args.tokenizer.resolve(), job_args)
    except DemoError as e:
        log(f"error: {e}")
        return 2 if isinstance(e, UsageError) else 1


if __name__ == "__main__":
    sys.exit(main())
