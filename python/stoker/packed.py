"""The checks of a packed batch (metadata ``stoker.packing_max_tokens`` present): each row's
sample list, ``cu_seqlens``, ``position_ids``, the attention mask and the labels against each
other, as batch-schema.json defines them; and what the reader derives from them (the samples'
spans, the rows' offsets). A batch that breaks them raises
:class:`~stoker.protocol.BatchFormatError` naming the file, the row and what differs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from .arrow_columns import fixed_rows, list_values
from .protocol import BatchFormatError
from .schema import PACKING_MAX_TOKENS_KEY, POSITION_AXES

__all__ = ["Packing", "check_packed"]


@dataclass
class Packing:
    """What :func:`check_packed` derives from a packed batch's columns."""

    position_rows: np.ndarray  # (R, 4L) view, as stored
    position_ids: np.ndarray  # (4, R, L) view of it
    cu_seqlens: np.ndarray  # (N+1,) int32, new
    row_offsets: np.ndarray  # (R+1,) int64
    sample_spans: np.ndarray  # (S, 3) int64


def check_packed(
    path: Path,
    cols: dict[str, pa.Array],
    input_ids: np.ndarray,
    labels: np.ndarray,
    attention_mask: np.ndarray,
    row_offsets: np.ndarray,
    max_tokens: int,
    pad_token_id: int | None,
) -> Packing:
    """Check a packed batch's rows, sample lists, ``cu_seqlens`` and ``position_ids`` against
    each other (docs/batch-protocol.md, "Packed batches") and derive the reader's arrays."""
    rows, seq_len = input_ids.shape
    counts = np.diff(row_offsets)
    if rows and counts.min() < 1:
        r = int(np.argmin(counts))
        raise BatchFormatError(f"{path}: row {r} of the packed batch lists no sample")
    if seq_len > max_tokens:
        raise BatchFormatError(
            f"{path}: rows of L={seq_len} tokens, more than {PACKING_MAX_TOKENS_KEY}={max_tokens}"
        )

    pos_col = cols["position_ids"]
    if len(pos_col) != rows:
        raise BatchFormatError(f"{path}: column 'position_ids' has {len(pos_col)} rows, not {rows}")
    per_row = fixed_rows(pos_col, path, "position_ids", "int64")  # (R, 4L)
    if per_row.shape[1] != POSITION_AXES * seq_len:
        raise BatchFormatError(
            f"{path}: column 'position_ids' has {per_row.shape[1]} values per row, not "
            f"{POSITION_AXES} * L = {POSITION_AXES * seq_len}"
        )
    position_ids = per_row.reshape(rows, POSITION_AXES, seq_len).transpose(1, 0, 2)

    cu_col = cols["cu_seqlens"]
    if len(cu_col) != rows:
        raise BatchFormatError(f"{path}: column 'cu_seqlens' has {len(cu_col)} rows, not {rows}")
    cu, cu_offsets = list_values(cu_col, path, "cu_seqlens", "int32")
    cu_counts = np.diff(cu_offsets)
    tails = cu_counts - 1 - counts  # 1 where the row has a padding tail, else 0
    bad = np.flatnonzero((tails < 0) | (tails > 1))
    if bad.size:
        r = int(bad[0])
        raise BatchFormatError(
            f"{path}: row {r}'s cu_seqlens has {int(cu_counts[r])} boundaries for its "
            f"{int(counts[r])} samples (expected {int(counts[r]) + 1}, or one more for a "
            "padding tail)"
        )
    if rows:
        starts, ends = cu_offsets[:-1], cu_offsets[1:] - 1
        if np.any(cu[starts] != 0) or np.any(cu[ends] != seq_len):
            r = int(np.flatnonzero((cu[starts] != 0) | (cu[ends] != seq_len))[0])
            raise BatchFormatError(
                f"{path}: row {r}'s cu_seqlens {cu[starts[r] : ends[r] + 1].tolist()} does not "
                f"run from 0 to L={seq_len}"
            )
        within = np.ones(cu.size - 1, dtype=bool)
        within[ends[:-1]] = False  # a row's last boundary and the next row's 0
        steps = np.diff(cu.astype(np.int64))
        if np.any(within & (steps <= 0)):
            k = int(np.flatnonzero(within & (steps <= 0))[0])
            r = int(np.searchsorted(cu_offsets, k, side="right") - 1)
            raise BatchFormatError(
                f"{path}: row {r}'s cu_seqlens {cu[starts[r] : ends[r] + 1].tolist()} is not "
                "strictly increasing"
            )

    # each sample's (row, start, end); a row's tokens end where its last sample ends
    sample_rows = np.repeat(np.arange(rows, dtype=np.int64), counts)
    local = np.arange(sample_rows.size, dtype=np.int64) - row_offsets[sample_rows]
    at = cu_offsets[sample_rows] + local
    spans = np.stack([sample_rows, cu[at].astype(np.int64), cu[at + 1].astype(np.int64)], 1)
    real_end = np.zeros(rows, dtype=np.int64)
    if rows:
        real_end = cu[cu_offsets[1:] - 1 - tails].astype(np.int64)
        if int(real_end.max()) != seq_len:
            raise BatchFormatError(
                f"{path}: the longest packed row holds {int(real_end.max())} tokens, but L is "
                f"{seq_len} (rows are padded to the longest)"
            )
    t = np.arange(seq_len, dtype=np.int64)[None, :]
    tail = t >= real_end[:, None]  # (R, L)
    if not np.array_equal(attention_mask, (~tail).astype(np.int64)):
        r = int(np.flatnonzero((attention_mask != (~tail)).any(axis=1))[0])
        raise BatchFormatError(
            f"{path}: row {r}'s attention_mask is not 1 on its {int(real_end[r])} sample "
            "tokens and 0 on the padding"
        )
    first = np.zeros((rows, seq_len), dtype=bool)
    first[spans[:, 0], spans[:, 1]] = True
    if np.any(labels[first | tail] != -100):
        r = int(np.flatnonzero(((labels != -100) & (first | tail)).any(axis=1))[0])
        raise BatchFormatError(
            f"{path}: row {r}'s labels are not -100 on every sample's first token and on the "
            "padding (a shifted loss would train across a sample boundary)"
        )
    if pad_token_id is not None and np.any(input_ids[tail] != pad_token_id):
        raise BatchFormatError(f"{path}: packed rows are not padded with pad token {pad_token_id}")

    # text positions restart at 0 at every boundary (the models build the mask from them)
    flat_starts = cu.astype(np.int64) + np.repeat(
        np.arange(rows, dtype=np.int64) * seq_len, cu_counts
    )
    keep = np.ones(flat_starts.size, dtype=bool)
    if rows:
        keep[cu_offsets[1:-1]] = False  # row r+1's 0 is row r's L
    flat_cu = flat_starts[keep]
    lengths = np.diff(flat_cu)
    expected = np.arange(rows * seq_len, dtype=np.int64) - np.repeat(flat_cu[:-1], lengths)
    text = position_ids[0].reshape(-1)
    if not np.array_equal(text, expected):
        k = int(np.flatnonzero(text != expected)[0])
        raise BatchFormatError(
            f"{path}: position_ids' text axis at row {k // seq_len}, token {k % seq_len} is "
            f"{int(text[k])}, not {int(expected[k])}: it must count 0 .. n-1 within each "
            "cu_seqlens sub-sequence"
        )
    tail_pos = (t - real_end[:, None])[tail]
    for axis in range(1, POSITION_AXES):
        if not np.array_equal(position_ids[axis][tail], tail_pos):
            raise BatchFormatError(
                f"{path}: position_ids' axis {axis} does not count 0 .. on the padding tail"
            )
    cu_flat = flat_cu.astype(np.int32) if rows else np.zeros(1, dtype=np.int32)
    for a in (cu_flat, spans):
        a.setflags(write=False)
    return Packing(per_row, position_ids, cu_flat, row_offsets, spans)
