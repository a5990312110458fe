"""Waiting for a condition: work of a background thread, a job, a cluster's REST API."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest


def eventually(condition, timeout_s=5.0, interval_s=0.005):
    """Whether ``condition()`` became true within ``timeout_s`` (for background-thread work)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)
    return True


def wait_for(
    what: str,
    timeout_s: float,
    check: Callable[[], Any],
    interval_s: float = 0.5,
    explain: Callable[[], str] | None = None,
) -> Any:
    """Poll ``check`` until it returns a truthy value, and return it; a REST call that fails
    counts as not yet.

    On timeout the test fails with ``what``, the last REST error and ``explain()`` (the state of
    the job waited for), so a CI log says why.
    """
    deadline = time.monotonic() + timeout_s
    last_error: OSError | None = None
    while True:
        try:
            value = check()
        except OSError as e:  # urllib's URLError/HTTPError: the JobManager is busy, or a 404
            value, last_error = None, e
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f" (last REST error: {last_error})" if last_error else ""
            if explain is not None:
                detail += "\n" + explain()
            pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}{detail}")
        time.sleep(interval_s)
