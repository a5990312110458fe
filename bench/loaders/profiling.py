"""async-profiler in the loaders harness (bench/README.md, "Where the embedded job's CPU goes").

Used by the stoker contender (``stoker_contender.py``) when its config has ``extra.profile``: the
profiler is loaded into the running job's JVM through the HotSpot attach mechanism (``jcmd
JVMTI.agent_load``; no JVM flag) at
given fractions of the samples the trainer has consumed, so that a profile covers the steady
state only, not the JVM's start and JIT warm-up. Each phase (``event`` cpu, itimer, ctimer or
wall) writes ``<out_dir>/<name>.collapsed`` (collapsed stacks, one root frame per thread) and
``<name>.html`` (a flame graph); ``<out_dir>/profile-run.json`` records each phase's window: wall
time, samples consumed, the JVM's CPU time, the machine's CPU (``/proc/stat``), the load average,
each JVM thread's CPU time and run-queue delay (``/proc/<pid>/task/<tid>/stat`` and ``schedstat``)
at both ends, and Flink's task metrics polled through REST meanwhile.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")
#: Flink metrics polled per job vertex during each phase (REST, the aggregated subtask metrics): the
#: task time split, and the job's own gauges whose names end so (bench/README.md lists them).
TASK_TIME = ("busyTimeMsPerSecond", "idleTimeMsPerSecond", "backPressuredTimeMsPerSecond")
GAUGE_SUFFIXES = (
    "requestsInFlight",
    "getsWaitingForConnection",
    "pendingRecords",
    "prefetchAllowedStep",
    "ackedStep",
    "batchesAhead",
    "outPoolUsage",
    "inPoolUsage",
    "numRecordsInPerSecond",
)


def hotspot_attach(pid: int, agent: str, options: str, timeout_s: float = 60.0) -> str:
    """Loads the native agent ``agent`` with ``options`` into JVM ``pid`` with the JDK's ``jcmd
    <pid> JVMTI.agent_load`` (HotSpot's attach mechanism, as async-profiler's own ``asprof``
    uses; a short-lived ``jcmd`` JVM, about 0.2 CPU-seconds per call) and returns its output.

    Raises:
        RuntimeError: ``jcmd`` failed or the agent returned an error.
    """
    done = subprocess.run(
        # quoted: jcmd would read the options' "key=value" as its own named arguments
        ["jcmd", str(pid), "JVMTI.agent_load", agent, f'"{options}"'],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    answer = done.stdout + done.stderr
    if done.returncode != 0 or ("return code:" in answer and "return code: 0" not in answer):
        raise RuntimeError(f"JVM {pid}: loading {agent} with {options!r} failed: {answer!r}")
    return answer


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def threads(pid: int) -> dict[str, list[Any]]:
    """The threads of ``pid`` now, by thread id: ``[name, CPU seconds, seconds on a CPU, seconds
    runnable but waiting for a CPU, system CPU seconds]`` so far; the name is the kernel's ``comm``
    (the first 15 characters of the Java thread name), CPU seconds from ``stat`` (user + system,
    and system alone), the other two from ``schedstat`` (the scheduler's run time and run-queue
    delay)."""
    out: dict[str, list[Any]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            sched = (task / "schedstat").read_text().split()
        except OSError:
            continue  # the thread ended
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
        out[task.name] = [
            name,
            cpu,
            int(sched[0]) / 1e9,
            int(sched[1]) / 1e9,
            int(fields[12]) / CLK_TCK,
        ]
    return out


def machine_cpu() -> dict[str, float]:
    """The machine's CPU seconds so far from ``/proc/stat``: ``busy`` (all but idle and iowait)
    and ``total``, summed over the cores."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return {"busy": (sum(values) - idle) / CLK_TCK, "total": sum(values) / CLK_TCK}


def snapshot(pid: int, samples: int) -> dict[str, Any]:
    """Where the JVM and the machine stand now (a phase's start or end)."""
    return {
        "unix": time.time(),
        "samples": samples,
        "jvm_cpu_s": process_cpu_s(pid),
        "threads": threads(pid),
        "machine": machine_cpu(),
        "loadavg": list(os.getloadavg()),
    }


class FlinkMetrics:
    """Polls the embedded job's REST API every ``interval_s`` while ``label`` is set: per job
    vertex, the aggregated subtask values (min, avg, max, sum) of :data:`TASK_TIME` and of the
    metrics ending in one of :data:`GAUGE_SUFFIXES`. Failures (the job not up yet, gone) are
    skipped."""

    def __init__(self, port: int, interval_s: float = 5.0) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.interval_s = interval_s
        self.label: str | None = None
        self.polls: list[dict[str, Any]] = []
        self._names: dict[str, list[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flink-metrics", daemon=True)
        self._thread.start()

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(self.base + path, timeout=5) as r:
            return json.load(r)

    def _poll(self, label: str) -> None:
        jobs = [j for j in self._get("/jobs")["jobs"] if j["status"] == "RUNNING"]
        if not jobs:
            return
        jid = jobs[0]["id"]
        vertices = {}
        for v in self._get(f"/jobs/{jid}")["vertices"]:
            base = f"/jobs/{jid}/vertices/{v['id']}/subtasks/metrics"
            if v["id"] not in self._names:
                names = [m["id"] for m in self._get(base)]
                self._names[v["id"]] = [
                    n for n in names if n in TASK_TIME or n.endswith(GAUGE_SUFFIXES)
                ]
            wanted = self._names[v["id"]]
            if wanted:
                got = self._get(base + "?get=" + ",".join(wanted))
                vertices[v["name"]] = {
                    "parallelism": v["parallelism"],
                    "metrics": {
                        m["id"]: {k: m.get(k) for k in ("min", "avg", "max", "sum")} for m in got
                    },
                }
        self.polls.append({"phase": label, "unix": time.time(), "vertices": vertices})

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            label = self.label
            if label is None:
                continue
            try:
                self._poll(label)
            except (OSError, ValueError, KeyError):
                pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class ProfiledRun:
    """Runs the profile phases of ``spec`` on JVM ``pid`` as the trainer consumes samples.

    ``spec``: ``agent`` (libasyncProfiler.so), ``out_dir``, ``rest_port`` (Flink REST, for
    :class:`FlinkMetrics`; optional) and ``phases``, each ``{"name", "event", "interval", "from",
    "to", "flink_metrics"}``: the phase starts once ``from`` x ``total`` samples are consumed and
    stops (its files written) once ``to`` x ``total`` are; Flink's metrics are polled during it if
    ``flink_metrics`` (the polls cost the JVM CPU in its REST server, so not in a CPU profile).
    Phases must not overlap (one profiler session at a time).
    """

    def __init__(self, pid: int, spec: dict[str, Any], total: int) -> None:
        self.pid = pid
        self.agent = spec["agent"]
        self.out_dir = Path(spec["out_dir"])
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.phases = sorted(spec["phases"], key=lambda p: p["from"])
        for a, b in zip(self.phases, self.phases[1:], strict=False):
            if b["from"] < a["to"]:
                raise ValueError(f"profile phases {a['name']} and {b['name']} overlap")
        self.total = total
        self.next = 0
        self.active: dict[str, Any] | None = None
        self.done: list[dict[str, Any]] = []
        port = spec.get("rest_port")
        self.metrics = FlinkMetrics(port) if port else None

    def _start(self, phase: dict[str, Any], samples: int) -> None:
        out = self.out_dir / f"{phase['name']}.collapsed"
        hotspot_attach(
            self.pid,
            self.agent,
            f"start,event={phase['event']},interval={phase['interval']},threads,file={out}",
        )
        self.active = dict(phase, start=snapshot(self.pid, samples))
        if self.metrics and phase.get("flink_metrics"):
            self.metrics.label = phase["name"]

    def _stop(self, samples: int) -> None:
        phase = self.active
        assert phase is not None
        end = snapshot(self.pid, samples)  # before the dump, which takes CPU of its own
        if self.metrics:
            self.metrics.label = None
        collapsed = self.out_dir / f"{phase['name']}.collapsed"
        hotspot_attach(self.pid, self.agent, f"dump,file={collapsed},collapsed")
        hotspot_attach(self.pid, self.agent, f"stop,file={self.out_dir / phase['name']}.html")
        phase["end"] = end
        phase["collapsed"] = str(collapsed)
        self.done.append(phase)
        self.active = None

    def update(self, samples: int) -> None:
        """Called after each batch with the samples consumed so far."""
        if self.active is not None and samples >= self.active["to"] * self.total:
            self._stop(samples)
        if (
            self.active is None
            and self.next < len(self.phases)
            and samples >= self.phases[self.next]["from"] * self.total
        ):
            self._start(self.phases[self.next], samples)
            self.next += 1

    def finish(self, samples: int) -> Path:
        """Stops a phase still running (if the JVM is) and writes ``profile-run.json``."""
        if self.active is not None and Path(f"/proc/{self.pid}").exists():
            self._stop(samples)
        if self.metrics:
            self.metrics.close()
        path = self.out_dir / "profile-run.json"
        path.write_text(
            json.dumps(
                {
                    "pid": self.pid,
                    "total_samples": self.total,
                    "phases": self.done,
                    "flink_metrics": self.metrics.polls if self.metrics else [],
                },
                indent=1,
            )
        )
        return path
