"""A trainer's checkpointed data position, and its checks against the job (no torch needed).

The state is what :meth:`stoker.torch.StokerDataset.state_dict` returns and a trainer saves in
its own checkpoint (``torch.save`` or JSON; only ``str``, ``int``, ``None`` and ``dict`` values,
so ``torch.load(..., weights_only=True)`` reads it back)::

    {
        "format": "stoker.data-state/1",
        "next_step": 10,          # the step the trainer reads next: it trained on 0 .. 9
        "rank": 0,                # the DP rank whose batches these are
        "world_size": 2,          # DP ranks W
        "job_name": "sft-run-7",
        "generation": "20260115-101500-3f2a1c",   # the generation the last batch came from
        "sequence": {             # what fixes which record lands in which (step, rank, slot)
            "dataset_fingerprint": "sha256:…", "num_records": 48, "shuffle_seed": 0,
            "world_size": 2, "micro_batch_size": 4, "epochs": 1, "model_preset": "qwen2-vl",
            "packing_max_tokens": None,   # or the job's stoker.packing.max-tokens when packed
            "mixture_start_step": 0,      # the step the stage's mixture starts at
            "mixture_start_position": 0,  # records of the mixture's order before that step
        },
    }

The job is resumed for it with ``--stoker.resume-step <next_step - 1>`` (``python -m
stoker.resume`` prints the command line). :func:`check_restore` compares a state with the
job's current manifest. A state saved by a release before packing has no
``packing_max_tokens`` in its sequence, one before stages no ``mixture_start_step``, and one
before elastic resumes no ``mixture_start_position``; :func:`validate_state` reads them as
``None`` (those releases did not pack), 0 and 0.

A new stage of the run (the next curriculum stage's mixture, ``--stoker.mixture.start-step S``)
changes the sequence at step S: a state from the previous stage is accepted by a job whose
``mixture_start_step`` is exactly its ``next_step`` (and, when the manifest's ``plan_history``
names the previous stage, whose previous stage is the state's sequence); the state saved
afterwards has the new stage's sequence.

A resume with another data-parallel world size or micro-batch size is such a stage too: the job
starts it at the state's ``next_step`` with ``mixture_start_position`` = :func:`next_position`
(the records of the mixture's order the trainer consumed), so the run goes on at the next record
nobody trained on, in the planned order. At such a boundary any rank's state restores any rank of
the new world size (all ranks' states of one checkpoint hold the same position).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .protocol import Manifest

__all__ = [
    "SEQUENCE_FIELDS",
    "STATE_FORMAT",
    "DataStateError",
    "as_rank",
    "check_restore",
    "check_sequence",
    "find_states",
    "make_state",
    "next_position",
    "sequence_of",
    "validate_state",
]

#: Value of the state's ``"format"`` key.
STATE_FORMAT = "stoker.data-state/1"

#: Manifest fields that, together, fix the batch sequence: the record of every (step, rank, slot)
#: is a function of them (docs/batch-protocol.md, "Row and slot order"; the preset fixes how
#: each record is preprocessed; ``packing_max_tokens`` whether and how a step's samples are
#: spread over the ranks and packed into rows, "Packed batches").
SEQUENCE_FIELDS = (
    "dataset_fingerprint",
    "num_records",
    "shuffle_seed",
    "world_size",
    "micro_batch_size",
    "epochs",
    "model_preset",
    "packing_max_tokens",
    "mixture_start_step",
    "mixture_start_position",
)

#: Sequence fields added after the first release, with the value a state saved before lacks them
#: stands for (it was unpacked, and its mixture started at step 0 from the order's first record).
_ADDED_FIELDS = {"packing_max_tokens": None, "mixture_start_step": 0, "mixture_start_position": 0}

_KEYS = {"format", "next_step", "rank", "world_size", "job_name", "generation", "sequence"}


class DataStateError(ValueError):
    """A trainer's data state does not fit the job (or is not a data state).

    The message names the field and both values (the checkpoint's and the job's) and, for a job
    resumed at another step, the ``--stoker.resume-step`` to resubmit it with.
    """


def sequence_of(manifest: Manifest) -> dict[str, Any]:
    """The :data:`SEQUENCE_FIELDS` of ``manifest`` (``None`` for a field it lacks)."""
    return {name: getattr(manifest, name) for name in SEQUENCE_FIELDS}


def make_state(manifest: Manifest, rank: int, next_step: int, generation: str) -> dict[str, Any]:
    """The state of rank ``rank`` about to read ``next_step`` of ``manifest``'s job."""
    return {
        "format": STATE_FORMAT,
        "next_step": int(next_step),
        "rank": int(rank),
        "world_size": int(manifest.world_size),
        "job_name": manifest.job_name,
        "generation": generation,
        "sequence": sequence_of(manifest),
    }


def validate_state(state: object) -> dict[str, Any]:
    """``state`` if it is a well-formed data state (a copy; a sequence without
    ``packing_max_tokens``, saved before packing existed, gets ``None``).

    Raises:
        DataStateError: not a mapping, another ``format``, missing or extra keys, or values of
            the wrong type.
    """
    if not isinstance(state, Mapping):
        raise DataStateError(f"a data state is a dict, got {type(state).__name__}")
    if state.get("format") != STATE_FORMAT:
        raise DataStateError(
            f"data state format {state.get('format')!r} is not {STATE_FORMAT!r} (not a Stoker "
            "data state, or one of another release)"
        )
    if set(state) != _KEYS:
        raise DataStateError(
            f"data state keys {sorted(state)} are not {sorted(_KEYS)} (a corrupt checkpoint?)"
        )
    for key in ("next_step", "rank", "world_size"):
        v = state[key]
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise DataStateError(f"data state {key}={v!r} is not an integer >= 0")
    for key in ("job_name", "generation"):
        if not isinstance(state[key], str):
            raise DataStateError(f"data state {key}={state[key]!r} is not a string")
    seq = state["sequence"]
    if isinstance(seq, Mapping) and set(SEQUENCE_FIELDS) - set(_ADDED_FIELDS) <= set(seq):
        seq = {**_ADDED_FIELDS, **seq}
    if not isinstance(seq, Mapping) or set(seq) != set(SEQUENCE_FIELDS):
        raise DataStateError(
            f"data state sequence {seq!r} does not hold exactly the fields {list(SEQUENCE_FIELDS)}"
        )
    packing = seq["packing_max_tokens"]
    if packing is not None and (isinstance(packing, bool) or not isinstance(packing, int)):
        raise DataStateError(f"data state packing_max_tokens={packing!r} is not an int or None")
    for key in ("mixture_start_step", "mixture_start_position"):
        v = seq[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise DataStateError(f"data state {key}={v!r} is not an integer >= 0")
    return {**state, "sequence": dict(seq)}


def as_rank(state: Mapping[str, Any], rank: int) -> dict[str, Any]:
    """Another DP rank's data state of the same trainer checkpoint, as rank ``rank``'s: ``state``
    with its ``rank`` replaced.

    For trainers whose ranks all checkpoint after the same step (torchtitan, Megatron-LM), the
    states one checkpoint holds differ only in ``rank`` (the ``generation`` too, in the rare case
    that the job was resubmitted while the ranks read that step; :func:`check_restore` then
    names the ``--stoker.resume-step`` to resubmit it with), so one rank's state restores each.

    Raises:
        DataStateError: ``rank`` is outside the state's world size (at another world size,
            :func:`check_restore` takes any rank's state as it is).
    """
    if not 0 <= rank < state["world_size"]:
        raise DataStateError(
            f"rank {rank} is outside the data state's world size {state['world_size']}"
        )
    return {**state, "rank": int(rank)}


def next_position(state: Mapping[str, Any]) -> int:
    """The records of the mixture's sample order a trainer with ``state`` has consumed (numbered
    across epochs, ``epoch * num_records + position``): the stage's ``mixture_start_position``
    plus the records (not padding slots) of its steps ``mixture_start_step .. next_step - 1``.

    The plan's arithmetic (docs/batch-protocol.md, "Row and slot order"; ``BatchPlan.positionAt``
    in the Java operators module is the definition): the stage's first epoch ``e0 = Q // N`` from
    position ``Q % N`` fills ``ceil((N - Q % N) / (W*B))`` steps, every later one
    ``ceil(N / (W*B))``, the last step of each padded.
    """
    seq = state["sequence"]
    n, epochs = seq["num_records"], seq["epochs"]
    per_step = seq["world_size"] * seq["micro_batch_size"]
    q = seq["mixture_start_position"]
    slots = max(0, state["next_step"] - seq["mixture_start_step"]) * per_step
    if n == 0 or q >= epochs * n:
        return q
    head = n - q % n  # records left in the first epoch
    head_slots = -(-head // per_step) * per_step
    if slots <= head_slots:
        return q + min(slots, head)
    full, rest = divmod(slots - head_slots, -(-n // per_step) * per_step)
    return min(epochs * n, q + head + full * n + min(rest, n))


def check_sequence(state: Mapping[str, Any], manifest: Manifest, where: str) -> None:
    """Raise when ``manifest`` (read from ``where``) is another job or batch sequence than
    ``state``'s, unless it is the next stage of the run starting exactly at the state's
    ``next_step``.

    A manifest whose ``mixture_start_step`` is the state's ``next_step`` (above 0) starts a new
    stage there: its sequence may differ, but when its ``plan_history`` names the stage before,
    that stage's sequence must be the state's.

    Raises:
        DataStateError: another ``job_name``, or any :data:`SEQUENCE_FIELDS` differs outside a
            stage change; the message lists each difference with the checkpoint's and the job's
            value.
    """
    if state["job_name"] != manifest.job_name:
        raise DataStateError(
            f"the trainer's data state does not match the job ({where}): job_name: checkpoint "
            f"{state['job_name']!r}, job {manifest.job_name!r}. Resubmit the job with the "
            "checkpoint's job name, or start the trainer without this data state"
        )
    seq = state["sequence"]
    diffs = _diffs(seq, sequence_of(manifest))
    if not diffs:
        return
    start = manifest.mixture_start_step
    if start > 0 and start == state.get("next_step"):
        position = manifest.mixture_start_position
        if position != 0 and position != next_position(state):
            raise DataStateError(
                f"the job ({where}) starts a stage at step {start} from record {position} of the "
                f"mixture's order, but the trainer's data state has consumed "
                f"{next_position(state)}: resubmit the job with --stoker.mixture.start-position "
                f"{next_position(state)} (python -m stoker.resume prints the command line)"
            )
        earlier = [h for h in manifest.plan_history if h["mixture_start_step"] < start]
        if not earlier:
            return  # the job did not know the previous stage (a new job directory)
        before = _diffs(seq, {name: earlier[-1].get(name) for name in SEQUENCE_FIELDS})
        if not before:
            return
        raise DataStateError(
            f"the job ({where}) starts a new stage at step {start} after the stage of mixture "
            f"{earlier[-1].get('mixture')!r}, but the trainer's data state is of another "
            "sequence: " + "; ".join(before) + ". Resubmit the previous stage's job up to step "
            f"{start - 1} first, or start the trainer without this data state"
        )
    raise DataStateError(
        f"the trainer's data state does not match the job ({where}): "
        + "; ".join(diffs)
        + ". The job's batches would not continue the sequence the trainer was trained on: "
        "resubmit the job with the options of the checkpoint's run, or start the trainer "
        "without this data state" + _stage_hint(state.get("next_step"), start)
    )


def _stage_hint(next_step: int | None, start: int) -> str:
    if next_step is None or next_step == 0 or next_step == start:
        return ""
    return (
        f"; to change the mixture at the checkpoint's step, resubmit the job with its new spec, "
        f"--stoker.mixture.start-step {next_step} and --stoker.resume-step {next_step - 1}"
    )


def _diffs(state_sequence: Mapping[str, Any], job_sequence: Mapping[str, Any]) -> list[str]:
    return [
        f"{name}: checkpoint {state_sequence[name]!r}, job {job_sequence[name]!r}"
        for name in SEQUENCE_FIELDS
        if state_sequence[name] != job_sequence[name]
    ]


def check_restore(
    state: Mapping[str, Any], manifest: Manifest, rank: int, world_size: int, where: str
) -> None:
    """Check that ``manifest`` (read from ``where``) continues ``state`` for DP rank ``rank`` of
    ``world_size``.

    The rank and world size must be the state's, except where the job starts a new stage at the
    state's ``next_step`` (another world size or micro-batch size at a resume, or a new mixture):
    there any rank's state restores any rank of the job's world size. The job and sequence as in
    :func:`check_sequence` (a new stage starting at the state's ``next_step`` continues it). A job
    resubmitted since (another generation than the state's) must
    start exactly at the state's ``next_step`` (``first_step == next_step``); in the state's own
    generation (only the trainer restarted) ``first_step <= next_step`` (the reader then checks
    the rank's ``ack.json``).

    Raises:
        DataStateError: naming the field, the checkpoint's and the job's value, and for a step
            mismatch the ``--stoker.resume-step`` to resubmit the job with.
    """
    new_stage = 0 < manifest.mixture_start_step == state["next_step"]
    if new_stage and world_size != manifest.world_size:
        raise DataStateError(
            f"world_size: job {manifest.world_size} ({where}), this trainer {world_size}: start "
            "as many DP ranks as the job was resubmitted for"
        )
    if state["rank"] != rank and not new_stage:
        raise DataStateError(
            f"the data state is DP rank {state['rank']}'s, but this trainer is rank {rank}: "
            "restore each rank from its own data state"
        )
    if state["world_size"] != world_size and not new_stage:
        raise DataStateError(
            f"world_size: checkpoint {state['world_size']}, this trainer {world_size}: the "
            "data state was saved by a run with another number of DP ranks. To go on with "
            f"{world_size} ranks, resubmit the job with --stoker.dp-world-size {world_size} "
            "(python -m stoker.resume CKPT --savepoint P -- --stoker.dp-world-size "
            f"{world_size} <options> prints the command line): it continues the epoch at the "
            "next record the trainer has not consumed"
        )
    check_sequence(state, manifest, where)
    step = state["next_step"]
    fix = (
        f"resubmit the job from its savepoint with --stoker.resume-step {step - 1} "
        "(python -m stoker.resume prints the command line)"
    )
    if manifest.generation != state["generation"] and manifest.first_step != step:
        raise DataStateError(
            f"step: the checkpoint continues at step {step}, but the job (generation "
            f"{manifest.generation}, {where}) was resumed to produce steps from first_step "
            f"{manifest.first_step} (--stoker.resume-step {manifest.first_step - 1}); {fix}"
        )
    if manifest.first_step > step:
        raise DataStateError(
            f"step: the checkpoint continues at step {step}, but the job (generation "
            f"{manifest.generation}, {where}) produces steps from first_step "
            f"{manifest.first_step}; {fix}"
        )
    if step > manifest.num_steps:
        raise DataStateError(
            f"step: the checkpoint continues at step {step}, but the job's run has only "
            f"{manifest.num_steps} steps ({where})"
        )


def find_states(obj: object, key: str | None = None) -> list[dict[str, Any]]:
    """The data states inside a loaded trainer checkpoint ``obj``.

    With ``key`` (dot-separated, e.g. ``"data"`` or ``"loader._snapshot.dataset_state"``) the
    value at that path, which must be a data state (or a list of them, one per rank); without,
    every dict with ``"format": STATE_FORMAT`` found in nested dicts, lists and tuples.

    Raises:
        DataStateError: the path does not exist, or nothing in ``obj`` is a data state.
    """
    if key is not None:
        node = obj
        for part in key.split("."):
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list | tuple) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise DataStateError(f"the checkpoint has no {key!r} (no {part!r})")
        nodes = list(node) if isinstance(node, list | tuple) else [node]
        return [validate_state(n) for n in nodes]
    found = [validate_state(s) for s in _walk(obj, 0)]
    if not found:
        raise DataStateError(
            f"the checkpoint holds no dict with format {STATE_FORMAT!r}: not a checkpoint with "
            "StokerDataset.state_dict() in it (pass --key to point at it)"
        )
    return found


def _walk(obj: object, depth: int) -> Iterator[object]:
    if depth > 16:
        return
    if isinstance(obj, Mapping):
        if obj.get("format") == STATE_FORMAT:
            yield obj
            return
        for v in obj.values():
            yield from _walk(v, depth + 1)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _walk(v, depth + 1)
