"""Contender 2, PyTorch DataLoader: a map-style Dataset over the records, ``workers_per_core`` x
cores worker processes (default 1 per core), each keeping ``prefetch_factor`` batches in flight,
collated into the same batch layout. Two configurations (``extra``):

* ``fetch_threads`` > 0 (``dataloader``, the tuned peer): the Dataset's ``__getitems__`` gets a
  whole batch of indices, issues the batch's GETs at once on a pool of ``fetch_threads`` threads
  (one boto3 client per worker, its connection pool as large as the thread pool) and preprocesses
  each sample as its bytes arrive, in order, with ``fast`` the fast (torchvision) image processor;
  persistent workers.
* ``fetch_threads`` = 0 (``dataloader-slow``, the reference): ``__getitem__`` per sample, one
  blocking GET then the slow (Pillow) processor, as a DataLoader is often first written.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch.utils.data

from bench.loaders.common import (
    Config,
    Preprocessor,
    collate,
    contender_main,
    fetch,
    read_records,
    s3_client,
)


class S3Dataset(torch.utils.data.Dataset):
    def __init__(self, cfg: Config) -> None:
        self.endpoint = cfg.endpoint
        self.records = read_records(Path(cfg.dataset))[: cfg.samples]
        self.fast = bool(cfg.extra.get("fast", False))
        self.fetch_threads = int(cfg.extra.get("fetch_threads", 0))
        # one client, thread pool and processor per worker process, made there (after the fork)
        self.client: Any = None
        self.pool: ThreadPoolExecutor | None = None
        self.preprocess: Preprocessor | None = None

    def _setup(self) -> Preprocessor:
        if self.preprocess is None:
            self.client = s3_client(self.endpoint, max(self.fetch_threads, 1))
            if self.fetch_threads > 0:
                self.pool = ThreadPoolExecutor(self.fetch_threads)
            self.preprocess = Preprocessor(fast=self.fast)
        return self.preprocess

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> dict[str, Any]:
        preprocess = self._setup()
        rec = self.records[i]
        return preprocess(rec, fetch(self.client, rec))

    def __getitems__(self, indices: list[int]) -> list[dict[str, Any]]:
        """A batch: with a fetch pool, all its GETs at once, each sample preprocessed when its
        bytes are in (in order); without, one sample after the other."""
        preprocess = self._setup()
        if self.pool is None:
            return [self[i] for i in indices]
        recs = [self.records[i] for i in indices]
        images = [self.pool.submit(fetch, self.client, rec) for rec in recs]
        return [preprocess(rec, image.result()) for rec, image in zip(recs, images, strict=True)]


def batches(cfg: Config) -> Iterator[dict[str, Any]]:
    loader = torch.utils.data.DataLoader(
        S3Dataset(cfg),
        batch_size=cfg.batch_size,
        num_workers=cfg.cores * int(cfg.extra.get("workers_per_core", 1)),
        prefetch_factor=cfg.extra.get("prefetch_factor", 4),
        persistent_workers=bool(cfg.extra.get("persistent_workers", False)),
        collate_fn=collate,
    )
    return iter(loader)


if __name__ == "__main__":
    contender_main(batches)
