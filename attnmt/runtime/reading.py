"""Reading a file that a user or an unknown sender gave: a regular file only, and never more than
a bound; and data read from it checked for size before anything renders or walks it.

A run folder is untrusted input (docs/mechanisms.md, "Runs keep their code"). Its ``config.yaml``
could be a FIFO (reading it would wait for ever), a link to ``/dev/zero`` (reading it would fill
the memory), or 200 bytes of YAML whose aliases stand for billions of nodes, harmless while they
are shared references and a memory bomb once an error message renders them. So:

- ``open_regular`` and ``read_bytes_bounded`` are how every file a user names is read (corpora,
  word vectors, gold links, attention files, checkpoints, tokenizers, metrics): a regular file
  only, and the whole-file readers within a bound (a corpus of ``MAX_CORPUS_BYTES``, even when
  gzip would unpack it to more);
- ``read_text_bounded`` opens without blocking, refuses anything but a regular file (a FIFO, a
  device, a socket), and reads at most ``limit`` bytes (a larger file is refused, not cut);
- ``check_plain_data`` walks what a YAML file, a ``--set`` value or a checkpoint's config holds
  (dicts, lists, scalars; shared references counted once per use, as rendering them would) and
  refuses more than ``MAX_NODES`` nodes, nesting deeper than ``MAX_DEPTH``, an integer of more
  than ``MAX_INT_DIGITS`` digits or a string of more than ``MAX_STRING`` characters.
"""

from __future__ import annotations

import gzip
import math
import os
import stat
from typing import Any, BinaryIO

__all__ = ["MAX_CONFIG_BYTES", "MAX_CORPUS_BYTES", "MAX_DEPTH", "MAX_NODES", "DataTooLarge", "check_plain_data",
           "open_regular", "read_bytes_bounded", "read_text_bounded", "special_file_kind"]

MAX_CONFIG_BYTES = 1 << 20  # 1 MiB: a run config is a few kilobytes
MAX_CORPUS_BYTES = 2 << 30  # 2 GiB of text a side (decompressed): the 1.1M Hansards pairs are 0.2 GiB
MAX_NODES = 100_000
MAX_DEPTH = 64
MAX_INT_DIGITS = 100
MAX_STRING = 100_000


class DataTooLarge(ValueError):
    """Data or a file beyond the bounds of this module; the message says which bound."""


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """``path`` opened for reading in binary. OSError for a missing or unreadable file;
    DataTooLarge for anything but a regular file (a FIFO would wait for ever, ``/dev/zero`` would
    fill the memory), checked on the opened file, so a link cannot switch it afterwards."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    descriptor = os.open(path, flags)
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise DataTooLarge(f"is {'a folder' if stat.S_ISDIR(mode) else _kind(mode)}, not a regular file")
    except BaseException:
        os.close(descriptor)
        raise
    return os.fdopen(descriptor, "rb")


def _read_at_most(handle: BinaryIO | gzip.GzipFile, limit: int) -> bytes:
    chunks, size = [], 0
    while size <= limit:
        chunk = handle.read(min(1 << 20, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        raise DataTooLarge(f"is larger than {limit:,} bytes")
    return b"".join(chunks)


def read_bytes_bounded(path: str | os.PathLike, limit: int, gunzip: bool = False) -> bytes:
    """The bytes of the regular file ``path`` (``open_regular``), at most ``limit`` of them
    (DataTooLarge beyond); with ``gunzip``, a file that starts with the gzip magic bytes is
    decompressed, and the bound applies to what it holds (gzip.BadGzipFile, EOFError or
    zlib.error for a damaged one)."""
    with open_regular(path) as handle:
        if gunzip and handle.read(2) == b"\x1f\x8b":
            handle.seek(0)
            with gzip.GzipFile(fileobj=handle, mode="rb") as unpacked:
                return _read_at_most(unpacked, limit)
        handle.seek(0)
        return _read_at_most(handle, limit)


def read_text_bounded(path: str | os.PathLike, limit: int = MAX_CONFIG_BYTES) -> str:
    """The text of ``path`` (UTF-8). OSError for a missing or unreadable file; DataTooLarge for
    anything but a regular file, or one of more than ``limit`` bytes; UnicodeDecodeError."""
    return read_bytes_bounded(path, limit).decode("utf-8")


def check_plain_data(value: Any, what: str, max_string: int | None = MAX_STRING) -> None:
    """DataTooLarge, naming ``what`` and the bound, when ``value`` is beyond the module's bounds
    (``max_string`` None: texts of any length, as a checkpoint keeps its tokenizers' models).
    Objects that are not dicts, lists, tuples, strings or numbers (tensors) count as one node."""
    sizes: dict[int, int] = {}
    total = _size(value, sizes, 0, what, max_string)
    if total > MAX_NODES:
        raise DataTooLarge(f"{what}: holds more than {MAX_NODES:,} values (shared references counted at each use)")


def _size(value: Any, sizes: dict[int, int], depth: int, what: str, max_string: int | None) -> int:
    if depth > MAX_DEPTH:
        raise DataTooLarge(f"{what}: nested more than {MAX_DEPTH} deep")
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return 1
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_DIGITS * math.log2(10):
            raise DataTooLarge(f"{what}: holds an integer of more than {MAX_INT_DIGITS} digits")
        return 1
    if isinstance(value, (str, bytes)):
        if max_string is not None and len(value) > max_string:
            raise DataTooLarge(f"{what}: holds a text of more than {max_string:,} characters")
        return 1
    if not isinstance(value, (dict, list, tuple)):
        return 1
    key = id(value)
    if key in sizes:
        return sizes[key]
    sizes[key] = MAX_NODES + 1  # a container that holds itself never finishes rendering either
    items = [*value.keys(), *value.values()] if isinstance(value, dict) else list(value)
    total = 1
    for item in items:
        total += _size(item, sizes, depth + 1, what, max_string)
        if total > MAX_NODES:
            raise DataTooLarge(f"{what}: holds more than {MAX_NODES:,} values (shared references counted at each use)")
    sizes[key] = total
    return total


def _kind(mode: int) -> str:
    return "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"


def special_file_kind(path: str | os.PathLike) -> str | None:
    """What ``path`` is when it exists as something other than a regular file or a folder (following
    links): "a device", "a FIFO" or "a socket"; None otherwise. Outputs never replace one."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else _kind(mode)
