"""Fixtures shared by every tier; the helpers they and the tests use are in :mod:`harness`."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def shm_root():
    """A fresh job directory under /dev/shm (falls back to the temp dir), removed afterwards."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    d = Path(tempfile.mkdtemp(prefix="stoker-test-", dir=base))
    try:
        yield d / "job"
    finally:
        shutil.rmtree(d, ignore_errors=True)
