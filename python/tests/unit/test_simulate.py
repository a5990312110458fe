import hashlib
import json
import re
import subprocess
import sys
import threading
import time

from harness.batches import (
    IMAGE_PAD,
    build_record_batch,
    make_job,
    make_samples,
    rank_dir,
    write_batch,
)
from harness.paths import REPO_ROOT
from stoker_tools.flink_rest import flink_job_status
from stoker_tools.simulate import main, total_line

PYTHON_DIR = REPO_ROOT / "python"


def test_simulate_two_ranks_exits_0_with_summary(shm_root):
    written = make_job(shm_root, world_size=2, num_steps=5)
    total = sum(len(v) for v in written.values())
    images = sum(len(s["grids"]) for v in written.values() for s in v)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "stoker_tools.simulate",
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
        assert sorted(p.name for p in rank_dir(shm_root, r).iterdir()) == ["ack.json"]


def test_simulate_fails_when_a_rank_is_incomplete(shm_root, capsys):
    make_job(shm_root, world_size=2, num_steps=2)
    (rank_dir(shm_root, 1) / "step-0000000001.arrow").unlink()
    rc = main(["--root", str(shm_root), "--step-time-ms", "0", "--timeout-s", "0.3"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "rank 0: steps=2/2" in out
    assert "rank 1: steps=1/2" in out and "TimeoutError" in out
    assert "result: FAILED" in out


def test_simulate_reports_the_start_up_apart_from_the_steady_state(shm_root, tmp_path, capsys):
    """Step 0 appears 1 s late, every later step is there at once: the whole-run wait-time ratio
    is mostly that start-up, the ratio after the first batch is near 0. ``--summary-json`` writes
    the figures of the total line."""
    make_job(shm_root, world_size=2, num_steps=5)
    held = shm_root.parent / "held"
    held.mkdir()
    for r in (0, 1):
        (rank_dir(shm_root, r) / "step-0000000000.arrow").rename(held / f"r{r}.arrow")

    def publish_step_0() -> None:
        for r in (0, 1):  # a rename, as the sink publishes
            (held / f"r{r}.arrow").rename(rank_dir(shm_root, r) / "step-0000000000.arrow")

    timer = threading.Timer(1.0, publish_step_0)
    timer.start()
    try:
        rc = main(
            [
                "--root",
                str(shm_root),
                "--step-time-ms",
                "200",
                "--timeout-s",
                "10",
                "--summary-json",
                str(tmp_path / "summary.json"),
            ]
        )
    finally:
        timer.cancel()
    out = capsys.readouterr().out
    assert rc == 0, out
    firsts = []
    for r in (0, 1):
        line = next(x for x in out.splitlines() if x.startswith(f"  rank {r}:"))
        first = float(re.search(r"first_batch_s=([0-9.]+)", line).group(1))
        firsts.append(first)
        whole = float(re.search(r" wait_time_ratio=([0-9.]+)", line).group(1))
        steady = float(re.search(r"steady_wait_time_ratio=([0-9.]+)", line).group(1))
        assert 0.95 <= first < 5, line
        assert whole > 0.4, line  # ~1 s waited of ~2 s (5 steps of 200 ms)
        # 4 steps of 200 ms, each batch already written: the steady wait is the reads alone
        # (steps of 20 ms read 0.44 in a clean-clone CI run, its tiers in parallel on 2 cores)
        assert steady < 0.3, line
    total = next(x for x in out.splitlines() if x.startswith("  total:"))
    assert float(re.search(r"steady_wait_time_ratio=([0-9.]+)", total).group(1)) < 0.3, total
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert total == "  " + total_line(summary)
    assert abs(summary["first_batch_s"] - max(firsts)) <= 0.005


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


def test_simulate_records_every_batch_with_its_file_hash(shm_root, tmp_path, capsys):
    written = make_job(shm_root, world_size=2, num_steps=4)
    # step 2 of rank 1: slot 3 was dead-lettered and back-filled with a copy of slot 0, and
    # sample 1 has 5 image tokens
    samples = make_samples(2, 1, 4, world_size=2)
    samples[1]["ids"][:5] = [IMAGE_PAD] * 5
    write_batch(
        shm_root,
        2,
        1,
        build_record_batch(samples[:3] + samples[:1]),
        metadata={"stoker.backfilled_slots": "3"},
    )
    want = {
        (int(p.name[5:15]), r): hashlib.sha256(p.read_bytes()).hexdigest()
        for r in (0, 1)
        for p in rank_dir(shm_root, r).glob("step-*.arrow")
    }
    record = tmp_path / "batches.jsonl"
    record.write_text('{"earlier": "run"}\n')  # appended to, not replaced
    rc = main(
        [
            "--root",
            str(shm_root),
            "--step-time-ms",
            "0",
            "--timeout-s",
            "5",
            "--record",
            str(record),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "rank 1: steps=4/4 (steps 0..3) samples=16 backfilled=1" in out
    lines = [json.loads(x) for x in record.read_text().splitlines()]
    assert lines[0] == {"earlier": "run"}
    got = lines[1:]
    assert len(got) == 8
    keys = {"step", "rank", "sha256", "rows", "backfilled", "sample_bytes", "wait_s", "received_at"}
    assert all(set(x) == keys for x in got)
    assert all(x["wait_s"] >= 0 and x["received_at"] > 0 for x in got)
    assert {(x["step"], x["rank"]): x["sha256"] for x in got} == want
    for r in (0, 1):
        assert [x["step"] for x in got if x["rank"] == r] == [0, 1, 2, 3]
    assert all(x["rows"] == 4 for x in got)
    assert {(x["step"], x["rank"]): x["backfilled"] for x in got if x["backfilled"]} == {
        (2, 1): [3]
    }
    # 16 bytes (two int64) per token of the rows that are not back-filled, and the uint8 RGB of
    # 2 x 2 patches of 14 x 14 pixels per image token (make_job's merge_size and patch_size)
    (backfilled_batch,) = [x for x in got if (x["step"], x["rank"]) == (2, 1)]
    assert backfilled_batch["sample_bytes"] == 16 * sum(len(s["ids"]) for s in samples[:3]) + 5 * (
        4 * 14 * 14 * 3
    )
    (plain,) = [x for x in got if (x["step"], x["rank"]) == (1, 0)]
    assert plain["sample_bytes"] == 16 * sum(len(s["ids"]) for s in written[1, 0])


def test_simulate_start_step_skips_earlier_steps_and_exits_0(shm_root, tmp_path, capsys):
    make_job(shm_root, world_size=2, num_steps=5)
    record = tmp_path / "batches.jsonl"
    rc = main(
        [
            "--root",
            str(shm_root),
            "--step-time-ms",
            "0",
            "--timeout-s",
            "5",
            "--start-step",
            "3",
            "--record",
            str(record),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "start_step=3" in out
    assert "rank 0: steps=2/2 (steps 3..4)" in out and "result: OK" in out
    got = sorted((x["rank"], x["step"]) for x in map(json.loads, record.read_text().splitlines()))
    assert got == [(0, 3), (0, 4), (1, 3), (1, 4)]
    for r in (0, 1):
        assert sorted(p.name for p in rank_dir(shm_root, r).iterdir()) == ["ack.json"]
        ack = json.loads((rank_dir(shm_root, r) / "ack.json").read_text())
        assert ack["consumed_step"] == 4


def test_simulate_start_step_before_first_step_exits_2(shm_root, capsys):
    make_job(shm_root, world_size=1, num_steps=5, first_step=2)
    rc = main(["--root", str(shm_root), "--timeout-s", "5", "--start-step", "1"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "first_step 2" in err and "--stoker.resume-step 0" in err


def test_simulate_stop_after_step_then_restart_reads_every_step_once(shm_root, tmp_path, capsys):
    make_job(shm_root, world_size=2, num_steps=6)
    record = tmp_path / "batches.jsonl"
    common = ["--root", str(shm_root), "--step-time-ms", "0", "--timeout-s", "5"]
    rc = main([*common, "--stop-after-step", "2", "--record", str(record)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "stop_after_step=2" in out
    assert "rank 1: steps=3/3 (steps 0..2)" in out and "result: OK" in out
    for r in (0, 1):
        ack = json.loads((rank_dir(shm_root, r) / "ack.json").read_text())
        assert ack["consumed_step"] == 2  # the last step is acknowledged, as a trainer's checkpoint
        assert [p.name[5:15] for p in sorted(rank_dir(shm_root, r).glob("step-*.arrow"))] == [
            "0000000003",
            "0000000004",
            "0000000005",
        ]
    rc = main([*common, "--start-step", "3", "--record", str(record)])
    out = capsys.readouterr().out
    assert rc == 0, out
    got = sorted((x["rank"], x["step"]) for x in map(json.loads, record.read_text().splitlines()))
    assert got == [(r, s) for r in (0, 1) for s in range(6)]


def test_simulate_stop_after_step_before_start_step_exits_2(shm_root, capsys):
    make_job(shm_root, world_size=1, num_steps=5)
    rc = main(["--root", str(shm_root), "--start-step", "3", "--stop-after-step", "2"])
    assert rc == 2
    assert "--stop-after-step 2 is before the start step 3" in capsys.readouterr().err


def test_simulate_records_how_long_each_batch_was_waited_for(shm_root, tmp_path, capsys):
    make_job(shm_root, world_size=1, num_steps=3)
    # step 1 is published 1.5 s after the trainer started: the rank waits for it, not for 0 or 2
    late = next(rank_dir(shm_root, 0).glob("step-0000000001.arrow"))
    aside = shm_root.parent / late.name  # same filesystem: rename is atomic
    late.rename(aside)
    delay_s = 1.5
    timer = threading.Timer(delay_s, lambda: aside.rename(late))
    record = tmp_path / "batches.jsonl"
    started = time.time()
    timer.start()
    try:
        rc = main(
            ["--root", str(shm_root), "--step-time-ms", "0", "--timeout-s", "10"]
            + ["--record", str(record)]
        )
    finally:
        timer.join()
    assert rc == 0, capsys.readouterr().out
    got = {x["step"]: x for x in map(json.loads, record.read_text().splitlines())}
    assert sorted(got) == [0, 1, 2]
    assert got[1]["wait_s"] >= delay_s - (got[0]["received_at"] - started) - 0.05, got
    assert got[1]["received_at"] - started >= delay_s, got
    assert got[0]["wait_s"] < 0.5 and got[2]["wait_s"] < 0.5, got
