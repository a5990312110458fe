"""Stoker trainer-side reader: zero-copy Arrow batches from a Flink job in /dev/shm."""

from .reader import (
    Batch,
    BatchFormatError,
    BatchReader,
    Manifest,
    ResumeError,
    bfloat16_to_float32,
    read_batch_file,
)

__all__ = [
    "Batch",
    "BatchFormatError",
    "BatchReader",
    "Manifest",
    "ResumeError",
    "bfloat16_to_float32",
    "read_batch_file",
]
__version__ = "0.1.0"
