import json

import pyarrow as pa
from conftest import SCHEMA_JSON

from stoker import schema


def test_schema_py_agrees_with_batch_schema_json():
    spec = json.loads(SCHEMA_JSON.read_text())
    assert spec["format_version"] == schema.FORMAT_VERSION
    cols = spec["columns"]
    assert [c["name"] for c in cols] == list(schema.COLUMN_NAMES)
    for c, mine in zip(cols, schema.COLUMNS, strict=True):
        assert c["arrow_type"] == mine.arrow_type, c["name"]
        assert c["nullable"] == mine.nullable, c["name"]
        assert c["reader_dtype"] == mine.reader_dtype, c["name"]
        assert tuple(c["reader_shape"]) == mine.reader_shape, c["name"]
        variants = {
            k: (v["arrow_type"], v["reader_dtype"]) for k, v in c.get("variants", {}).items()
        }
        assert variants == mine.variants, c["name"]
        assert set(variants) <= set(schema.PIXEL_DTYPES), c["name"]
    assert sorted(spec["metadata"]) == sorted(schema.METADATA_KEYS)


def test_arrow_schema_builder_matches_every_json_column():
    spec = json.loads(SCHEMA_JSON.read_text())
    s = schema.arrow_schema(seq_len=7, patch_dim=1176)
    assert s.names == [c["name"] for c in spec["columns"]]
    for c in spec["columns"]:
        bound = schema.match_column(
            next(x for x in schema.COLUMNS if x.name == c["name"]), s.field(c["name"]).type
        )
        assert bound is not None, c["name"]
        if "[L]" in c["arrow_type"]:
            assert bound == {"L": 7}
        if "[D]" in c["arrow_type"]:
            assert bound == {"D": 1176}
        assert s.field(c["name"]).nullable == c["nullable"]
    bf16 = schema.arrow_schema(seq_len=7, patch_dim=1176, pixel_dtype="bfloat16")
    pixel_spec = next(x for x in schema.COLUMNS if x.name == "pixel_values")
    assert schema.match_column(pixel_spec, bf16.field("pixel_values").type, "bfloat16") == {
        "D": 1176
    }
    assert schema.match_column(pixel_spec, bf16.field("pixel_values").type) is None
    # [3] is a fixed size, not a symbol: a width of 4 must not match.
    bad = pa.list_(pa.list_(pa.int64(), 4))
    assert schema.match_column(schema.COLUMNS[-1], bad) is None
