"""Expected batch columns and metadata keys, kept in sync with ``schema/batch-schema.json``.

The JSON file in the repository root is the single definition of the batch layout; this module
mirrors the part the reader needs (names, Arrow types, reader dtypes and shapes), as
:mod:`stoker.protocol` mirrors its file names and manifest/ack fields, and
``tests/unit/test_schema_sync.py`` asserts that they agree.

Arrow types are written in the JSON's notation, e.g. ``fixed_size_list<int64 not null>[L]``,
where ``L`` (padded sequence length) and ``D`` (patch dimension) are per-batch symbols, numbers
are fixed sizes and a number before a symbol multiplies it (``[4L]``: four times L).

A packed batch (metadata ``stoker.packing_max_tokens`` present) has other types for the columns
with a ``packed`` entry (:attr:`ColumnSpec.packed`) and also the ``packed_only`` columns
(``position_ids``, ``cu_seqlens``), which an unpacked batch does not have.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pyarrow as pa


@dataclass(frozen=True)
class ColumnSpec:
    """One expected column: name, Arrow type notation, reader dtype and reader shape.

    ``variants`` maps another element type a writer may choose (``stoker.pixel_dtype``) to its
    ``(arrow_type, reader_dtype)``. ``packed``: the ``(arrow_type, reader_shape)`` of the column
    in a packed batch, when it differs there. ``packed_only``: the column is in packed batches
    only.
    """

    name: str
    arrow_type: str
    nullable: bool
    reader_dtype: str
    reader_shape: tuple[str | int, ...]
    variants: dict[str, tuple[str, str]] = field(default_factory=dict)
    packed: tuple[str, tuple[str | int, ...]] | None = None
    packed_only: bool = False

    def arrow_type_in(self, packed: bool, variant: str | None = None) -> str:
        """The column's Arrow type notation in a packed or unpacked batch (``variant``: the
        ``stoker.pixel_dtype`` variant's)."""
        if variant is not None:
            return self.variants[variant][0]
        if packed and self.packed is not None:
            return self.packed[0]
        return self.arrow_type


COLUMNS: tuple[ColumnSpec, ...] = (
    ColumnSpec(
        "sample_index", "int64", False, "int64", ("B",), packed=("list<int64 not null>", ("S",))
    ),
    ColumnSpec("source", "utf8", False, "str", ("B",), packed=("list<utf8 not null>", ("S",))),
    ColumnSpec("location", "utf8", False, "str", ("B",), packed=("list<utf8 not null>", ("S",))),
    ColumnSpec("input_ids", "fixed_size_list<int64 not null>[L]", False, "int64", ("B", "L")),
    ColumnSpec("labels", "fixed_size_list<int64 not null>[L]", False, "int64", ("B", "L")),
    ColumnSpec("attention_mask", "fixed_size_list<int64 not null>[L]", False, "int64", ("B", "L")),
    ColumnSpec(
        "pixel_values",
        "list<fixed_size_list<float32 not null>[D]>",
        False,
        "float32",
        ("P", "D"),
        {
            "bfloat16": ("list<fixed_size_list<uint16 not null>[D]>", "uint16"),
            "uint8": ("list<fixed_size_list<uint8 not null>[D]>", "uint8"),
        },
    ),
    ColumnSpec(
        "image_grid_thw", "list<fixed_size_list<int64 not null>[3]>", False, "int64", ("I", 3)
    ),
    ColumnSpec(
        "pixel_values_videos",
        "list<fixed_size_list<float32 not null>[D]>",
        False,
        "float32",
        ("PV", "D"),
        {
            "bfloat16": ("list<fixed_size_list<uint16 not null>[D]>", "uint16"),
            "uint8": ("list<fixed_size_list<uint8 not null>[D]>", "uint8"),
        },
    ),
    ColumnSpec(
        "video_grid_thw", "list<fixed_size_list<int64 not null>[3]>", False, "int64", ("V", 3)
    ),
    ColumnSpec("second_per_grid_ts", "list<float32 not null>", False, "float32", ("V",)),
    ColumnSpec(
        "position_ids",
        "fixed_size_list<int64 not null>[4L]",
        False,
        "int64",
        (4, "B", "L"),
        packed_only=True,
    ),
    ColumnSpec("cu_seqlens", "list<int32 not null>", False, "int32", ("N+1",), packed_only=True),
)

COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)

#: Schema-level metadata keys written by the sink (batch-schema.json ``metadata``, in its order).
FORMAT_VERSION_KEY = "stoker.format_version"
STEP_KEY = "stoker.step"
RANK_KEY = "stoker.rank"
SLOTS_KEY = "stoker.slots"
BACKFILLED_SLOTS_KEY = "stoker.backfilled_slots"
PAD_TOKEN_ID_KEY = "stoker.pad_token_id"
IMAGE_TOKEN_ID_KEY = "stoker.image_token_id"
VIDEO_TOKEN_ID_KEY = "stoker.video_token_id"
PIXEL_DTYPE_KEY = "stoker.pixel_dtype"
#: Present only in packed batches: tokens per packed row T.
PACKING_MAX_TOKENS_KEY = "stoker.packing_max_tokens"
METADATA_KEYS: tuple[str, ...] = (
    FORMAT_VERSION_KEY,
    STEP_KEY,
    RANK_KEY,
    SLOTS_KEY,
    BACKFILLED_SLOTS_KEY,
    PAD_TOKEN_ID_KEY,
    IMAGE_TOKEN_ID_KEY,
    VIDEO_TOKEN_ID_KEY,
    PIXEL_DTYPE_KEY,
    PACKING_MAX_TOKENS_KEY,
)

#: Rows of ``position_ids``: the text positions, then the M-RoPE temporal, height and width ones.
POSITION_AXES = 4

#: ``stoker.pixel_dtype`` values: the element type of ``pixel_values``.
PIXEL_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "uint8")

_PRIMITIVES = {
    pa.int64(): "int64",
    pa.int32(): "int32",
    pa.uint16(): "uint16",
    pa.uint8(): "uint8",
    pa.float32(): "float32",
    pa.float64(): "float64",
    pa.string(): "utf8",
}


def describe_type(t: pa.DataType) -> str:
    """Render an Arrow type in the notation of ``batch-schema.json`` with concrete sizes.

    Nullability is left out (the reader checks null counts on the data instead), so the
    result is compared against :func:`_strip_nullability` of the JSON notation.
    """
    if pa.types.is_fixed_size_list(t):
        return f"fixed_size_list<{describe_type(t.value_type)}>[{t.list_size}]"
    if pa.types.is_list(t):
        return f"list<{describe_type(t.value_type)}>"
    if t in _PRIMITIVES:
        return _PRIMITIVES[t]
    return str(t)


def _strip_nullability(notation: str) -> str:
    return notation.replace(" not null", "")


_SIZE_RE = re.compile(r"\[(\d*)([A-Za-z]+)\]")


def type_pattern(notation: str) -> re.Pattern[str]:
    """Regex matching :func:`describe_type` output for a JSON notation; each symbolic size
    (``[L]``, ``[4L]``) becomes a group ``g<i>`` capturing the concrete size."""
    out = []
    pos = 0
    stripped = _strip_nullability(notation)
    for i, m in enumerate(_SIZE_RE.finditer(stripped)):
        out.append(re.escape(stripped[pos : m.start()]))
        out.append(rf"\[(?P<g{i}>\d+)\]")
        pos = m.end()
    out.append(re.escape(stripped[pos:]))
    return re.compile("".join(out) + r"\Z")


def match_column(
    spec: ColumnSpec, t: pa.DataType, variant: str | None = None, *, packed: bool = False
) -> dict[str, int] | None:
    """Return the bound symbols (e.g. ``{"L": 17}``) if ``t`` matches ``spec``, else ``None``.

    ``variant`` (e.g. ``"bfloat16"``, ``"uint8"``) matches against that entry of ``spec.variants``
    instead; ``packed`` against the column's packed type (:meth:`ColumnSpec.arrow_type_in`). A
    size ``[4L]`` binds ``L`` to a quarter of the concrete size, and does not match a size that
    is not a multiple of 4.
    """
    notation = spec.arrow_type_in(packed, variant)
    m = type_pattern(notation).match(describe_type(t))
    if m is None:
        return None
    bound: dict[str, int] = {}
    sizes = _SIZE_RE.findall(_strip_nullability(notation))
    for i, (coefficient, symbol) in enumerate(sizes):
        size, k = int(m.group(f"g{i}")), int(coefficient or 1)
        if size % k or bound.setdefault(symbol, size // k) != size // k:
            return None
    return bound


def arrow_schema(
    seq_len: int, patch_dim: int, pixel_dtype: str = "float32", *, packed: bool = False
) -> pa.Schema:
    """Build a concrete Arrow schema for the given L, D and pixel dtype (used by tests and tools);
    with ``packed``, a packed batch's (per-row sample lists, ``position_ids``, ``cu_seqlens``)."""

    def item(t: pa.DataType) -> pa.Field:
        return pa.field("item", t, nullable=False)

    tok = pa.list_(item(pa.int64()), seq_len)
    pixel_item = {"bfloat16": pa.uint16(), "uint8": pa.uint8()}.get(pixel_dtype, pa.float32())
    fields = [
        pa.field(
            "sample_index", pa.list_(item(pa.int64())) if packed else pa.int64(), nullable=False
        ),
        *(
            pa.field(name, pa.list_(item(pa.string())) if packed else pa.string(), nullable=False)
            for name in ("source", "location")
        ),
        pa.field("input_ids", tok, nullable=False),
        pa.field("labels", tok, nullable=False),
        pa.field("attention_mask", tok, nullable=False),
        pa.field(
            "pixel_values",
            pa.list_(pa.list_(item(pixel_item), patch_dim)),
            nullable=False,
        ),
        pa.field(
            "image_grid_thw",
            pa.list_(pa.list_(item(pa.int64()), 3)),
            nullable=False,
        ),
        pa.field(
            "pixel_values_videos",
            pa.list_(pa.list_(item(pixel_item), patch_dim)),
            nullable=False,
        ),
        pa.field("video_grid_thw", pa.list_(pa.list_(item(pa.int64()), 3)), nullable=False),
        pa.field("second_per_grid_ts", pa.list_(item(pa.float32())), nullable=False),
    ]
    if packed:
        fields += [
            pa.field(
                "position_ids", pa.list_(item(pa.int64()), POSITION_AXES * seq_len), nullable=False
            ),
            pa.field("cu_seqlens", pa.list_(item(pa.int32())), nullable=False),
        ]
    return pa.schema(fields)
