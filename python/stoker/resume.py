"""Turn a trainer checkpoint's data state into the job's resume command line.

::

    python -m stoker.resume CHECKPOINT [CHECKPOINT ...] --savepoint PATH \\
        [--jar job/target/stoker-job.jar] [--key PATH] [-- <the job's other options>]

prints ``flink run -s PATH JAR <options> --stoker.resume-step S``, where ``S = next_step - 1``
of the data state(s) (:mod:`stoker.data_state`) in the checkpoint file(s): a JSON file holding the
state, or a ``torch.save`` checkpoint (read with ``torch.load(..., weights_only=True)``; needs
torch) with it anywhere inside (or at ``--key``, dot-separated), or a torch distributed
checkpoint folder (DCP, e.g. torchtitan's ``step-<N>``; needs torch), whose non-tensor entries
are read (a JSON object in a string as that object, the form :mod:`stoker.torchtitan` saves it
in, at ``dataloader.stoker_data_state``). Several states (one per rank, in
one or more files) must agree on the step and the job. The job's name, world size, micro-batch
size, epochs, shuffle seed, model preset and packing (``stoker.packing.enabled`` and
``stoker.packing.max-tokens`` for a state of packed batches) and the step its stage's mixture
started at (``stoker.mixture.start-step``, when not 0) come from the state and are added unless
the options after ``--`` already set them; an option there that contradicts the state (also
``--stoker.packing.enabled true`` for a state of unpacked batches) is an error. The other
options (dataset, tokenizer, output root...) must be the original run's. To change the mixture at
the checkpoint (the next stage), pass the new spec and ``--stoker.mixture.start-step`` equal to
the state's ``next_step``: then only the job's name and world size (unless given) come from the
state, and the command restores no savepoint (the new stage starts from nothing; the job refuses the previous
stage's savepoint, whose records in flight are the old mixture's).

To go on with another number of DP ranks or another micro-batch size (after losing a node, or
growing the run), pass the new ``--stoker.dp-world-size`` and/or ``--stoker.micro-batch-size``
after ``--``: the command then starts a stage at the state's ``next_step`` with
``--stoker.mixture.start-position`` = the records the trainer consumed
(:func:`stoker.data_state.next_position`), so the epoch continues at the next record nobody
trained on, and, as for a new mixture, restores no savepoint (its records in flight are planned
for the old world size).

A command line holding a character a terminal cannot show (a control character, a bidi
override, a lone surrogate: in a job name or an option) is printed escaped
(:func:`stoker.printable.printable`, which also doubles its backslashes), with a note on standard
error that it must be retyped; errors are printed escaped too.

Exit status: 0 printed, 2 bad arguments, an unreadable checkpoint or states that disagree.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from .data_state import DataStateError, find_states, next_position
from .printable import escape_unencodable_stdout, printable

__all__ = ["main", "resume_command"]


def _load_dcp(path: Path) -> object:
    """The non-tensor entries of the torch distributed checkpoint (DCP) folder ``path`` (e.g.
    torchtitan's ``step-<N>``), by their dot-separated key; a string holding a JSON object (the
    form :mod:`stoker.torchtitan` saves the data state in) read as that object."""
    try:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.metadata import BytesStorageMetadata
    except ImportError:
        raise DataStateError(
            f"{path} is a folder: reading a distributed checkpoint needs torch, which is not "
            "installed"
        ) from None
    reader = dcp.FileSystemReader(str(path))
    try:
        metadata = reader.read_metadata()
    except Exception as e:  # noqa: BLE001 - a folder without (or with a bad) .metadata
        raise DataStateError(
            f"{path}: a folder, but not a torch distributed checkpoint: {e}"
        ) from e
    entries: dict[str, Any] = {
        key: None
        for key, md in metadata.state_dict_metadata.items()
        if isinstance(md, BytesStorageMetadata)
    }
    dcp.load(entries, storage_reader=reader, no_dist=True)
    for key, value in entries.items():
        if isinstance(value, str) and value.startswith("{"):
            try:
                entries[key] = json.loads(value)
            except json.JSONDecodeError:
                pass
    return entries


def _load(path: Path) -> object:
    if path.is_dir():
        return _load_dcp(path)
    raw = path.read_bytes()
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        pass
    try:
        import torch
    except ImportError:
        raise DataStateError(
            f"{path} is not JSON, and reading a torch checkpoint needs torch, which is not "
            "installed"
        ) from None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many kinds for a file it cannot read
        raise DataStateError(f"{path}: neither JSON nor a torch checkpoint: {e}") from e


def _option_values(options: list[str]) -> dict[str, str]:
    """``--key value`` pairs (and ``--key=value``) of ``options``."""
    out = {}
    i = 0
    while i < len(options):
        opt = options[i]
        if opt.startswith("--") and "=" in opt:
            k, v = opt[2:].split("=", 1)
            out[k] = v
        elif opt.startswith("--") and i + 1 < len(options):
            out[opt[2:]] = options[i + 1]
            i += 1
        i += 1
    return out


def resume_command(
    states: list[dict[str, Any]],
    savepoint: str,
    *,
    jar: str = "job/target/stoker-job.jar",
    options: list[str] | None = None,
    flink: str = "flink",
) -> list[str]:
    """The ``flink run`` argument list that resumes the job for ``states``.

    Raises:
        DataStateError: no state, states that disagree (step, job, sequence, world size), or an
            option in ``options`` that contradicts the states.
    """
    if not states:
        raise DataStateError("no data state given")
    first = states[0]
    for s in states[1:]:
        for key in ("next_step", "job_name", "world_size", "sequence"):
            if s[key] != first[key]:
                raise DataStateError(
                    f"the data states disagree on {key}: rank {first['rank']} has "
                    f"{first[key]!r}, rank {s['rank']} has {s[key]!r}; restore every rank from "
                    "the same trainer checkpoint"
                )
    seq = first["sequence"]
    options = list(options or [])
    given = _option_values(options)
    implied = {"stoker.job-name": first["job_name"]}
    # a new stage starting at the checkpoint's step has a sequence of its own
    new_stage = given.get("stoker.mixture.start-step", "").strip() == str(first["next_step"])
    # another world size or micro-batch size: a stage of the same mixture from the next record
    elastic = not new_stage and (
        given.get("stoker.dp-world-size", str(first["world_size"])).strip()
        != str(first["world_size"])
        or given.get("stoker.micro-batch-size", str(seq["micro_batch_size"])).strip()
        != str(seq["micro_batch_size"])
    )
    # a new stage may have another world size; an elastic one keeps what is not given
    if not (new_stage or elastic) or "stoker.dp-world-size" not in given:
        implied["stoker.dp-world-size"] = str(first["world_size"])
    if not new_stage:
        if not elastic or "stoker.micro-batch-size" not in given:
            implied["stoker.micro-batch-size"] = str(seq["micro_batch_size"])
        implied["stoker.epochs"] = str(seq["epochs"])
        if seq["shuffle_seed"] is None:
            implied["stoker.shuffle"] = "false"
        else:
            implied["stoker.shuffle.seed"] = str(seq["shuffle_seed"])
        if seq["model_preset"] is not None:
            implied["stoker.model.preset"] = seq["model_preset"]
        if seq["packing_max_tokens"] is not None:
            implied["stoker.packing.enabled"] = "true"
            implied["stoker.packing.max-tokens"] = str(seq["packing_max_tokens"])
        if elastic:
            implied["stoker.mixture.start-step"] = str(first["next_step"])
            implied["stoker.mixture.start-position"] = str(next_position(first))
        else:
            if seq["mixture_start_step"] != 0:
                implied["stoker.mixture.start-step"] = str(seq["mixture_start_step"])
            if seq["mixture_start_position"] != 0:
                implied["stoker.mixture.start-position"] = str(seq["mixture_start_position"])
    if "stoker.resume-step" in given:
        raise DataStateError(
            "leave --stoker.resume-step out of the options: it comes from the data state"
        )
    if (
        not new_stage
        and seq["packing_max_tokens"] is None
        and given.get("stoker.packing.enabled", "false").strip().lower() != "false"
    ):
        raise DataStateError(
            f"--stoker.packing.enabled {given['stoker.packing.enabled']} contradicts the data "
            "state, which was trained on unpacked batches"
        )
    extra = []
    for key, value in implied.items():
        if key in given:
            if given[key].strip().lower() != value.lower():
                raise DataStateError(
                    f"--{key} {given[key]} contradicts the data state, which was trained on "
                    f"{key} {value}"
                )
        else:
            extra += [f"--{key}", value]
    return [
        flink,
        "run",
        *([] if new_stage or elastic else ["-s", savepoint]),
        jar,
        *options,
        *extra,
        "--stoker.resume-step",
        str(first["next_step"] - 1),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m stoker.resume",
        description="Print the flink run command that resumes a Stoker job at a trainer "
        "checkpoint's data state (StokerDataset.state_dict()).",
    )
    ap.add_argument(
        "checkpoints",
        nargs="+",
        type=Path,
        help="JSON or torch.save checkpoint files, or torch distributed checkpoint folders",
    )
    ap.add_argument("--savepoint", required=True, help="the job's savepoint path (flink run -s)")
    ap.add_argument("--jar", default="job/target/stoker-job.jar", help="the job jar")
    ap.add_argument("--flink", default="flink", help="the flink CLI to name")
    ap.add_argument(
        "--key", default=None, help="dot-separated path of the data state in the checkpoint"
    )
    ap.epilog = "Options after -- are the job's other --key value options (dataset, tokenizer...)."
    argv = sys.argv[1:] if argv is None else list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    options = argv[cut + 1 :]
    escape_unencodable_stdout()
    try:
        states = []
        for path in args.checkpoints:
            states += find_states(_load(path), args.key)
        cmd = resume_command(
            states, args.savepoint, jar=args.jar, options=options, flink=args.flink
        )
    except (OSError, DataStateError) as e:
        print(f"error: {printable(e)}", file=sys.stderr)
        return 2
    line = shlex.join(cmd)
    if not line.isprintable():
        print(
            "note: the command holds characters a terminal cannot show, printed escaped "
            "(\\xNN, \\uNNNN; a backslash as \\\\): retype them before running it",
            file=sys.stderr,
        )
        line = printable(line)
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
