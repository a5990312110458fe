"""Where the tests find the repository and the shared data (``../shared/data`` beside it)."""

from __future__ import annotations

from pathlib import Path

import pytest

#: The Stoker checkout (``python/tests/harness/paths.py`` is three levels below it).
REPO_ROOT = Path(__file__).resolve().parents[3]
SCHEMA_JSON = REPO_ROOT / "schema" / "batch-schema.json"
#: ``../shared/data`` beside the repository: real datasets and the real Qwen tokenizer.
SHARED = REPO_ROOT.parent / "shared" / "data"
DATASET = SHARED / "llava-style"
TOKENIZER_DIR = SHARED / "tokenizers" / "qwen3"


def require_shared() -> None:
    """Fail the test (never skip) when ``../shared/data`` is missing."""
    if not SHARED.is_dir():
        pytest.fail(f"{SHARED} is missing; tests need ../shared beside the repository")
