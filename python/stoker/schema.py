"""Expected batch columns and metadata keys, kept in sync with ``schema/batch-schema.json``.

The JSON file in the repository root is the single definition of the batch layout; this module
mirrors the part the reader needs (names, Arrow types, reader dtypes and shapes), as
:mod:`stoker.protocol` mirrors its file names and manifest/ack fields, and
``tests/test_schema_sync.py`` asserts that they agree.

Arrow types are written in the JSON's notation, e.g. ``fixed_size_list<int64 not null>[L]``,
where ``L`` (padded sequence length) and ``D`` (patch dimension) are per-batch symbols and
numbers are fixed sizes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pyarrow as pa


@dataclass(frozen=True)
class ColumnSpec:
    """One expected column: name, Arrow type notation, reader dtype and reader shape.

    ``variants`` maps another element type a writer may choose (``stoker.pixel_dtype``) to its
    ``(arrow_type, reader_dtype)``.
    """

    name: str
    arrow_type: str
    nullable: bool
    reader_dtype: str
    reader_shape: tuple[str | int, ...]
    variants: dict[str, tuple[str, str]] = field(default_factory=dict)


COLUMNS: tuple[ColumnSpec, ...] = (
    ColumnSpec("sample_index", "int64", False, "int64", ("B",)),
    ColumnSpec("source", "utf8", False, "str", ("B",)),
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
)

COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)

#: Schema-level metadata keys written by the sink.
METADATA_KEYS: tuple[str, ...] = (
    "stoker.format_version",
    "stoker.step",
    "stoker.rank",
    "stoker.slots",
    "stoker.backfilled_slots",
    "stoker.pad_token_id",
    "stoker.image_token_id",
    "stoker.pixel_dtype",
)

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


def type_pattern(notation: str) -> re.Pattern[str]:
    """Regex matching :func:`describe_type` output for a JSON notation; symbols become groups."""
    parts = re.split(r"\[([A-Za-z]+)\]", _strip_nullability(notation))
    out = []
    for i, part in enumerate(parts):
        out.append(re.escape(part) if i % 2 == 0 else rf"\[(?P<{part}>\d+)\]")
    return re.compile("".join(out) + r"\Z")


def match_column(
    spec: ColumnSpec, t: pa.DataType, variant: str | None = None
) -> dict[str, int] | None:
    """Return the bound symbols (e.g. ``{"L": 17}``) if ``t`` matches ``spec``, else ``None``.

    ``variant`` (e.g. ``"bfloat16"``, ``"uint8"``) matches against that entry of ``spec.variants`` instead.
    """
    notation = spec.variants[variant][0] if variant is not None else spec.arrow_type
    m = type_pattern(notation).match(describe_type(t))
    if m is None:
        return None
    return {k: int(v) for k, v in m.groupdict().items()}


def arrow_schema(seq_len: int, patch_dim: int, pixel_dtype: str = "float32") -> pa.Schema:
    """Build a concrete Arrow schema for the given L, D and pixel dtype (used by tests and tools)."""
    tok = pa.list_(pa.field("item", pa.int64(), nullable=False), seq_len)
    pixel_item = {"bfloat16": pa.uint16(), "uint8": pa.uint8()}.get(pixel_dtype, pa.float32())
    return pa.schema(
        [
            pa.field("sample_index", pa.int64(), nullable=False),
            pa.field("source", pa.string(), nullable=False),
            pa.field("input_ids", tok, nullable=False),
            pa.field("labels", tok, nullable=False),
            pa.field("attention_mask", tok, nullable=False),
            pa.field(
                "pixel_values",
                pa.list_(pa.list_(pa.field("item", pixel_item, nullable=False), patch_dim)),
                nullable=False,
            ),
            pa.field(
                "image_grid_thw",
                pa.list_(pa.list_(pa.field("item", pa.int64(), nullable=False), 3)),
                nullable=False,
            ),
        ]
    )
