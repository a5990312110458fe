"""Zero-copy numpy views of a mapped batch file's Arrow columns.

Each function takes one column (a ``pyarrow.Array`` of the file's record batch), the file's path
and the column's name (both only for errors), and returns numpy arrays that are views of the
column's buffers (no copy), after checking that the column has no nulls, non-decreasing list
offsets and buffers large enough for what its offsets claim. A column that breaks this raises
:class:`~stoker.protocol.BatchFormatError` naming the file and the column.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from .protocol import BatchFormatError

__all__ = [
    "data_buffer",
    "fixed_rows",
    "list_of_fixed",
    "list_offsets",
    "list_values",
    "strings",
    "view",
]


def data_buffer(arr: pa.Array, path: Path, col: str) -> pa.Buffer | None:
    if arr.null_count:
        raise BatchFormatError(
            f"{path}: column {col!r} holds {arr.null_count} nulls; nulls are not allowed"
        )
    return arr.buffers()[1]


def view(
    buf: pa.Buffer | None, dtype: npt.DTypeLike, start: int, count: int, path: Path, col: str
) -> np.ndarray:
    """``count`` elements of ``dtype`` starting at element ``start`` of ``buf``, without a copy."""
    dtype = np.dtype(dtype)
    if count == 0:
        a = np.empty(0, dtype=dtype)
        a.flags.writeable = False
        return a
    need = (start + count) * dtype.itemsize
    if buf is None or buf.size < need:
        have = 0 if buf is None else buf.size
        raise BatchFormatError(
            f"{path}: column {col!r} data buffer holds {have} bytes, needs {need} (truncated file?)"
        )
    return np.frombuffer(buf, dtype=dtype, count=count, offset=start * dtype.itemsize)


def fixed_rows(arr: pa.Array, path: Path, col: str, dtype: str) -> np.ndarray:
    """(B, L) view of a ``fixed_size_list<prim>[L]`` array, respecting both offsets."""
    if arr.null_count:
        raise BatchFormatError(
            f"{path}: column {col!r} holds {arr.null_count} nulls; nulls are not allowed"
        )
    width = arr.type.list_size
    child = arr.values  # ignores arr.offset; account for it explicitly
    buf = data_buffer(child, path, col)
    start = child.offset + arr.offset * width
    return view(buf, dtype, start, len(arr) * width, path, col).reshape(len(arr), width)


def list_of_fixed(arr: pa.Array, path: Path, col: str, dtype: str) -> np.ndarray:
    """(N, W) view of the items of a ``list<fixed_size_list<prim>[W]>`` array (rows concatenated)."""
    if arr.null_count:
        raise BatchFormatError(
            f"{path}: column {col!r} holds {arr.null_count} nulls; nulls are not allowed"
        )
    width = arr.type.value_type.list_size
    if len(arr) == 0:
        first = last = 0
    else:
        offsets = arr.offsets  # accounts for arr.offset; length B + 1, zero-copy int32 view
        first, last = offsets[0].as_py(), offsets[len(arr)].as_py()
        if last < first:
            raise BatchFormatError(f"{path}: column {col!r} has decreasing list offsets")
    inner = arr.values  # fixed_size_list array, ignores arr.offset (offsets already include it)
    if inner.null_count:
        raise BatchFormatError(f"{path}: column {col!r} holds null items; nulls are not allowed")
    leaf = inner.values
    buf = data_buffer(leaf, path, col)
    start = leaf.offset + (inner.offset + first) * width
    n = last - first
    return view(buf, dtype, start, n * width, path, col).reshape(n, width)


def list_offsets(arr: pa.Array, path: Path, col: str) -> tuple[int, np.ndarray]:
    """The first offset of a ``list<...>`` array and its ``(len+1,)`` int64 offsets relative
    to it, checked non-decreasing."""
    if arr.null_count:
        raise BatchFormatError(
            f"{path}: column {col!r} holds {arr.null_count} nulls; nulls are not allowed"
        )
    if len(arr) == 0:
        return 0, np.zeros(1, dtype=np.int64)
    raw = arr.offsets.to_numpy(zero_copy_only=False).astype(np.int64)  # accounts for arr.offset
    if np.any(np.diff(raw) < 0):
        raise BatchFormatError(f"{path}: column {col!r} has decreasing list offsets")
    return int(raw[0]), raw - raw[0]


def list_values(arr: pa.Array, path: Path, col: str, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """``(values, offsets)`` of a ``list<prim>`` array: the items of every row concatenated, a
    view of the file, and ``(len+1,)`` int64 offsets of each row's items in them."""
    first, offsets = list_offsets(arr, path, col)
    leaf = arr.values  # ignores arr.offset (the offsets include it)
    buf = data_buffer(leaf, path, col)
    values = view(buf, dtype, leaf.offset + first, int(offsets[-1]), path, col)
    return values, offsets


def strings(arr: pa.Array, path: Path, col: str) -> tuple[list[str], np.ndarray]:
    """``(items, offsets)`` of a ``list<utf8>`` array, as :func:`list_values`."""
    _, offsets = list_offsets(arr, path, col)
    items = arr.flatten()  # respects the offsets
    if items.null_count:
        raise BatchFormatError(f"{path}: column {col!r} holds null items; nulls are not allowed")
    return items.to_pylist(), offsets
