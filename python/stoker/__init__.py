"""Stoker trainer-side reader: zero-copy Arrow batches from a Flink job in /dev/shm.

Modules: :mod:`stoker.protocol` (file names, ``manifest.json``, ``ack.json``, errors),
:mod:`stoker.batch` (one batch file: mapping, checks, arrays; its column views in
:mod:`stoker.arrow_columns`, its packed-batch checks in :mod:`stoker.packed`), :mod:`stoker.pixels`
(uint8 pixel values normalised as the sink does), :mod:`stoker.reader`
(:class:`BatchReader`, one DP rank's batches in order), :mod:`stoker.torch` (``StokerDataset``;
needs torch, not imported here), :mod:`stoker.images` (pixel_values back to pictures),
:mod:`stoker.dead_letters` (the job's dead letters), :mod:`stoker.printable` (text from the job,
escaped for a terminal: what every tool prints it through).
"""

from .batch import Batch, read_batch_file
from .pixels import bfloat16_to_float32, normalize_uint8, normalize_uint8_torch
from .protocol import BatchFormatError, Manifest, RankInUseError, ResumeError, VisionSettings
from .reader import BatchReader

__all__ = [
    "Batch",
    "BatchFormatError",
    "BatchReader",
    "Manifest",
    "RankInUseError",
    "ResumeError",
    "VisionSettings",
    "bfloat16_to_float32",
    "normalize_uint8",
    "normalize_uint8_torch",
    "read_batch_file",
]
__version__ = "0.1.0"
