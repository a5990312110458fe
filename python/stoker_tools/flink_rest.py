"""A best-effort client of the Flink REST API, for the demo and bench tools (not the trainer's).

:func:`flink_job_status` gives the one-line job status the simulated trainer
(:mod:`stoker_tools.simulate`) prints beside its progress with ``--flink-rest``; :class:`JobRest`
is what the cluster tests and the scaling ladder ask about a job (its state, vertices,
checkpoints), over a transport of the subclass (a local port, or ``curl`` inside a simulated node).
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from stoker.printable import printable

__all__ = ["JobRest", "flink_job_status"]


def _get_json(url: str, timeout_s: float) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        return json.loads(resp.read().decode("utf-8"))


def flink_job_status(rest: str, job_name: str | None = None, timeout_s: float = 2.0) -> str:
    """One-line job status from the Flink REST API (best effort; never raises), escaped with
    :func:`stoker.printable.printable` (the job's name and an error's text are the user's).

    Uses ``GET /jobs/overview`` to find the job (by name if given, else the first running
    one), then ``GET /jobs/<jid>``. Records read is the sum over subtasks of the JSONL source
    operator's ``numRecordsOut`` (``GET /jobs/<jid>/vertices/<vid>/subtasks/metrics``), falling
    back to the first vertex's ``write-records``.
    """
    rest = rest.rstrip("/")
    try:
        jobs = _get_json(f"{rest}/jobs/overview", timeout_s).get("jobs", [])
        if not jobs:
            return "flink: no jobs"
        cands = (
            [j for j in jobs if job_name and j.get("name") == job_name]
            or [j for j in jobs if j.get("state") == "RUNNING"]
            or jobs
        )
        job = cands[0]
        detail = _get_json(f"{rest}/jobs/{job['jid']}", timeout_s)
        vertices = detail.get("vertices") or []
        records = vertices[0].get("metrics", {}).get("write-records") if vertices else None
        if vertices:
            records = (
                _source_records_read(rest, job["jid"], vertices[0]["id"], timeout_s) or records
            )
        return printable(
            f"flink: {detail.get('name', job.get('name'))} "
            f"{detail.get('state', job.get('state'))} records_read={records}"
        )
    except (
        urllib.error.URLError,
        http.client.HTTPException,
        OSError,
        ValueError,
        KeyError,
        IndexError,
        AttributeError,
        TypeError,
    ) as e:
        return printable(f"flink: unavailable at {rest} ({type(e).__name__}: {e})")


def _source_records_read(rest: str, jid: str, vid: str, timeout_s: float) -> int | None:
    base = f"{rest}/jobs/{jid}/vertices/{vid}/subtasks/metrics"
    names = [m["id"] for m in _get_json(base, timeout_s)]
    wanted = [n for n in names if "jsonl-source" in n and n.endswith(".numRecordsOut")]
    if not wanted:
        return None
    values = _get_json(f"{base}?get={urllib.parse.quote(wanted[0])}&agg=sum", timeout_s)
    return int(float(values[0]["sum"])) if values else None


class JobRest:
    """What the cluster tests and benchmarks ask Flink's REST API about a job, over a subclass's
    ``rest(path)`` (parsed JSON; raises ``OSError`` when the call fails) and with its cluster's
    ``run_dir`` (for the JobManager's log)."""

    run_dir: Path

    def rest(self, path: str) -> Any:
        raise NotImplementedError

    def job(self, jid: str) -> dict[str, Any]:
        return dict(self.rest(f"/jobs/{jid}"))

    def state(self, jid: str) -> str:
        return str(self.job(jid)["state"])

    def checkpoints(self, jid: str) -> dict[str, Any]:
        return dict(self.rest(f"/jobs/{jid}/checkpoints"))

    def describe(self, jid: str) -> str:
        """The job's state, each vertex's subtask states, its exceptions and the JobManager's log
        tail; what comes from the job or its log is escaped with :func:`stoker.printable.printable`
        (the log's and a stack trace's line breaks stay)."""
        lines = []
        try:
            job = self.job(jid)
            lines.append(f"job {jid}: {printable(job['state'])}")
            for v in job["vertices"]:
                tasks = {k: n for k, n in v.get("tasks", {}).items() if n}
                lines.append(
                    printable(f"  {v['name']} (p={v['parallelism']}): {v['status']} {tasks}")
                )
            for e in (
                self.rest(f"/jobs/{jid}/exceptions")
                .get("exceptionHistory", {})
                .get("entries", [])[:3]
            ):
                lines.append(
                    printable(
                        f"  exception on {e.get('taskName')}: {e.get('stacktrace', '')[:1500]}",
                        keep_newlines=True,
                    )
                )
        except OSError as e:
            lines.append(f"job {jid}: REST error {printable(e)}")
        log = self.run_dir / "log" / "jobmanager.log"
        if log.is_file():
            lines.append("--- tail of jobmanager.log")
            text = log.read_bytes().decode("utf-8", "replace")
            tail = text.rstrip("\n").split("\n")[-40:]
            lines.append(printable("\n".join(tail), keep_newlines=True))
        return "\n".join(lines)

    def running(self, jid: str) -> bool:
        job = self.job(jid)
        return job["state"] == "RUNNING" and all(
            v["status"] in ("RUNNING", "FINISHED") for v in job["vertices"]
        )
