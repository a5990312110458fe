"""Summarise Stoker's dead-letter output.

The job writes one JSON object per rejected record (``dead-letters-*.jsonl`` part files, see
``DeadLetterJsonEncoder`` in the Java connectors) with the keys ``file``, ``line``,
``sample_index``, ``record_id``, ``stage``, ``reason`` and ``message``.

Usage: ``python -m stoker.dead_letters DIR [--show N]``
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any


def read_dead_letters(directory: str | Path) -> list[dict[str, Any]]:
    """Return every committed dead letter under ``directory`` (recursively), sorted by sample index.

    In-progress part files (hidden names starting with ``.``) are not read: the job has not
    committed them yet. A missing directory means no dead letters.

    Raises:
        ValueError: a line is not a JSON object (names the file and line).
    """
    root = Path(directory)
    letters: list[dict[str, Any]] = []
    if not root.is_dir():
        return letters
    for path in sorted(root.rglob("dead-letters*.jsonl")):
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        with path.open(encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{number}: not a JSON object: {e}") from e
                letters.append(obj)
    letters.sort(key=lambda d: d.get("sample_index", -1))
    return letters


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", help="dead-letter directory of a job")
    parser.add_argument("--show", type=int, default=10, help="dead letters to print in full")
    args = parser.parse_args(argv)
    letters = read_dead_letters(args.directory)
    reasons = Counter(f"{d['stage']}/{d['reason']}" for d in letters)
    print(
        f"dead letters: {len(letters)}"
        + "".join(f"\n  {k}: {v}" for k, v in sorted(reasons.items()))
    )
    for d in letters[: args.show]:
        rid = f" (id={d['record_id']})" if d.get("record_id") else ""
        print(f"  {d['file']}:{d['line']}{rid}: {d['reason']}: {d['message']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
