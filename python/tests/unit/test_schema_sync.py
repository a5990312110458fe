"""The Python side's names of the protocol are the ones ``schema/batch-schema.json`` defines (the
Java side checks the same file: ``ProtocolDefinitionTest``, ``ArrowBatchWriterTest``)."""

import dataclasses
import json
from pathlib import Path

import pyarrow as pa
from harness.batches import write_manifest
from harness.paths import SCHEMA_JSON

from stoker import Manifest, VisionSettings, data_state, protocol, schema


def test_schema_py_agrees_with_batch_schema_json():
    spec = json.loads(SCHEMA_JSON.read_text())
    assert spec["format_version"] == protocol.FORMAT_VERSION
    assert list(data_state.SEQUENCE_FIELDS) == spec["sequence_fields"]
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
        packed = c.get("packed")
        want = None if packed is None else (packed["arrow_type"], tuple(packed["reader_shape"]))
        assert mine.packed == want, c["name"]
        assert mine.packed_only == c.get("packed_only", False), c["name"]
    assert list(spec["metadata"]) == list(schema.METADATA_KEYS)
    assert schema.PACKING_MAX_TOKENS_KEY in spec["metadata"]
    positions = next(c for c in cols if c["name"] == "position_ids")
    assert positions["reader_shape"][0] == schema.POSITION_AXES
    # every element type is the column's own or one of its variants, and the metadata names it
    pixel = next(c for c in cols if c["name"] == "pixel_values")
    assert [pixel["reader_dtype"], *pixel["variants"]] == list(schema.PIXEL_DTYPES)
    for dtype in schema.PIXEL_DTYPES:
        assert dtype in spec["metadata"]["stoker.pixel_dtype"]


def test_protocol_py_names_are_the_shared_definitions():
    spec = json.loads(SCHEMA_JSON.read_text())
    assert list(spec["manifest"]) == list(protocol.MANIFEST_FIELDS)
    assert list(spec["ack"]) == list(protocol.ACK_FIELDS)
    assert set(protocol.VISION_FIELDS) == {f.name for f in dataclasses.fields(VisionSettings)}
    # every manifest field is an attribute of Manifest, or one of its vision settings
    attrs = {f.name for f in dataclasses.fields(Manifest)} - {"vision", "raw"}
    assert attrs | set(protocol.VISION_FIELDS) == set(protocol.MANIFEST_FIELDS)
    files = spec["files"]
    assert files["manifest"] == protocol.MANIFEST_FILE
    assert files["ack"] == protocol.ACK_FILE
    assert files["generation_dir"].replace("<generation>", "g-1_x") == (
        protocol.generation_dir_name("g-1_x")
    )
    assert files["rank_dir"].replace("<rank>", "3") == protocol.rank_dir_name(3)
    assert files["reader_lock"].replace("<rank>", "3") == protocol.reader_lock_name(3)
    name = files["batch_file"].replace("<step:010d>", f"{42:010d}")
    assert name == protocol.batch_file_name(42)
    assert protocol.BATCH_FILE_RE.match(name).group(1) == f"{42:010d}"


def test_the_ack_written_has_every_field_and_the_manifest_is_read_with_every_field(shm_root):
    rank_dir = Path(shm_root) / "rank-0"
    rank_dir.mkdir(parents=True)
    assert protocol.write_ack_and_unlink(rank_dir, protocol.ack_content(7, 1.5, 6.0))
    ack = json.loads((rank_dir / protocol.ACK_FILE).read_text())
    assert ack == {
        "consumed_step": 7,
        "data_wait_s": 1.5,
        "elapsed_s": 6.0,
        "wait_time_ratio": 0.25,
    }
    assert list(ack) == list(protocol.ACK_FIELDS)
    write_manifest(
        shm_root, world_size=1, num_steps=1, dataset_fingerprint="sha256:x", model_preset="qwen2-vl"
    )
    m = Manifest.load(Path(shm_root) / protocol.MANIFEST_FILE)
    assert sorted(m.raw) == sorted(protocol.MANIFEST_FIELDS)


def test_arrow_schema_builder_matches_every_json_column():
    spec = json.loads(SCHEMA_JSON.read_text())
    s = schema.arrow_schema(seq_len=7, patch_dim=1176)
    unpacked = [c for c in spec["columns"] if not c.get("packed_only")]
    assert s.names == [c["name"] for c in unpacked]
    for c in unpacked:
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
    u8 = schema.arrow_schema(seq_len=7, patch_dim=1176, pixel_dtype="uint8")
    assert u8.field("pixel_values").type.value_type.value_type == pa.uint8()
    assert schema.match_column(pixel_spec, u8.field("pixel_values").type, "uint8") == {"D": 1176}
    assert schema.match_column(pixel_spec, u8.field("pixel_values").type, "bfloat16") is None
    # [3] is a fixed size, not a symbol: a width of 4 must not match.
    bad = pa.list_(pa.list_(pa.int64(), 4))
    grid_spec = next(x for x in schema.COLUMNS if x.name == "image_grid_thw")
    assert schema.match_column(grid_spec, bad) is None
    # the unpacked schema has no packed-only column
    assert not {c.name for c in schema.COLUMNS if c.packed_only} & set(s.names)


def test_packed_arrow_schema_matches_every_json_column_in_its_packed_type():
    spec = json.loads(SCHEMA_JSON.read_text())
    s = schema.arrow_schema(seq_len=7, patch_dim=1176, packed=True)
    assert s.names == [c["name"] for c in spec["columns"]]
    for c in spec["columns"]:
        mine = next(x for x in schema.COLUMNS if x.name == c["name"])
        t = s.field(c["name"]).type
        bound = schema.match_column(mine, t, packed=True)
        assert bound is not None, c["name"]
        assert bound == {k: v for k, v in {"L": 7, "D": 1176}.items() if f"{k}]" in c["arrow_type"]}
        if "packed" in c:  # another type than unpacked: the unpacked notation must not match
            assert mine.arrow_type_in(True) == c["packed"]["arrow_type"]
            assert schema.match_column(mine, t) is None, c["name"]
        assert s.field(c["name"]).nullable == c["nullable"]


def test_a_size_with_a_factor_binds_the_symbol_to_its_quotient():
    positions = next(x for x in schema.COLUMNS if x.name == "position_ids")
    assert positions.arrow_type == "fixed_size_list<int64 not null>[4L]"
    assert schema.match_column(positions, pa.list_(pa.int64(), 28)) == {"L": 7}
    assert schema.match_column(positions, pa.list_(pa.int64(), 0)) == {"L": 0}
    assert schema.match_column(positions, pa.list_(pa.int64(), 30)) is None  # not 4 * L
    assert schema.match_column(positions, pa.list_(pa.int32(), 28)) is None
    assert schema.match_column(positions, pa.list_(pa.int64())) is None
