import subprocess
import sys
from pathlib import Path

from conftest import make_job

from stoker.simulate import flink_job_status, main

PYTHON_DIR = Path(__file__).resolve().parents[1]


def test_simulate_two_ranks_exits_0_with_summary(shm_root):
    written = make_job(shm_root, world_size=2, num_steps=5)
    total = sum(len(v) for v in written.values())
    images = sum(len(s["grids"]) for v in written.values() for s in v)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "stoker.simulate",
            "--root",
            str(shm_root),
            "--ranks",
            "0,1",
            "--step-time-ms",
            "5",
            "--timeout-s",
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=PYTHON_DIR,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "rank 0: steps=5/5" in out and "rank 1: steps=5/5" in out
    assert f"total: samples={total} images={images}" in out
    assert "wait_time_ratio=" in out and "result: OK" in out
    # every batch consumed, acked and unlinked
    for r in (0, 1):
        assert sorted(p.name for p in (shm_root / f"rank-{r}").iterdir()) == ["ack.json"]


def test_simulate_fails_when_a_rank_is_incomplete(shm_root, capsys):
    make_job(shm_root, world_size=2, num_steps=2)
    (shm_root / "rank-1" / "step-0000000001.arrow").unlink()
    rc = main(["--root", str(shm_root), "--step-time-ms", "0", "--timeout-s", "0.3"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "rank 0: steps=2/2" in out
    assert "rank 1: steps=1/2" in out and "TimeoutError" in out
    assert "result: FAILED" in out


def test_flink_status_is_best_effort():
    msg = flink_job_status("http://127.0.0.1:9", timeout_s=0.5)
    assert msg.startswith("flink: unavailable at http://127.0.0.1:9")


def test_flink_status_reads_records_read_from_the_source_operator_metric():
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/jobs/overview":
                body = {
                    "jobs": [
                        {"jid": "old", "name": "other", "state": "FINISHED"},
                        {"jid": "abc123", "name": "test-job", "state": "RUNNING"},
                    ]
                }
            elif self.path == "/jobs/abc123":
                body = {
                    "jid": "abc123",
                    "name": "test-job",
                    "state": "RUNNING",
                    "vertices": [
                        {"id": "v1", "name": "Source", "metrics": {"write-records": 7}},
                        {"id": "v2", "name": "Sink", "metrics": {"write-records": 0}},
                    ],
                }
            elif self.path == "/jobs/abc123/vertices/v1/subtasks/metrics":
                body = [
                    {"id": "Source__jsonl-source.numRecordsIn"},
                    {"id": "Source__jsonl-source.numRecordsOut"},
                ]
            elif (
                self.path
                == "/jobs/abc123/vertices/v1/subtasks/metrics?get=Source__jsonl-source.numRecordsOut&agg=sum"
            ):
                body = [{"id": "Source__jsonl-source.numRecordsOut", "sum": 42.0}]
            else:
                self.send_response(404)
                self.end_headers()
                return
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    srv = HTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        msg = flink_job_status(f"http://127.0.0.1:{srv.server_port}", "test-job")
    finally:
        srv.shutdown()
    assert msg == "flink: test-job RUNNING records_read=42"
