"""Fixtures of the real-model tier; its shared helpers are in :mod:`harness.real_model`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.real_model import Record, model_dataset


@pytest.fixture(scope="module")
def dataset() -> Iterator[tuple[Path, dict[tuple[str, int], Record]]]:
    """:func:`harness.real_model.model_dataset`, once per test module."""
    with model_dataset() as d:
        yield d
