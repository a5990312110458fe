"""Contender 4, Stoker: the job on embedded Flink (``extra.mode = "embedded"``, a child JVM as
``./stoker demo`` starts it) or submitted with ``flink run`` to the standalone cluster that run.py
started (``"cluster"``), dp-world-size 1; the trainer reads the batches with the Python
``BatchReader`` (zero copy, acks drive the job's prefetch bound). With ``extra.profile`` (embedded
only; ``bench/profile.sh``) async-profiler is attached to the job's JVM in the phases it gives
(``profiling.ProfiledRun``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stoker_tools.job import EMBEDDED_JVM_OPTS, JobBuild, embedded_command, flink_run_args

from bench.loaders.common import (
    BUCKET,
    MAX_PIXELS,
    MIN_PIXELS,
    PREFIX,
    REPO,
    TOKENIZER,
    Config,
    contender_main,
    read_records,
)
from bench.loaders.profiling import ProfiledRun
from stoker import BatchReader

JAR = REPO / "job" / "target" / "stoker-job.jar"
OUTPUT_ROOT = Path("/dev/shm/stoker-bench")


def job_options(cfg: Config, job: str) -> dict[str, str]:
    return {
        "stoker.dataset.path": f"s3://{BUCKET}/{PREFIX}",
        "stoker.tokenizer.path": str(TOKENIZER),
        "stoker.job-name": job,
        "stoker.output.root": str(OUTPUT_ROOT),
        "stoker.dp-world-size": "1",
        "stoker.micro-batch-size": str(cfg.batch_size),
        "stoker.model.preset": "qwen2-vl",
        "stoker.image.min-pixels": str(MIN_PIXELS),
        "stoker.image.max-pixels": str(MAX_PIXELS),
        "s3.endpoint": cfg.endpoint,
        "s3.path.style.access": "true",
        "parallelism.default": str(cfg.cores),
        **cfg.extra.get("job_options", {}),  # bench/profile.sh --jsonl-local
    }


def start_job(cfg: Config, job: str) -> subprocess.Popen[bytes]:
    log = open(Path(cfg.result).with_suffix(".job.log"), "wb")  # kept open by the child
    env = dict(os.environ, AWS_ACCESS_KEY_ID="stoker-local", AWS_EC2_METADATA_DISABLED="true")
    env["AWS_SECRET_ACCESS_KEY"] = "stoker-local-secret"
    if cfg.extra["mode"] == "embedded":
        env["FLINK_PLUGINS_DIR"] = str(REPO / "job" / "target" / "plugins")
        options = {
            **job_options(cfg, job),
            "rest.address": "127.0.0.1",
            "rest.bind-address": "127.0.0.1",
            "rest.port": str(cfg.extra.get("rest_port", 18082)),
        }
        cmd = embedded_command(
            options,
            build=JobBuild(JAR, REPO / "job" / "target" / "runtime-classpath.txt"),
            jvm_opts=EMBEDDED_JVM_OPTS,  # as ./stoker demo
            log_file=Path(cfg.result).with_suffix(".flink.log"),
        )
    else:
        cmd = [str(REPO / "scripts" / "flink"), *flink_run_args(job_options(cfg, job), jar=JAR)]
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)


def batches(cfg: Config) -> Iterator[dict[str, Any]]:
    job = f"bench-{cfg.name}"
    shutil.rmtree(OUTPUT_ROOT / job, ignore_errors=True)
    spec = cfg.extra.get("profile")
    if spec and cfg.extra["mode"] != "embedded":
        raise ValueError("profiling needs the embedded job (its process is the JVM)")
    records = len(read_records(Path(cfg.dataset)))
    embedded = cfg.extra["mode"] == "embedded"
    proc = start_job(cfg, job)
    profiled = None
    consumed = 0  # samples delivered, back-filled rows not counted
    read = 0  # rows read: the dataset's records, each once, dead-lettered ones back-filled
    try:
        if spec:
            profiled = ProfiledRun(proc.pid, spec, cfg.samples)  # proc is the JVM
        for batch in BatchReader(OUTPUT_ROOT / job, 0, timeout_s=600):
            consumed += len(batch.location) - len(batch.backfilled_slots)
            read += len(batch.location)
            if profiled is not None:
                profiled.update(consumed)
            yield {
                # location is "<jsonl uri>:<line>"; a back-filled row repeats another row's record
                "lines": [int(s.rsplit(":", 1)[1]) for s in batch.location],
                "backfilled": len(batch.backfilled_slots),
                "input_ids": batch.input_ids,
                "labels": batch.labels,
                "attention_mask": batch.attention_mask,
                "pixel_values": batch.pixel_values,
                "image_grid_thw": batch.image_grid_thw,
            }
            if embedded and read >= cfg.samples < records:
                # a pass of fewer samples than the dataset has (pass 2) ends there and the job's
                # JVM is stopped; a cluster job would run on after its client, so it reads all
                return
        if proc.wait(timeout=300) != 0:
            raise RuntimeError(f"the Stoker job failed (exit {proc.returncode}); see its log")
    finally:
        if profiled is not None:
            profiled.finish(consumed)
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
        shutil.rmtree(OUTPUT_ROOT / job, ignore_errors=True)


if __name__ == "__main__":
    contender_main(batches)
