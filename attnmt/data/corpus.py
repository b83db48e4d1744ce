"""Reading parallel text: two files, one sentence a line, line i of one translating line i of the other.

Files are UTF-8, plain or gzip-compressed (recognised by the gzip magic bytes ``1f 8b``, whatever
the suffix). Lines are split on ``\\n`` only, so a stray U+2028 inside a sentence does not shift the
pairing; a trailing ``\\r`` and surrounding whitespace are stripped, and a UTF-8 byte-order mark at
the start of a file is ignored.

Two things are dropped from a corpus, and counted (and logged):

* pairs with an empty side (after stripping): a translator cannot learn from or be scored on them;
* with ``max_length``, pairs where a side has more than ``max_length`` whitespace-separated tokens.

``read_parallel`` counts whitespace tokens because it runs before any tokenizer exists. Training
limits the length in *subword* tokens instead (``DataConfig.max_length``), after encoding, with
``Tokenizers.encode_corpus(corpus, max_length)``. Test sets are never cut: pass ``max_length=None``.
"""

from __future__ import annotations

import gzip
import logging
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from attnmt.errors import DataError
from attnmt.runtime.reading import MAX_CORPUS_BYTES, DataTooLarge, open_regular, read_bytes_bounded

logger = logging.getLogger(__name__)

GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class ParallelCorpus:
    """Sentence pairs read from two files.

    ``src[i]`` translates to ``tgt[i]``; ``line_numbers[i]`` is the 1-based line both came from,
    so outputs can be matched with the original files even after pairs were dropped.
    """

    src: list[str]
    tgt: list[str]
    dropped_empty: int = 0
    dropped_long: int = 0
    src_path: Path | None = None
    tgt_path: Path | None = None
    line_numbers: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(self.src) != len(self.tgt):
            raise ValueError(
                f"ParallelCorpus: src has {len(self.src)} sentences but tgt has {len(self.tgt)}"
            )
        if not self.line_numbers:
            self.line_numbers = list(range(1, len(self.src) + 1))
        elif len(self.line_numbers) != len(self.src):
            raise ValueError(
                f"ParallelCorpus: {len(self.line_numbers)} line numbers for {len(self.src)} pairs"
            )

    def __len__(self) -> int:
        return len(self.src)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(zip(self.src, self.tgt))

    def __getitem__(self, index: int) -> tuple[str, str]:
        return self.src[index], self.tgt[index]

    def describe(self) -> str:
        """One line for logs: where the pairs came from, how many were kept and dropped."""
        where = f"{self.src_path} + {self.tgt_path}" if self.src_path else "in-memory corpus"
        return (
            f"{where}: {len(self)} pairs kept, {self.dropped_empty} dropped for an empty side, "
            f"{self.dropped_long} dropped as too long"
        )


def is_gzip(path: str | Path) -> bool:
    """True when the file starts with the gzip magic bytes (DataTooLarge for a FIFO or a device,
    attnmt.runtime.reading.open_regular)."""
    with open_regular(path) as handle:
        return handle.read(2) == GZIP_MAGIC


def read_lines(path: str | Path) -> list[str]:
    """All lines of a plain or gzip UTF-8 file, without line ends (not stripped otherwise).

    Raises DataError for a missing or unreadable file, anything but a regular file (a FIFO, a
    device such as /dev/zero), more than ``MAX_CORPUS_BYTES`` of text, a corrupt gzip stream, or
    invalid UTF-8 (naming the file and the 1-based line number).
    """
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{path}: is a folder, expected a text file")
    try:
        data = read_bytes_bounded(path, MAX_CORPUS_BYTES, gunzip=True)
    except DataTooLarge as error:
        raise DataError(f"{path}: {error}; attnmt reads text from regular files only, of at most "
                        f"{MAX_CORPUS_BYTES >> 30} GiB of text (write it to a file first, or split it)") from None
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a folder, expected a text file") from None
    except PermissionError:
        raise DataError(f"{path}: permission denied") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise DataError(f"{path}: corrupt gzip file ({error})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line_start = data.rfind(b"\n", 0, error.start) + 1
        line_number = data.count(b"\n", 0, error.start) + 1
        column = error.start - line_start + 1
        raise DataError(
            f"{path}: line {line_number} is not valid UTF-8 "
            f"(byte {data[error.start]:#04x} at byte column {column}: {error.reason})"
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline ending the last line does not start another line
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_parallel(
    src_path: str | Path,
    tgt_path: str | Path,
    max_length: int | None = None,
) -> ParallelCorpus:
    """Read a parallel corpus from two line-aligned files (plain or .gz, UTF-8).

    max_length: drop pairs where either side has more than this many whitespace tokens
        (None keeps every pair; use None for validation and test sets).

    Raises DataError when a file is missing or malformed, or when the files have different line
    counts (the message names both files and both counts).
    """
    if max_length is not None and max_length < 1:
        raise ValueError(f"read_parallel: max_length must be >= 1 or None, got {max_length}")
    src_path, tgt_path = Path(src_path), Path(tgt_path)
    src_lines = read_lines(src_path)
    tgt_lines = read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise DataError(
            f"parallel files have different line counts: {src_path} has {len(src_lines)} lines, "
            f"{tgt_path} has {len(tgt_lines)} lines"
        )
    src: list[str] = []
    tgt: list[str] = []
    line_numbers: list[int] = []
    dropped_empty = dropped_long = 0
    for line_number, (src_line, tgt_line) in enumerate(zip(src_lines, tgt_lines), start=1):
        src_line, tgt_line = src_line.strip(), tgt_line.strip()
        if not src_line or not tgt_line:
            dropped_empty += 1
            continue
        if max_length is not None and (
            len(src_line.split()) > max_length or len(tgt_line.split()) > max_length
        ):
            dropped_long += 1
            continue
        src.append(src_line)
        tgt.append(tgt_line)
        line_numbers.append(line_number)
    corpus = ParallelCorpus(
        src=src,
        tgt=tgt,
        dropped_empty=dropped_empty,
        dropped_long=dropped_long,
        src_path=src_path,
        tgt_path=tgt_path,
        line_numbers=line_numbers,
    )
    if dropped_empty:
        logger.warning("%s + %s: dropped %d pairs with an empty side", src_path, tgt_path, dropped_empty)
    if dropped_long:
        logger.info(
            "%s + %s: dropped %d pairs longer than %d tokens", src_path, tgt_path, dropped_long, max_length
        )
    if not corpus.src:
        raise DataError(f"{src_path} + {tgt_path}: no sentence pairs left (files empty or all pairs dropped)")
    return corpus
