r"""Summarise Stoker's dead-letter output.

The job writes one JSON object per rejected record (``dead-letters-*.jsonl`` part files, see
``DeadLetterJsonEncoder`` in the Java connectors) with the keys ``source`` (the record's mixture
source), ``file``, ``line``, ``sample_index``, ``record_id``, ``stage``, ``reason`` and
``message``.

Usage: ``python -m stoker.dead_letters DIR [--show N]``: the count per source (when the dead
letters name one), then per stage and reason, then the
first N dead letters (default 10), one a line. Every text from the job (file names, record ids,
reasons, messages) is printed through :func:`stoker.printable.printable`: a lone surrogate, a
control character (``\x1b``), a bidi override (``\u202e``) or a line break in a message is shown
escaped, so each dead letter stays one line that says exactly what the record held. Exit status 0;
2 when a dead-letter file cannot be read or a line of it is not UTF-8 JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from .printable import escape_unencodable_stdout, printable


def read_dead_letters(directory: str | Path) -> list[dict[str, Any]]:
    """Return every committed dead letter under ``directory`` (recursively), sorted by sample index.

    In-progress part files (hidden names starting with ``.``) are not read: the job has not
    committed them yet. A missing directory means no dead letters.

    Raises:
        ValueError: a line is not UTF-8 or not a JSON object (names the file and line).
        OSError: a file cannot be read.
    """
    root = Path(directory)
    letters: list[dict[str, Any]] = []
    if not root.is_dir():
        return letters
    for path in sorted(root.rglob("dead-letters*.jsonl")):
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        with path.open("rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise ValueError(f"{path}:{number}: not UTF-8: {e}") from e
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{number}: not a JSON object: {e}") from e
                if not isinstance(obj, dict):
                    raise ValueError(f"{path}:{number}: not a JSON object")
                letters.append(obj)
    letters.sort(key=lambda d: d.get("sample_index", -1))
    return letters


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", help="dead-letter directory of a job")
    parser.add_argument("--show", type=int, default=10, help="dead letters to print in full")
    args = parser.parse_args(argv)
    escape_unencodable_stdout()
    try:
        letters = read_dead_letters(args.directory)
    except (OSError, ValueError) as e:
        print(f"error: {printable(e)}", file=sys.stderr)
        return 2
    sources = Counter(str(d["source"]) for d in letters if d.get("source") is not None)
    reasons = Counter(f"{d.get('stage')}/{d.get('reason')}" for d in letters)
    print(
        f"dead letters: {len(letters)}"
        + "".join(f"\n  source {printable(k)}: {v}" for k, v in sorted(sources.items()))
        + "".join(f"\n  {printable(k)}: {v}" for k, v in sorted(reasons.items()))
    )
    for d in letters[: args.show]:
        rid = f" (id={printable(d['record_id'])})" if d.get("record_id") else ""
        where = f"{printable(d.get('file'))}:{printable(d.get('line'))}"
        print(f"  {where}{rid}: {printable(d.get('reason'))}: {printable(d.get('message'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
