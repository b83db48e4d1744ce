"""Standard input, read one way by every command that takes sentences a line (``translate``,
``explain``).

Lines end at LF (a CRLF loses its CR too); a bare CR stays inside its line, so that output line k
always answers input line k. A leading UTF-8 byte-order mark is dropped. A line that is not UTF-8
comes as its ``UnicodeDecodeError``, so that a command can name the line (``undecodable``) and one
bad line costs only itself. Input that starts with a UTF-16 or UTF-32 byte-order mark is refused at
once, with the ``iconv`` command that converts it.
"""

from __future__ import annotations

import codecs
import io
import sys
from collections.abc import Iterator

from attnmt.errors import DataError

__all__ = ["stdin_lines", "undecodable"]

_WIDE_MARKS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
               (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))


def stdin_lines() -> Iterator[str | UnicodeDecodeError]:
    """Standard input one line at a time, without its line end (the module docstring); nothing
    when there is no standard input (closed, or a terminal nobody types into is still read)."""
    if sys.stdin is None:
        return
    source = getattr(sys.stdin, "buffer", None)
    if source is None:  # a text stream (tests, embedding): already decoded
        for number, line in enumerate(sys.stdin):
            yield line.rstrip("\r\n").lstrip("\ufeff") if number == 0 else line.rstrip("\r\n")
        return
    source = io.BufferedReader(source) if not hasattr(source, "peek") else source
    start = source.peek(4)[:4]
    for mark, encoding in _WIDE_MARKS:
        if start.startswith(mark):
            raise DataError(f"standard input is {encoding} (it starts with a {encoding} byte-order mark); attnmt "
                            f"reads UTF-8: convert it first, e.g. iconv -f {encoding} -t UTF-8 FILE | attnmt ...")
    # Undecodable bytes are kept as surrogates, to be reported per line.
    stream = io.TextIOWrapper(source, encoding="utf-8", errors="surrogateescape", newline="\n")
    for number, line in enumerate(stream):
        line = line.removesuffix("\n").removesuffix("\r")
        if number == 0:
            line = line.lstrip("\ufeff")
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:
            try:
                line.encode("utf-8", "surrogateescape").decode("utf-8")
            except UnicodeDecodeError as error:
                yield error
                continue
        yield line


def undecodable(error: UnicodeDecodeError) -> str:
    """What is wrong with a line ``stdin_lines`` could not decode, in a few words."""
    return (f"not valid UTF-8 (byte {error.object[error.start]:#04x} at byte {error.start + 1}); "
            "convert the input to UTF-8 (iconv -f YOUR-ENCODING -t UTF-8)")
