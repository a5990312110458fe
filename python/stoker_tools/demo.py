"""``./stoker demo`` once its set-up is done: a naive serial loader and then Stoker (the job on
embedded Flink) feed the same simulated trainer of two DP ranks from a local S3 server, and one
table shows how much of its time the trainer is busy with each.

    python -m stoker_tools.demo --tokenizer DIR [--repo DIR] [--state-dir DIR] [--records N] \\
        [--step-time-ms MS] -- [DATASET_DIR | s3://bucket/prefix] [--key value ...]

``./stoker`` does the set-up (the Maven build, the venv, the tokenizer) and then runs this. Steps:

1. The dataset: the one given, else the sample dataset in ``STATE/sample-dataset``: ``--records``
   records (default :data:`SAMPLE_RECORDS`, enough for the trainer to reach its steady state)
   drawing :data:`SAMPLE_DISTINCT_IMAGES` distinct images, generated with
   ``scripts/make_sample_dataset.py`` (a few seconds) and reused while ``--records`` is the same.
2. A local dataset is served by a local S3 server (``dev.stoker.testkit.LocalS3Server``, S3Proxy,
   from ``testkit/target``) on ``127.0.0.1:$STOKER_S3_PORT`` (default 9000; 0 = a free port),
   uploaded to ``s3://stoker-demo/sample``, which adds :data:`S3_LATENCY_MS` (+- 20) ms to the
   first byte of every GET, as real S3 takes (``STOKER_DEMO_S3_LATENCY_MS``; 0: none). Its endpoint
   is read from that process's own output, after the upload (never from a file an earlier run may
   have left). ``STOKER_DEMO_S3=0``: the loaders read the local folder.
3. The naive serial loader (:mod:`stoker_tools.naive_loader`): one process per DP rank loads its
   own samples one at a time (S3 GET, decode, resize, normalise, patchify, tokenize, collate)
   and then "trains" for the step time; the job's world size, micro-batch size, preset and pixel
   bounds. Not run with ``STOKER_DEMO_NAIVE=0``, nor when the dataset is an ``s3://`` URI given on
   the command line or the options name a ``stoker.mixture.path`` or ``stoker.image.root`` (it
   reads one local dataset).
4. The job (:func:`stoker_tools.job.embedded_command`: ``$STOKER_JAR``, ``$STOKER_CLASSPATH_FILE``,
   the JVM flags of ``flink-conf/jvm-opens.args``) with the demo's defaults below; an option given as
   ``--key value`` wins over a default. Its log: ``STATE/logs/<job>.log``.
5. The simulated trainer (``stoker_tools.simulate``), then the job's accounting line, the dead
   letters (:func:`print_results`), the table of both loaders (:func:`comparison`) and a paragraph
   on what its figures mean (:func:`meaning`). ``STOKER_DEMO_TRAINER=0``: no trainer (and no naive
   loader), no prefetch gate; every batch stays in ``<output root>/stoker-demo`` for
   ``notebooks/batch-viewer.ipynb``.

The simulated step (``--step-time-ms``, default :data:`STEP_TIME_MS`: 1 s) is about what a real
vision-language step takes: a 7B Qwen2-VL trained on one H100-class GPU with 4 samples of about
1,000 tokens each (mostly image tokens) computes about 6 x 7e9 x 4,000 = 1.7e14 FLOPs in the
language model's forward and backward pass, 0.4 s at 40% of 1e15 FLOP/s, plus the vision encoder
and the optimizer step: 0.5-1 s. It is also what a 2-core machine's Stoker can keep fed: the two
ranks then want 8 samples/s, and the job made 10-20 samples/s of the sample dataset on the
2-core dev box, depending on what else ran there. With a much shorter step (a small model) both
loaders would be held back by these 2 cores, where a GPU node has dozens.

Every process it starts is stopped when it ends, also on failure or Ctrl-C (the S3 server also
ends by itself when this process dies: it exits when its standard input closes).

Exit code 0 when the trainer received every batch and the job's accounting line was found (the
naive loader's own failures are reported in the table, not in the exit code); 1 when the job, the
trainer or the S3 server failed; 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
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
from typing import Any

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
#: The simulated trainer's step (ms) for both loaders, about a 7B Qwen-VL step on one GPU (see the
#: module docstring).
STEP_TIME_MS = 1000
#: Time to first byte the local S3 server adds to each GET (ms; +- 20 ms, uniform): real S3's
#: median for small objects is "in the range of tens of milliseconds" (AWS, "Best Practices Design
#: Patterns: Optimizing Amazon S3 Performance"), and the benchmarks take 50 too
#: (docs/benchmarks.md). A serial loader waits for each GET in turn; Stoker keeps many in flight.
S3_LATENCY_MS = 50
#: Records of the generated sample dataset: 32 steps of 2 ranks x 4 samples, enough for a steady
#: state after Stoker's start-up (the JVM, Flink, the first images: about 10 s).
SAMPLE_RECORDS = 256
#: Distinct images drawn for it (``make_sample_dataset.py --distinct-images``: each of its 14 sizes
#: in each of its 5 formats once); later records reuse them, so it is generated in seconds.
SAMPLE_DISTINCT_IMAGES = 70
#: What the job logs (dev.stoker.job.StokerJob) when a run from step 0 ends with its accounting
#: checked: "Run finished: records in steps 0..N=R, read=R, samples emitted=E, dead letters=D".
ACCOUNTING_MARK = "Run finished: "


def meaning(world_size: int, micro_batch_size: int, step_time_ms: float, cpus: int) -> str:
    """A paragraph on what the table's figures mean, with this run's numbers."""
    wanted = (
        f"at most {world_size * micro_batch_size * 1000 / step_time_ms:.0f} samples/s, the "
        "ceiling of both samples/s figures"
        if step_time_ms > 0
        else "every sample at once"
    )
    return (
        "The busy share is 1 - the wait-time ratio: the share of the trainer's time spent on its "
        "step rather than waiting for its next batch, what a GPU's utilization is in the real "
        "run. 'steady' is after each rank's first batch (steady_wait_time_ratio), what a long "
        "run sees; 'whole run' also counts the start-up once (first batch s: for Stoker the "
        f"JVM, Flink and the first images). The simulated step takes {step_time_ms:g} ms"
        + (
            f", about a 7B Qwen-VL step on one GPU with {micro_batch_size} samples of ~1,000 tokens"
            if step_time_ms == STEP_TIME_MS
            else ""
        )
        + f", so the {world_size} ranks want {wanted}. The naive loop cannot step while it "
        "loads, so it waits for the load of every batch, however many cores the machine has; "
        f"Stoker loads on all of this machine's {cpus} CPU cores ahead of the trainer, so its "
        "trainer waits only while the job makes fewer samples than that."
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


def sample_dataset(repo: Path, state: Path, records: int = SAMPLE_RECORDS) -> Path:
    """The sample dataset in ``state/sample-dataset``: ``records`` records drawing
    :data:`SAMPLE_DISTINCT_IMAGES` images, generated unless the one there was made with the same
    arguments (its ``.complete`` file names them)."""
    out = state / "sample-dataset"
    args = ["--records", str(records), "--distinct-images", str(SAMPLE_DISTINCT_IMAGES)]
    done = out / ".complete"
    if not done.is_file() or done.read_text() != " ".join(args) + "\n":
        log(f"generating the sample dataset ({records} records) in {printable(out)}")
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run(
            [sys.executable, str(repo / "scripts" / "make_sample_dataset.py"), str(out), *args],
            stdout=subprocess.DEVNULL,
            check=True,
        )
        done.write_text(" ".join(args) + "\n")
    return out


def naive_command(
    dataset: str,
    s3_endpoint: str | None,
    tokenizer: Path,
    options: dict[str, str],
    step_time_ms: float,
    summary: Path,
) -> list[str]:
    """The naive serial loader's command line (:mod:`stoker_tools.naive_loader`) over
    ``dataset`` (``s3://`` at ``s3_endpoint``, or a local folder) with the job's ``options``: its
    DP world size, micro-batch size, shuffle seed, JSONL glob, preset, pixel bounds and default
    system prompt; its totals go to ``summary`` (JSON)."""
    cmd = [
        sys.executable,
        "-m",
        "stoker_tools.naive_loader",
        "--dataset",
        dataset,
        "--tokenizer",
        str(tokenizer),
        "--world-size",
        options["stoker.dp-world-size"],
        "--micro-batch-size",
        options["stoker.micro-batch-size"],
        "--step-time-ms",
        f"{step_time_ms:g}",
        "--seed",
        options.get("stoker.shuffle.seed", "0"),
        "--glob",
        options.get("stoker.dataset.glob", "*.jsonl"),
        "--summary-json",
        str(summary),
    ]
    if s3_endpoint is not None:
        cmd += ["--s3-endpoint", s3_endpoint]
    for key, flag in (
        ("stoker.model.preset", "--preset"),
        ("stoker.image.min-pixels", "--min-pixels"),
        ("stoker.image.max-pixels", "--max-pixels"),
        ("stoker.template.default-system-prompt", "--system-prompt"),
    ):
        if key in options:
            cmd += [flag, options[key]]
    return cmd


def _step_note(step_time_ms: float) -> str:
    """`` (about a 7B Qwen-VL step on one GPU)`` for the demo's default step, else nothing."""
    return " (about a 7B Qwen-VL step on one GPU)" if step_time_ms == STEP_TIME_MS else ""


def _percent(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{100 * ratio:.1f}%"


def _busy(ratio: float | None) -> float | None:
    return None if ratio is None else 1.0 - ratio


def comparison(
    naive: dict[str, Any] | str | None,
    stoker: dict[str, Any],
    *,
    world_size: int,
    micro_batch_size: int,
    step_time_ms: float,
    prefetch_depth: str,
    cpus: int,
    s3_latency_ms: int | None,
) -> str:
    """The demo's closing table: for each loader its samples, wall time (s), samples/s, time to
    the first batch (s), the trainer's steady waiting share and its busy share (1 - wait-time
    ratio) steady and over the whole run, then the headline.

    Args:
        naive: the naive loader's totals (:func:`stoker_tools.simulate.summarize`, plus
            ``dropped``), or why it has none (a sentence: it failed, or was not run), or ``None``.
        stoker: the simulated trainer's totals over Stoker's batches.
        world_size, micro_batch_size, step_time_ms, prefetch_depth, cpus: what the run was
            (prefetch depth as the job's option reads).
        s3_latency_ms: the time to first byte the local S3 server added to each GET (ms), or
            ``None``: the images came from the local dataset folder (no S3).
    """
    if s3_latency_ms is None:
        source = "the local dataset folder (no S3)"
    elif s3_latency_ms > 0:
        source = f"the local S3 server, {s3_latency_ms} ms to each GET's first byte as in S3"
    else:
        source = "the local S3 server (no added latency)"
    lines = [
        f"Trainer busy share (1 - wait-time ratio): {world_size} DP ranks x {micro_batch_size} "
        f"samples a step, a simulated step of {step_time_ms:g} ms{_step_note(step_time_ms)};",
        f"{'both loaders' if isinstance(naive, dict) else 'the job'} on this machine's {cpus} "
        f"CPU cores, images from {source}.",
        "",
    ]
    header = (
        "loader",
        "samples",
        "wall s",
        "samples/s",
        "first batch s",
        "waiting (steady)",
        "busy (steady)",
        "busy (whole run)",
    )
    rows: list[tuple[str, ...]] = [header]
    notes: list[str] = []

    def row(name: str, t: dict[str, Any]) -> tuple[str, ...]:
        first = t.get("first_batch_s")
        return (
            name,
            str(t["samples"]),
            f"{t['elapsed_s']:.1f}",
            f"{t['samples_per_s']:.1f}",
            "n/a" if first is None else f"{first:.1f}",
            _percent(t["steady_wait_time_ratio"]),
            _percent(_busy(t["steady_wait_time_ratio"])),
            _percent(_busy(t["wait_time_ratio"])),
        )

    naive_name = "naive serial loop, in each rank"
    if isinstance(naive, dict):
        rows.append(row(naive_name, naive))
        if naive.get("dropped"):
            notes.append(f"the naive loop left out {naive['dropped']} sample(s) it could not load")
    elif isinstance(naive, str):
        notes.append(f"naive serial loop: no figures ({naive})")
    rows.append(row(f"Stoker, up to {prefetch_depth} batches ahead", stoker))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    lines.append("")
    stoker_busy = _percent(_busy(stoker["steady_wait_time_ratio"]))
    if isinstance(naive, dict):
        lines.append(
            "Steady state: the trainer is busy "
            f"{_percent(_busy(naive['steady_wait_time_ratio']))} of the time with the naive "
            f"loop and {stoker_busy} with Stoker."
        )
    else:
        lines.append(f"Steady state: the trainer is busy {stoker_busy} of the time with Stoker.")
    if s3_latency_ms is not None and s3_latency_ms > 0:
        notes.append(
            f"each image GET takes {s3_latency_ms} ms before its first byte: a serial loop "
            "waits for every one in turn, Stoker keeps many in flight"
        )
    lines += [f"({n})" for n in notes]
    return "\n".join(lines)


def _tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a log (UTF-8), each escaped with :func:`printable` (the job logs
    record text: its ``Dead letter: ...`` lines); a carriage return is escaped too."""
    try:
        text = path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return f"({printable(path)} unreadable)"
    return printable("\n".join(text.rstrip("\n").split("\n")[-lines:]), keep_newlines=True)


class LocalS3:
    """The testkit's LocalS3Server as a child process, the dataset uploaded before it answers.

    ``get_latency_ms`` > 0 adds ``get_latency_ms`` +- ``min(20, get_latency_ms)`` ms (uniform) to
    the first byte of every GET, as real S3 takes (``--get-latency-ms``, ``--get-jitter-ms``).
    """

    def __init__(
        self,
        repo: Path,
        dataset: Path,
        state: Path,
        port: int,
        timeout_s: float = 300,
        get_latency_ms: int = 0,
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
        latency = (
            [
                "--get-latency-ms",
                str(get_latency_ms),
                "--get-jitter-ms",
                str(min(20, get_latency_ms)),
            ]
            if get_latency_ms > 0
            else []
        )
        log(
            f"starting a local S3 server (S3Proxy) on 127.0.0.1:{port} and uploading "
            f"{printable(dataset)} to {self.target}"
            + (f", {get_latency_ms} ms to each GET's first byte" if latency else "")
            + f"  (log: {printable(self.log_file)})"
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
                    *latency,
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


def _naive_skipped(dataset: str | None, options: dict[str, str]) -> str | None:
    """Why the naive loader does not run on this demo's input, or ``None`` when it does."""
    if os.environ.get("STOKER_DEMO_NAIVE", "1") == "0":
        return "STOKER_DEMO_NAIVE=0"
    if dataset is not None and dataset.startswith("s3://"):
        return "it reads only a local dataset, served by the demo's S3 server"
    for key in ("stoker.mixture.path", "stoker.image.root"):
        if key in options:
            return f"it reads one dataset with its images, not {key}"
    return None


def _read_summary(path: Path) -> dict[str, Any] | None:
    """A loader's totals (``--summary-json``), or ``None`` when it wrote none."""
    try:
        summary: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return summary


def run(
    repo: Path,
    state: Path,
    tokenizer: Path,
    args: Sequence[str],
    *,
    records: int = SAMPLE_RECORDS,
    step_time_ms: float = STEP_TIME_MS,
) -> int:
    with_trainer = os.environ.get("STOKER_DEMO_TRAINER", "1") != "0"
    try:
        s3_latency_ms = int(os.environ.get("STOKER_DEMO_S3_LATENCY_MS", str(S3_LATENCY_MS)))
    except ValueError:
        raise UsageError("STOKER_DEMO_S3_LATENCY_MS must be an integer (ms)") from None
    dataset, given = parse_job_args(args)
    options = {**demo_defaults(with_trainer, os.getpid()), **given}
    job_name, port = options["stoker.job-name"], options["rest.port"]
    job_dir = Path(options["stoker.output.root"]) / job_name
    (state / "logs").mkdir(parents=True, exist_ok=True)
    job_log = state / "logs" / f"{job_name}.log"
    naive_skipped = _naive_skipped(dataset, options) if with_trainer else "no trainer"
    if dataset is None:
        dataset = str(sample_dataset(repo, state, records))
    elif not dataset.startswith("s3://"):
        if not Path(dataset).is_dir():
            raise UsageError(f"dataset directory '{printable(dataset)}' not found")
        dataset = str(Path(dataset).resolve())
    shutil.rmtree(job_dir, ignore_errors=True)
    naive_summary = state / "logs" / f"{job_name}.naive.json"
    trainer_summary = state / "logs" / f"{job_name}.trainer.json"
    for stale in (naive_summary, trainer_summary):
        stale.unlink(missing_ok=True)

    s3: LocalS3 | None = None
    naive: subprocess.Popen[bytes] | None = None
    job: subprocess.Popen[bytes] | None = None
    trainer: subprocess.Popen[bytes] | None = None
    env = dict(os.environ, FLINK_PLUGINS_DIR=str(repo / "job" / "target" / "plugins"))
    naive_result: dict[str, Any] | str | None = None
    try:
        if not dataset.startswith("s3://") and os.environ.get("STOKER_DEMO_S3", "1") != "0":
            s3 = LocalS3(
                repo,
                Path(dataset),
                state,
                int(os.environ.get("STOKER_S3_PORT", "9000")),
                get_latency_ms=s3_latency_ms,
            )
            dataset = s3.target
            # credentials through the standard AWS chain, for the S3 plugin, the image fetch and
            # the naive loader
            env.update(S3_CREDENTIALS)
            options = {
                "s3.endpoint": s3.endpoint,
                "s3.path.style.access": "true",
                "execution.checkpointing.dir": f"s3://{BUCKET}/checkpoints/{job_name}",
                **options,
            }
        log(f"dataset: {printable(dataset)}")
        if naive_skipped is None:
            log(
                "first the naive serial loader: each DP rank's own process loads its samples one "
                f"at a time, then trains for {step_time_ms:g} ms (stoker_tools.naive_loader)"
            )
            naive = subprocess.Popen(
                naive_command(
                    dataset,
                    None if s3 is None else s3.endpoint,
                    tokenizer,
                    options,
                    step_time_ms,
                    naive_summary,
                ),
                env=env,
            )
            rc = naive.wait()
            naive_result = _read_summary(naive_summary) or f"it failed, exit {rc}"
            log("now Stoker: the same trainer, fed by the job")
        elif with_trainer:
            log(f"no naive serial loader this time: {printable(naive_skipped)}")
            naive_result = f"not run: {naive_skipped}"
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
                    f"{step_time_ms:g}",
                    "--flink-rest",
                    f"http://127.0.0.1:{port}",
                    "--timeout-s",
                    "600",
                    "--summary-json",
                    str(trainer_summary),
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
            stoker_result = _read_summary(trainer_summary)
            if stoker_result is None:
                raise DemoError(f"the simulated trainer wrote no {printable(trainer_summary)}")
            world_size = int(options["stoker.dp-world-size"])
            micro_batch_size = int(options["stoker.micro-batch-size"])
            cpus = os.cpu_count() or 1
            print(
                "\n"
                + comparison(
                    naive_result,
                    stoker_result,
                    world_size=world_size,
                    micro_batch_size=micro_batch_size,
                    step_time_ms=step_time_ms,
                    prefetch_depth=options.get("stoker.prefetch-depth", "8"),
                    cpus=cpus,
                    s3_latency_ms=None if s3 is None else s3_latency_ms,
                ),
                flush=True,
            )
            log(meaning(world_size, micro_batch_size, step_time_ms, cpus))
        else:
            log(
                f"every batch is in {printable(job_dir)} (no trainer consumed them); look at them with "
                "notebooks/batch-viewer.ipynb"
            )
        return 0
    finally:
        _stop(naive)
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
    parser.add_argument(
        "--records",
        type=int,
        default=SAMPLE_RECORDS,
        help=f"records of the generated sample dataset (default {SAMPLE_RECORDS})",
    )
    parser.add_argument(
        "--step-time-ms",
        type=float,
        default=STEP_TIME_MS,
        help=f"the simulated trainer's step, both loaders (default {STEP_TIME_MS} ms)",
    )
    parser.add_argument("job_args", nargs=argparse.REMAINDER, help="-- [DATASET] [--key value ...]")
    args = parser.parse_args(argv)
    if args.records < 2 or args.step_time_ms < 0:
        parser.error("--records must be >= 2 and --step-time-ms >= 0")
    job_args = args.job_args[1:] if args.job_args[:1] == ["--"] else args.job_args
    state = args.state_dir or args.repo / ".stoker"
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return run(
            args.repo.resolve(),
            state.resolve(),
            args.tokenizer.resolve(),
            job_args,
            records=args.records,
            step_time_ms=args.step_time_ms,
        )
    except DemoError as e:
        log(f"error: {e}")
        return 2 if isinstance(e, UsageError) else 1


if __name__ == "__main__":
    sys.exit(main())
