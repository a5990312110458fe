"""Contender 2, PyTorch DataLoader: a map-style Dataset whose ``__getitem__`` fetches (boto3) and
preprocesses one record, ``num_workers`` = cores worker processes, each keeping
``prefetch_factor`` batches in flight, collated into the same batch layout."""

from __future__ import annotations

from collections.abc import Iterator
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
        self.client: Any = None  # one client and processor per worker process, made there
        self.preprocess: Preprocessor | None = None

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self.client is None:
            self.client = s3_client(self.endpoint)
            self.preprocess = Preprocessor()
        assert self.preprocess is not None
        rec = self.records[i]
        return self.preprocess(rec, fetch(self.client, rec))


def batches(cfg: Config) -> Iterator[dict[str, Any]]:
    loader = torch.utils.data.DataLoader(
        S3Dataset(cfg),
        batch_size=cfg.batch_size,
        num_workers=cfg.cores,
        prefetch_factor=cfg.extra.get("prefetch_factor", 4),
        collate_fn=collate,
    )
    return iter(loader)


if __name__ == "__main__":
    contender_main(batches)
