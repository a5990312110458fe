"""Contender 3a, Ray actors: one async fetch actor (asyncio, up to ``fetch_concurrency`` GETs in
flight, each boto3 GET in a thread, the client's connection pool as large) and ``cores``
preprocessing actors (one CPU each, the fast image processor with ``extra.fast``, one torch
thread). Image bytes and samples pass through Ray's object store as ObjectRefs; the driver keeps
``prefetch_batches`` batches of samples in flight and collates them in order."""

from __future__ import annotations

import asyncio
import sys
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray

from bench.loaders.common import (
    Config,
    Preprocessor,
    collate,
    contender_main,
    fetch,
    read_records,
    s3_client,
)


@ray.remote(num_cpus=0)
class Fetcher:
    def __init__(self, endpoint: str, concurrency: int) -> None:
        self.client = s3_client(endpoint, concurrency)

    async def fetch(self, rec: dict[str, Any]) -> bytes:
        return await asyncio.to_thread(fetch, self.client, rec)


@ray.remote(num_cpus=1)
class Worker:
    def __init__(self, fast: bool) -> None:
        import torch

        torch.set_num_threads(1)  # one CPU per actor; the fast processor runs on torch
        self.preprocess = Preprocessor(fast=fast)

    def process(self, rec: dict[str, Any], image: bytes) -> dict[str, Any]:
        return self.preprocess(rec, image)  # `image` arrives resolved from the object store


def start_ray(cores: int, attempts: int = 3) -> None:
    """A local Ray node with ``cores`` CPUs. On a loaded machine its Python agents can take
    longer to start than the raylet waits for them (it then aborts: "the current node timed out
    during startup"), so a failed start is retried."""
    for attempt in range(1, attempts + 1):
        try:
            ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False)
            return
        except Exception as e:
            ray.shutdown()
            if attempt == attempts:
                raise
            print(f"ray.init failed ({e}); retrying", file=sys.stderr)


def batches(cfg: Config) -> Iterator[dict[str, Any]]:
    start_ray(cfg.cores)
    concurrency = cfg.extra.get("fetch_concurrency", 32)
    fetcher = Fetcher.options(max_concurrency=concurrency).remote(cfg.endpoint, concurrency)
    fast = bool(cfg.extra.get("fast", False))
    workers = [Worker.remote(fast) for _ in range(cfg.cores)]
    records = read_records(Path(cfg.dataset))[: cfg.samples]
    in_flight: deque[Any] = deque()
    window = cfg.batch_size * cfg.extra.get("prefetch_batches", 4)
    chunk: list[dict[str, Any]] = []
    try:
        for i in range(len(records) + window):
            if i < len(records):
                image = fetcher.fetch.remote(records[i])
                in_flight.append(workers[i % len(workers)].process.remote(records[i], image))
            if len(in_flight) > window or (i >= len(records) and in_flight):
                chunk.append(ray.get(in_flight.popleft()))
                if len(chunk) == cfg.batch_size or not in_flight:
                    yield collate(chunk)
                    chunk = []
    finally:
        ray.shutdown()


if __name__ == "__main__":
    contender_main(batches)
