"""Contender 3b, Ray Data: the records as a dataset, one streaming ``map_batches`` stage of
``cores`` actors (one CPU each) that fetch a micro-batch's images at once (boto3 on
``fetch_threads`` threads, the client's connection pool as large), preprocess them as they arrive
(the fast image processor with ``extra.fast``, one torch thread) and collate them; the trainer
iterates the stream (Ray Data's own backpressure)."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
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
from bench.loaders.ray_actors import start_ray


class FetchAndPreprocess:
    def __init__(self, endpoint: str, fetch_threads: int, fast: bool) -> None:
        import torch

        torch.set_num_threads(1)  # one CPU per actor; the fast processor runs on torch
        self.client = s3_client(endpoint, fetch_threads)
        self.pool = ThreadPoolExecutor(fetch_threads)
        self.preprocess = Preprocessor(fast=fast)

    def __call__(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        recs = [pickle.loads(r) for r in rows["record"]]
        images = self.pool.map(lambda rec: fetch(self.client, rec), recs)
        batch = collate([self.preprocess(rec, img) for rec, img in zip(recs, images, strict=True)])
        # one output row per micro-batch; its arrays have per-batch shapes, so they travel pickled
        return {"batch": np.array([pickle.dumps(batch, protocol=5)], dtype=object)}


def batches(cfg: Config) -> Iterator[dict[str, Any]]:
    start_ray(cfg.cores)
    try:
        records = read_records(Path(cfg.dataset))[: cfg.samples]
        items = [{"record": pickle.dumps(r)} for r in records]
        # one block per micro-batch, so batches stream out as they are made
        ds = ray.data.from_items(items, override_num_blocks=-(-len(items) // cfg.batch_size))
        ds = ds.map_batches(
            FetchAndPreprocess,
            fn_constructor_args=(
                cfg.endpoint,
                int(cfg.extra.get("fetch_threads", 8)),
                bool(cfg.extra.get("fast", False)),
            ),
            batch_size=cfg.batch_size,
            compute=ray.data.ActorPoolStrategy(size=cfg.cores),
            num_cpus=1,
            batch_format="numpy",
        )
        for row in ds.iter_rows():
            yield pickle.loads(row["batch"])
    finally:
        ray.shutdown()


if __name__ == "__main__":
    contender_main(batches)
