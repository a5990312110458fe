"""Contender 1, the naive serial loop: fetch (boto3), decode, resize, normalize and tokenize one
sample at a time in the trainer's own process, then collate every B samples."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.loaders.common import (
    Config,
    Preprocessor,
    contender_main,
    fetch,
    micro_batches,
    read_records,
    s3_client,
)


def batches(cfg: Config) -> Iterator[dict[str, Any]]:
    client = s3_client(cfg.endpoint)
    preprocess = Preprocessor()
    records = read_records(Path(cfg.dataset))[: cfg.samples]
    samples = (preprocess(rec, fetch(client, rec)) for rec in records)
    return micro_batches(samples, cfg.batch_size)


if __name__ == "__main__":
    contender_main(batches)
