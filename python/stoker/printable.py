r"""Text from the job, made safe to print: the one escaping every Stoker tool uses.

Dead-letter messages, record ids, file names, job names and log lines come from the data, and the
data can hold anything: a lone surrogate (``"\ud800"`` in a record's JSON) that makes ``print``
raise ``UnicodeEncodeError``, an ESC sequence that clears or retitles the terminal, a bidi
override that shows the rest of the line reversed. Every tool passes such text through
:func:`printable` before printing it, and calls :func:`escape_unencodable_stdout` before it prints,
so that a standard output that is not UTF-8 (``PYTHONIOENCODING=ascii``, ``LANG=C``) escapes what
it cannot encode instead of failing. A tool's own text (its newlines, its own styling) is not
passed through :func:`printable`: only the pieces that come from the data are.
"""

from __future__ import annotations

import io
import sys

__all__ = ["escape_unencodable_stdout", "printable"]

_SHORT = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(ch: str) -> str:
    short = _SHORT.get(ch)
    if short is not None:
        return short
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: object, *, keep_newlines: bool = False) -> str:
    r"""``str(text)`` with every character a terminal could not show as itself escaped.

    Escaped, in the notation of a Python string literal (lower-case hex):

    * every character for which ``str.isprintable()`` is false: C0 controls and DEL (NUL as
      ``\x00``, ESC as ``\x1b``, DEL as ``\x7f``; tab, line feed and carriage return as ``\t``,
      ``\n``, ``\r``), C1 controls (``\x9b``), surrogates, which in a ``str`` are always lone
      (``\ud800``), format characters such as the bidi embeddings, overrides and isolates
      U+202A-U+202E and U+2066-U+2069 (``\u202e``) and zero-width characters (``\u200b``),
      line and paragraph separators (``\u2028``), spaces other than U+0020 (``\xa0``),
      private-use and unassigned code points; as ``\xNN`` up to U+00FF, ``\uNNNN`` up to
      U+FFFF, ``\UNNNNNNNN`` above;
    * the backslash itself, as ``\\``, so that every backslash in the result starts an escape
      and the original text can be read back exactly (without ``keep_newlines`` it is what
      ``ast.literal_eval('"' + result.replace('"', '\\"') + '"')`` returns).

    Everything else, letters of any script and emoji included, is kept as it is. With
    ``keep_newlines`` a line feed stays a line feed (for text that is a sequence of lines, such as a
    log's tail); every other character is escaped as above.

    The result contains no character that moves the cursor, changes the terminal's state or
    reorders the line, and encodes to UTF-8 without error.
    """
    s = text if isinstance(text, str) else str(text)
    if s.isprintable() and "\\" not in s:
        return s
    return "".join(
        ch if (ch.isprintable() and ch != "\\") or (keep_newlines and ch == "\n") else _escape(ch)
        for ch in s
    )


def escape_unencodable_stdout() -> None:
    r"""Make ``sys.stdout`` write characters its encoding cannot encode as backslash escapes.

    An ASCII or Latin-1 standard output (``PYTHONIOENCODING=ascii``, a ``C`` locale without
    UTF-8) then prints ``é`` as ``\xe9`` and ``中`` as ``\u4e2d`` (the notation of
    :func:`printable`) instead of raising ``UnicodeEncodeError``: Python's ``backslashreplace``
    error handler, which ``sys.stderr`` has already. Does nothing to a stream that is not a
    ``TextIOWrapper`` (e.g. one replaced with ``contextlib.redirect_stdout``).
    """
    out = sys.stdout
    if isinstance(out, io.TextIOWrapper) and out.errors != "backslashreplace":
        out.reconfigure(errors="backslashreplace")
