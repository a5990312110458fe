r"""Text from the job printed by the tools: ``stoker.printable`` and every tool that prints through it.

Dead letters are written here as the job writes them (``DeadLetterJsonEncoder`` through Flink's
``FileSink``: committed part files ``<dir>/<yyyy-MM-dd--HH>/dead-letters-<uuid>-<n>.jsonl``, an
in-progress one hidden), holding a lone surrogate, ESC sequences, bidi overrides and isolates, a
C1 control, NUL, a line break, backslashes and a non-ASCII letter. Each tool runs as a real
process, with a UTF-8 standard output and with ASCII ones (``PYTHONIOENCODING=ascii``, a C locale),
and must exit 0 printing every such character escaped (``\ud800``, ``\x1b``, ``\u202e``): never
the raw character, never ``UnicodeEncodeError``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from harness.batches import make_job, write_manifest
from harness.paths import REPO_ROOT
from stoker_tools.demo import _tail
from stoker_tools.flink_rest import flink_job_status

from stoker import Manifest
from stoker.data_state import make_state
from stoker.printable import printable

PYTHON_DIR = REPO_ROOT / "python"

#: Raw characters that must never reach a terminal from the data: ESC, BEL, NUL, C1 CSI, the bidi
#: override and isolates.
FORBIDDEN = ["\x1b", "\x07", "\x00", "\x9b", "\u202e", "\u2066", "\u2069"]

#: Standard outputs the tools must cope with: name -> (environment, encoding of the output).
OUTPUTS = {
    "utf-8": ({"PYTHONIOENCODING": "utf-8"}, "utf-8"),
    "PYTHONIOENCODING=ascii": ({"PYTHONIOENCODING": "ascii"}, "ascii"),
    # PEP 540: a C locale turns on UTF-8 mode (surrogateescape, which would write \udc9b as a raw
    # C1 byte if the tool did not escape it first)
    "LC_ALL=C": ({"LANG": "C", "LC_ALL": "C"}, "utf-8"),
    # a C locale with Python's UTF-8 mode and locale coercion off: ASCII
    "LC_ALL=C, no UTF-8 mode": (
        {"LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"},
        "ascii",
    ),
}


def _jackson_string(value: str) -> str:
    r"""``value`` as a JSON string the way Jackson's UTF-8 generator writes it (the job's
    ``Json.mapper()``): ``"`` and ``\`` escaped, the controls below U+0020 as ``\b \t \n \f \r`` or
    ``\u00XX``, every surrogate as ``\uXXXX`` (upper-case hex), everything else (DEL, C1
    controls, U+202E) as raw UTF-8."""
    short = {
        '"': '\\"',
        "\\": "\\\\",
        "\b": "\\b",
        "\t": "\\t",
        "\n": "\\n",
        "\f": "\\f",
        "\r": "\\r",
    }
    out = []
    for ch in value:
        code = ord(ch)
        if ch in short:
            out.append(short[ch])
        elif code < 0x20 or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _dead_letter_line(
    file: str,
    line: int,
    sample_index: int,
    record_id: str | None,
    reason: str,
    message: str,
    source: str = "dataset",
) -> bytes:
    """One line of a dead-letter part file, as ``DeadLetterJsonEncoder`` writes it."""
    stage = {
        "IMAGE_NOT_FOUND": "fetch",
        "UNSAFE_PATH": "parse",
        "INVALID_RECORD": "parse",
        "MALFORMED_JSON": "parse",
    }[reason]
    rid = "null" if record_id is None else _jackson_string(record_id)
    text = (
        f'{{"source":{_jackson_string(source)},"file":{_jackson_string(file)},"line":{line},'
        f'"sample_index":{sample_index},'
        f'"record_id":{rid},"stage":"{stage}","reason":"{reason}",'
        f'"message":{_jackson_string(message)}}}'
    )
    return text.encode("utf-8") + b"\n"


#: (dead letter fields, what the tool must print for it in a UTF-8 output)
HOSTILE_LETTERS = [
    (
        (
            "s3://stoker-demo/sample/messages.jsonl",
            7,
            6,
            "rec-\ud800",
            "IMAGE_NOT_FOUND",
            "'images/\ud800.png' not found under s3://stoker-demo/sample",
        ),
        r"  s3://stoker-demo/sample/messages.jsonl:7 (id=rec-\ud800): IMAGE_NOT_FOUND: "
        r"'images/\ud800.png' not found under s3://stoker-demo/sample",
    ),
    (
        (
            "s3://stoker-demo/sample/llava.jsonl",
            3,
            2,
            "rec-esc",
            "UNSAFE_PATH",
            "'image': image path 'cat\x1b[2J\x1b]0;pwned\x07.jpg' contains a control character",
        ),
        r"  s3://stoker-demo/sample/llava.jsonl:3 (id=rec-esc): UNSAFE_PATH: 'image': image path "
        r"'cat\x1b[2J\x1b]0;pwned\x07.jpg' contains a control character",
    ),
    (
        (
            "s3://stoker-demo/sample/evil\u202egpj.jsonl",
            1,
            0,
            None,
            "INVALID_RECORD",
            "'conversations'[0]: unknown role 'user\u2066\u202eresu\u2069' \x9b31m",
        ),
        r"  s3://stoker-demo/sample/evil\u202egpj.jsonl:1: INVALID_RECORD: "
        r"'conversations'[0]: unknown role 'user\u2066\u202eresu\u2069' \x9b31m",
    ),
    (
        (
            "s3://stoker-demo/sample/messages.jsonl",
            12,
            11,
            "a\x00b",
            "MALFORMED_JSON",
            "Illegal unquoted character ((CTRL-CHAR, code 0))\n at [Source: REDACTED; line: 1]",
        ),
        r"  s3://stoker-demo/sample/messages.jsonl:12 (id=a\x00b): MALFORMED_JSON: "
        r"Illegal unquoted character ((CTRL-CHAR, code 0))\n at [Source: REDACTED; line: 1]",
    ),
    (
        (
            "s3://stoker-demo/sample/café.jsonl",
            4,
            20,
            "rec-bs",
            "UNSAFE_PATH",
            "'image': image path 'dir\\x1b\\cat.jpg' contains a backslash",
        ),
        r"  s3://stoker-demo/sample/café.jsonl:4 (id=rec-bs): UNSAFE_PATH: 'image': image path "
        r"'dir\\x1b\\cat.jpg' contains a backslash",
    ),
]


def _write_dead_letters(directory: Path) -> None:
    """The job's dead-letter directory: two committed part files in an hourly bucket and an
    in-progress one (hidden, not committed: the tool must not read it)."""
    bucket = directory / "2026-01-15--10"
    bucket.mkdir(parents=True)
    lines = [
        _dead_letter_line(*fields, source="llava" if i < 3 else "ocr")
        for i, (fields, _) in enumerate(HOSTILE_LETTERS)
    ]
    uuid = "6c4a2c1e-0d7b-4f8e-9a51-3f2b8c1d9e70"
    (bucket / f"dead-letters-{uuid}-0.jsonl").write_bytes(b"".join(lines[:3]))
    (bucket / f"dead-letters-{uuid}-1.jsonl").write_bytes(b"".join(lines[3:]))
    (bucket / f".dead-letters-{uuid}-2.jsonl.inprogress.0f1e2d3c").write_bytes(b'{"file":"s3')


def _run(args: list[str], output: str, cwd: Path = PYTHON_DIR) -> tuple[int, str, str]:
    """Run ``python args`` with the standard output ``output`` of :data:`OUTPUTS`; (exit code,
    stdout, stderr), stdout decoded as that output's encoding (strictly: ASCII must be ASCII)."""
    extra, encoding = OUTPUTS[output]
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONIOENCODING", "LANG", "LC_ALL", "LC_CTYPE", "PYTHONUTF8")
    }
    env.update(extra, PYTHONPATH=str(PYTHON_DIR))
    proc = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, timeout=120
    )
    stdout = proc.stdout.decode(encoding)
    return proc.returncode, stdout, proc.stderr.decode("utf-8", "backslashreplace")


def _expected(line: str, encoding: str) -> str:
    r"""What ``line`` (printed in UTF-8) is in an output of ``encoding``: what the encoding lacks
    is backslash-escaped (``é`` as ``\xe9``)."""
    return line.encode(encoding, "backslashreplace").decode(encoding)


def _assert_nothing_raw(text: str) -> None:
    for ch in FORBIDDEN:
        assert ch not in text, f"raw {ch!r} printed:\n{text}"
    assert not any(0xD800 <= ord(ch) <= 0xDFFF for ch in text), text


# ---------------------------------------------------------------------- the helper


# The cases both languages check (PrintableTextTest reads the same file).
PRINTABLE_CASES = json.loads(
    (PYTHON_DIR.parent / "schema" / "printable-cases.json").read_text(encoding="utf-8")
)["cases"]


@pytest.mark.parametrize(
    ("text", "shown"), [(c["text"], c["shown"]) for c in PRINTABLE_CASES] + [(42, "42")]
)
def test_printable_escapes_what_a_terminal_cannot_show(text, shown):
    assert printable(text) == shown


def test_printable_is_faithful_and_encodable():
    """Every escape can be read back: the original text is the Python string literal of the
    result; and the result is UTF-8 without error."""
    texts = [fields[5] for fields, _ in HOSTILE_LETTERS] + [
        "".join(chr(c) for c in range(0x00, 0x250)),
        "\ud800\udfff\udc80 \U0010ffff \ue000 \u0378 \"quoted\" 'single'",
    ]
    for text in texts:
        shown = printable(text)
        shown.encode("utf-8")
        assert ast.literal_eval('"' + shown.replace('"', '\\"') + '"') == text
        _assert_nothing_raw(shown)


def test_printable_keeps_line_feeds_only_when_asked():
    assert printable("a\nb\x1b\r\n", keep_newlines=True) == "a\nb\\x1b\\r\n"
    assert printable("a\nb") == "a\\nb"


# ---------------------------------------------------------------------- the tools, as processes


@pytest.mark.parametrize("output", OUTPUTS)
def test_dead_letters_tool_prints_hostile_dead_letters_escaped(tmp_path, output):
    directory = tmp_path / "stoker-demo" / "dead-letters"
    _write_dead_letters(directory)
    rc, out, err = _run(["-m", "stoker.dead_letters", str(directory)], output)
    assert rc == 0, out + err
    encoding = OUTPUTS[output][1]
    assert out.startswith("dead letters: 5\n  source llava: 3\n  source ocr: 2\n"), out
    assert "  fetch/IMAGE_NOT_FOUND: 1\n" in out and "  parse/UNSAFE_PATH: 2\n" in out, out
    for _, shown in HOSTILE_LETTERS:
        assert _expected(shown, encoding) + "\n" in out, f"{shown!r} not in:\n{out}"
    # total, 2 sources, 4 reasons, one line per dead letter
    assert len(out.splitlines()) == 1 + 2 + 4 + 5
    _assert_nothing_raw(out)


@pytest.mark.parametrize("output", OUTPUTS)
def test_the_demo_prints_the_job_results_escaped(tmp_path, output):
    """``stoker_tools.demo.print_results``, which the demo runs at the end, in a process of its
    own (the demo itself needs the Java build)."""
    job_dir = tmp_path / "stoker-demo-1234"
    _write_dead_letters(job_dir / "dead-letters")
    job_log = tmp_path / "stoker-demo-1234.log"
    job_log.write_text(
        "2026-01-15 10:15:00,101 WARN  dev.stoker.operators.accounting.DeadLetterAccounting [] - "
        "Dead letter: s3://stoker-demo/sample/llava.jsonl:3: PARSE/UNSAFE_PATH: 'image': image "
        "path 'cat\x1b[2J.jpg' contains a control character\n"
        "2026-01-15 10:15:09,432 INFO  dev.stoker.job.StokerJob [] - Run finished: records in "
        "steps 0..5=48, read=48, samples emitted=43, dead letters=5\n",
        encoding="utf-8",
    )
    code = (
        "import sys; from pathlib import Path; from stoker_tools.demo import print_results; "
        "print_results(Path(sys.argv[1]), Path(sys.argv[2]))"
    )
    rc, out, err = _run(["-c", code, str(job_log), str(job_dir)], output)
    assert rc == 0, out + err
    encoding = OUTPUTS[output][1]
    assert out.startswith(
        "[job] Run finished: records in steps 0..5=48, read=48, samples emitted=43, "
        "dead letters=5\ndead letters: 5\n"
    ), out
    for _, shown in HOSTILE_LETTERS:
        assert _expected(shown, encoding) + "\n" in out, f"{shown!r} not in:\n{out}"
    _assert_nothing_raw(out)


def test_the_demo_shows_the_job_logs_tail_escaped(tmp_path):
    log = tmp_path / "job.log"
    log.write_text("first\nDead letter: x.jsonl:1: 'a\x1b[2J\u202eb'\r\nlast\n", encoding="utf-8")
    assert _tail(log, lines=2) == "Dead letter: x.jsonl:1: 'a\\x1b[2J\\u202eb'\\r\nlast"


HOSTILE_JOB_NAME = "sft-\ud800-\x1b[2J-\u202e-\x00-é"
HOSTILE_JOB_NAME_SHOWN = r"sft-\ud800-\x1b[2J-\u202e-\x00-é"


@pytest.mark.parametrize("output", ["utf-8", "PYTHONIOENCODING=ascii"])
def test_simulate_prints_a_hostile_job_name_escaped(shm_root, output):
    make_job(shm_root, world_size=1, num_steps=2, job_name=HOSTILE_JOB_NAME)
    rc, out, err = _run(
        ["-m", "stoker_tools.simulate", "--root", str(shm_root), "--step-time-ms", "0"]
        + ["--timeout-s", "20"],
        output,
    )
    assert rc == 0, out + err
    shown = _expected(HOSTILE_JOB_NAME_SHOWN, OUTPUTS[output][1])
    assert out.startswith(f"job='{shown}' generation=g1 "), out
    assert "result: OK" in out
    _assert_nothing_raw(out)


@pytest.mark.parametrize("output", ["utf-8", "PYTHONIOENCODING=ascii"])
def test_resume_prints_a_hostile_job_name_escaped(shm_root, tmp_path, output):
    write_manifest(shm_root, world_size=1, num_steps=4, job_name=HOSTILE_JOB_NAME)
    state = make_state(Manifest.load(shm_root / "manifest.json"), 0, 2, "g1")
    ckpt = tmp_path / "ckpt.json"
    ckpt.write_text(json.dumps({"data": state}))
    rc, out, err = _run(["-m", "stoker.resume", str(ckpt), "--savepoint", "sp"], output)
    assert rc == 0, out + err
    shown = _expected(HOSTILE_JOB_NAME_SHOWN, OUTPUTS[output][1])
    assert f"--stoker.job-name '{shown}'" in out, out
    assert out.endswith("--stoker.resume-step 1\n"), out
    assert "retype them" in err
    _assert_nothing_raw(out)


def test_flink_job_status_is_one_escaped_line():
    msg = flink_job_status("http://127.0.0.1:9/\x1b[2J\u202e", timeout_s=2)
    assert msg.startswith(r"flink: unavailable at http://127.0.0.1:9/\x1b[2J\u202e"), msg
    assert "\n" not in msg
    _assert_nothing_raw(msg)
