"""The batch protocol's files, as the trainer side reads and writes them (``docs/batch-protocol.md``).

The Flink job and the trainer talk only through files in the job directory::

    <job dir>/manifest.json                         the job writes: names the current generation
    <job dir>/reader-<r>.lock                       this side: held (flock) by rank r's reader
    <job dir>/gen-<generation>/rank-<r>/
        step-<s:010d>.arrow                         the job writes: batch (step s, rank r)
        ack.json                                    this side writes: the last step consumed

This module holds that contract's trainer-side half: the file names, the fields of
``manifest.json`` (:class:`Manifest`, with the job's vision settings, :class:`VisionSettings`) and
of ``ack.json`` (:func:`ack_content`, :func:`write_ack_and_unlink`), and the errors a reader
raises when the job's files break the contract (:class:`BatchFormatError`) or the job will not
produce the step the trainer needs (:class:`ResumeError`). Every name is defined once, in
``schema/batch-schema.json`` (``files``, ``manifest``, ``ack``), which the Java side
(``dev.stoker.connectors.protocol``) and ``tests/unit/test_schema_sync.py`` check these against.
Writes are atomic (temporary file, then ``rename``), so a reader or the job never sees half a file.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ACK_FIELDS",
    "ACK_FILE",
    "FORMAT_VERSION",
    "MANIFEST_FIELDS",
    "MANIFEST_FILE",
    "BatchFormatError",
    "Manifest",
    "RankInUseError",
    "ResumeError",
    "VisionSettings",
    "ack_content",
    "batch_file_name",
    "generation_dir_name",
    "rank_dir_name",
    "read_consumed_step",
    "reader_lock_name",
    "unlink_steps_below",
    "write_ack_and_unlink",
    "write_json_atomic",
]

#: Batch protocol version of ``manifest.json`` and the ``stoker.format_version`` metadata.
FORMAT_VERSION = 4

#: The job directory's manifest, naming the current generation.
MANIFEST_FILE = "manifest.json"
#: A rank directory's acknowledgement, written by the reader.
ACK_FILE = "ack.json"

#: Fields of ``manifest.json``, in the order the job writes them.
MANIFEST_FIELDS: tuple[str, ...] = (
    "format_version",
    "job_name",
    "generation",
    "world_size",
    "micro_batch_size",
    "num_records",
    "epochs",
    "steps_per_epoch",
    "num_steps",
    "first_step",
    "shuffle_seed",
    "patch_dim",
    "dataset_fingerprint",
    "model_preset",
    "patch_size",
    "temporal_patch_size",
    "merge_size",
    "rescale_factor",
    "image_mean",
    "image_std",
    "packing_max_tokens",
    "mixture_start_step",
    "mixture_start_position",
    "plan_history",
)

#: The manifest fields that make up :class:`VisionSettings`.
VISION_FIELDS: tuple[str, ...] = (
    "patch_size",
    "temporal_patch_size",
    "merge_size",
    "rescale_factor",
    "image_mean",
    "image_std",
)

#: Fields of ``ack.json``, in the order the reader writes them.
ACK_FIELDS: tuple[str, ...] = ("consumed_step", "data_wait_s", "elapsed_s", "wait_time_ratio")

GENERATION_RE = re.compile(r"[A-Za-z0-9_-]+\Z")
#: A published batch file; group 1 is the step.
BATCH_FILE_RE = re.compile(r"step-(\d{10})\.arrow\Z")


def generation_dir_name(generation: str) -> str:
    """``gen-<generation>``, the directory of one submission of the job."""
    return f"gen-{generation}"


def rank_dir_name(rank: int) -> str:
    """``rank-<rank>``, a DP rank's directory inside its generation's."""
    return f"rank-{rank}"


def reader_lock_name(rank: int) -> str:
    """``reader-<rank>.lock``, in the job directory: the file the reader of ``rank`` holds an
    exclusive ``flock`` on while it reads, so that a second reader of the rank on the node fails
    instead of taking its batches (:class:`RankInUseError`)."""
    return f"reader-{rank}.lock"


def batch_file_name(step: int) -> str:
    """``step-<step:010d>.arrow``, the published batch of ``step``."""
    return f"step-{step:010d}.arrow"


class BatchFormatError(ValueError):
    """A batch file or the manifest does not follow the protocol/schema; the message names the file."""


class RankInUseError(RuntimeError):
    """Another reader (another process, or an open reader of this one) holds the rank's reader
    lock (:func:`reader_lock_name`) in the job directory.

    Two readers of one rank would each take, acknowledge and unlink some of the rank's batch
    files, so each would miss steps (and wait forever for one the other took). The message names
    the lock file and the process that took it (its pid, and whether it still runs). The usual
    cause is a trainer process of an earlier run still alive: stop it, or close the other reader.
    """


class ResumeError(ValueError):
    """The job's current generation will not produce the step this reader needs next.

    Raised when the requested start step lies before the generation's ``first_step``, when a new
    generation starts after the reader's next step, or when the rank's ``ack.json`` says the
    step was already consumed (so the job will not write it again). The message names both steps
    and the fix: resubmit the job from its savepoint with ``--stoker.resume-step <step - 1>``.
    """


def resume_fix(next_step: int) -> str:
    """The fix a :class:`ResumeError` names for a reader that needs ``next_step`` next."""
    return (
        f"resubmit the job (from its savepoint) with --stoker.resume-step {next_step - 1} "
        f"so that it produces step {next_step} onwards, or restart the trainer from a checkpoint "
        "that matches the job"
    )


@dataclass(frozen=True)
class VisionSettings:
    """The vision settings the job made ``pixel_values`` with (from the manifest).

    What :mod:`stoker.images` needs to turn patches back into pictures. The values are the job's
    (its ``stoker.model.preset``, or what the job overrode), not a table of this package.

    Attributes:
        patch_size: side of a patch in pixels (14 for Qwen2/2.5-VL, 16 for Qwen3-VL).
        temporal_patch_size: frames per patch (2).
        merge_size: side of the block of patches merged into one token (2).
        rescale_factor: what the uint8 samples are multiplied by (in float64) before the
            normalisation, 1/255.
        image_mean, image_std: per-channel (R, G, B) normalisation on the 0..1 scale.
    """

    patch_size: int
    temporal_patch_size: int
    merge_size: int
    rescale_factor: float
    image_mean: tuple[float, ...]
    image_std: tuple[float, ...]

    @property
    def patch_dim(self) -> int:
        """``D = channels * temporal_patch_size * patch_size**2`` (channels: one per mean value)."""
        return len(self.image_mean) * self.temporal_patch_size * self.patch_size**2


def _optional_str(raw: dict[str, Any], key: str) -> str | None:
    v = raw.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise TypeError(f"{key} must be a string, got {v!r}")
    return v


def _optional_positive_int(raw: dict[str, Any], key: str) -> int | None:
    v = raw.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{key} must be a positive integer or null, got {v!r}")
    return v


def _positive_int(raw: dict[str, Any], key: str) -> int:
    v = raw[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{key} must be a positive integer, got {v!r}")
    return v


def _positive_number(raw: dict[str, Any], key: str) -> float:
    v = raw[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < math.inf:
        raise ValueError(f"{key} must be a positive number, got {v!r}")
    return float(v)


def _channels(raw: dict[str, Any], key: str) -> tuple[float, ...]:
    v = raw[key]
    if (
        not isinstance(v, list)
        or len(v) != 3
        or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in v)
    ):
        raise ValueError(f"{key} must be 3 numbers (R, G, B), got {v!r}")
    return tuple(float(x) for x in v)


def _vision(raw: dict[str, Any], path: Path) -> VisionSettings:
    missing = [k for k in VISION_FIELDS if k not in raw]
    if missing:
        raise BatchFormatError(
            f"{path}: manifest lacks {', '.join(missing)}, the vision settings the job writes; "
            "the job and the reader come from different releases (they ship together)"
        )
    vision = VisionSettings(
        patch_size=_positive_int(raw, "patch_size"),
        temporal_patch_size=_positive_int(raw, "temporal_patch_size"),
        merge_size=_positive_int(raw, "merge_size"),
        rescale_factor=_positive_number(raw, "rescale_factor"),
        image_mean=_channels(raw, "image_mean"),
        image_std=_channels(raw, "image_std"),
    )
    if min(vision.image_std) <= 0:
        raise ValueError(f"image_std must be positive, got {list(vision.image_std)}")
    return vision


@dataclass(frozen=True)
class Manifest:
    """Job-level facts from ``manifest.json`` (format_version 4).

    Attributes:
        format_version: protocol version, 4.
        job_name: the Flink job's name.
        generation: stamp of the current submission; batches are in ``gen-<generation>/``.
        world_size: DP ranks W.
        micro_batch_size: rows per batch B.
        num_records: records per epoch N.
        epochs: passes over the dataset.
        steps_per_epoch: ``ceil(N / (W*B))``.
        num_steps: steps of the whole run (``mixture_start_step + epochs * steps_per_epoch``,
            fewer for a stage from ``mixture_start_position > 0``); steps count on across epochs
            and stages, so every rank's steps are ``0 .. num_steps - 1``.
        first_step: first step this generation produces (the job's resume step + 1).
        shuffle_seed: seed of the per-epoch shuffle, or ``None`` when the order is not shuffled.
        patch_dim: D, values per ``pixel_values`` row, or ``None`` if absent.
        vision: the patch geometry and normalisation of ``pixel_values``.
        dataset_fingerprint: ``"sha256:<hex>"`` of the mixture: its spec and each source's
            listing (files, sizes, where each record starts), or ``None`` if absent.
        model_preset: the job's ``stoker.model.preset`` (e.g. ``"qwen2-vl"``), or ``None`` if
            absent.
        packing_max_tokens: T, the tokens per packed row of every batch (the job's
            ``stoker.packing.max-tokens`` with ``stoker.packing.enabled``), or ``None`` when the
            batches are not packed (``null``, or absent: a job of a release before packing).
        mixture_start_step: the step this stage's mixture starts at (``stoker.mixture.start-step``;
            its epochs count from there), 0 for the run's first mixture (and when absent).
        mixture_start_position: Q, the records of the mixture's sample order (numbered across
            epochs, ``epoch * num_records + position``) that came before ``mixture_start_step``
            (``stoker.mixture.start-position``): 0 for a new mixture (and when absent); for a
            stage that changed ``world_size`` or ``micro_batch_size`` at a resume, the records the
            trainer had consumed.
        plan_history: the run's stages so far, oldest first, this one last: each a dict of
            ``mixture`` (the stage's spec or dataset path, or ``None``) and the sequence fields
            (:data:`stoker.data_state.SEQUENCE_FIELDS`) of that stage; empty when absent.
        raw: the parsed JSON object.
    """

    format_version: int
    job_name: str
    generation: str
    world_size: int
    micro_batch_size: int
    num_records: int
    epochs: int
    steps_per_epoch: int
    num_steps: int
    first_step: int
    shuffle_seed: int | None
    patch_dim: int | None
    vision: VisionSettings
    dataset_fingerprint: str | None = None
    model_preset: str | None = None
    packing_max_tokens: int | None = None
    mixture_start_step: int = 0
    mixture_start_position: int = 0
    plan_history: tuple[dict[str, Any], ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def load(cls, path: Path) -> Manifest:
        """Parse ``manifest.json``.

        Raises:
            BatchFormatError: unreadable or not JSON, a required field missing or of the wrong
                type (the vision settings included: a manifest of an older job lacks them;
                ``packing_max_tokens`` not a positive integer or null), an
                unsupported ``format_version``, an invalid generation stamp or out-of-range
                sizes; the message names ``path``.
        """
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            version = int(raw["format_version"])
            if version != FORMAT_VERSION:
                raise BatchFormatError(
                    f"{path}: format_version {version} is not supported (expected "
                    f"{FORMAT_VERSION}); the job and the reader come from different releases"
                )
            num_steps = int(raw["num_steps"])
            seed = raw.get("shuffle_seed")
            m = cls(
                format_version=version,
                job_name=str(raw.get("job_name", "")),
                generation=str(raw["generation"]),
                world_size=int(raw["world_size"]),
                micro_batch_size=int(raw["micro_batch_size"]),
                num_records=int(raw.get("num_records", -1)),
                epochs=int(raw.get("epochs", 1)),
                steps_per_epoch=int(raw.get("steps_per_epoch", num_steps)),
                num_steps=num_steps,
                first_step=int(raw["first_step"]),
                shuffle_seed=int(seed) if seed is not None else None,
                patch_dim=int(raw["patch_dim"]) if raw.get("patch_dim") is not None else None,
                vision=_vision(raw, path),
                dataset_fingerprint=_optional_str(raw, "dataset_fingerprint"),
                model_preset=_optional_str(raw, "model_preset"),
                packing_max_tokens=_optional_positive_int(raw, "packing_max_tokens"),
                mixture_start_step=int(raw.get("mixture_start_step", 0)),
                mixture_start_position=int(raw.get("mixture_start_position", 0)),
                plan_history=_plan_history(raw),
                raw=raw,
            )
        except BatchFormatError:
            raise
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise BatchFormatError(f"{path}: invalid manifest: {e!r}") from e
        if not GENERATION_RE.match(m.generation):
            raise BatchFormatError(f"{path}: invalid generation stamp {m.generation!r}")
        if (
            m.world_size < 1
            or m.micro_batch_size < 1
            or m.num_steps < 0
            or m.first_step < 0
            or not 0 <= m.mixture_start_step <= m.first_step
            or m.mixture_start_position < 0
        ):
            raise BatchFormatError(
                f"{path}: need world_size >= 1, micro_batch_size >= 1, num_steps >= 0, "
                "first_step >= 0, 0 <= mixture_start_step <= first_step and "
                f"mixture_start_position >= 0: {raw}"
            )
        return m

    def rank_dir(self, root: Path, rank: int) -> Path:
        """``<root>/gen-<generation>/rank-<rank>``: where this generation's batches of ``rank`` are."""
        return root / generation_dir_name(self.generation) / rank_dir_name(rank)


def _plan_history(raw: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    history = raw.get("plan_history", [])
    if not isinstance(history, list) or not all(
        isinstance(stage, dict) and isinstance(stage.get("mixture_start_step"), int)
        for stage in history
    ):
        raise ValueError(f"plan_history is not a list of stages: {history!r}")
    # a stage written before stages could start part-way through the order started at position 0
    return tuple({"mixture_start_position": 0, **stage} for stage in history)


def write_json_atomic(path: Path, obj: dict[str, Any]) -> None:
    """Write ``obj`` as JSON to ``path`` (mode ``rw-------``) via ``.<name>.tmp`` and rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def ack_content(step: int, data_wait_s: float, elapsed_s: float) -> dict[str, Any]:
    """The ``ack.json`` object acknowledging ``step``, with the trainer's data-wait so far.

    ``wait_time_ratio`` is ``data_wait_s / elapsed_s`` capped at 1 (0 before any time passed);
    the job shows it per rank as the gauge ``trainerWaitTimeRatio``.
    """
    ratio = round(min(1.0, data_wait_s / elapsed_s), 6) if elapsed_s > 0 else 0.0
    return dict(
        zip(ACK_FIELDS, (step, round(data_wait_s, 6), round(elapsed_s, 6), ratio), strict=True)
    )


def read_consumed_step(ack: Path) -> int | None:
    """``consumed_step`` of an ``ack.json``, or ``None`` if missing or unreadable."""
    try:
        return int(json.loads(ack.read_text(encoding="utf-8"))["consumed_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def unlink_steps_below(rank_dir: Path, step: int) -> int:
    """Unlink the published batch files of steps ``< step`` in ``rank_dir``; returns how many.

    Only ``step-<10 digits>.arrow`` entries directly in ``rank_dir`` are touched (never
    ``.staging/`` or temporary files). A missing directory counts as empty.
    """
    removed = 0
    try:
        entries = list(os.scandir(rank_dir))
    except FileNotFoundError:
        return 0
    for entry in entries:
        m = BATCH_FILE_RE.match(entry.name)
        if m is None or int(m.group(1)) >= step:
            continue
        try:
            os.unlink(entry.path)
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def write_ack_and_unlink(rank_dir: Path, ack: dict[str, Any]) -> bool:
    """Write ``rank_dir/ack.json`` and unlink the files of steps up to the acked one (the
    acked step's, and any of an earlier step the sink published while it learnt of a skip:
    start step or generation switch). Returns ``False``, doing nothing, when ``rank_dir`` is gone
    (a new generation replaced it, and following it acks there)."""
    try:
        write_json_atomic(rank_dir / ACK_FILE, ack)
    except FileNotFoundError:
        return False
    unlink_steps_below(rank_dir, int(ack["consumed_step"]) + 1)
    return True
