"""Word vectors: a vocabulary, a ``[V, d]`` float32 matrix, and lookup of tokenized sentences.

Two file formats are read:

* **fastText ``.vec`` text** (also gzip-compressed): a header line ``count dim``, then one word a
  line followed by its ``dim`` numbers, separated by single spaces. This is what ``attnmt embed``
  writes and what the aligned fastText vectors (e.g. ``wiki.en.align.vec``) are distributed as.
* **pickle + npz**: a pickled ``dict`` word → row index plus an ``.npz`` archive holding an
  ``embeddings`` array ``[V, d]``. Pickle can run code while loading: only open files you trust.

Sentences are tokenized simply: lower-cased and split on spaces (``str.split()``, so
runs of spaces or a trailing space never make empty tokens). A word missing from the vocabulary
gets the zero vector and is reported back to the caller (``lookup`` returns the unknown words).
"""

from __future__ import annotations

import gzip
import io
import json
import pickle
import warnings
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnmt.errors import DataError
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.checks import check_plain_name
from attnmt.runtime.reading import DataTooLarge, open_regular

__all__ = [
    "WordVectors",
    "load_pickle_npz_vectors",
    "load_vec",
    "load_vector_dir",
    "load_word_vectors",
    "save_vec",
    "save_vector_dir",
    "tokenize",
    "unknown_words",
]


def tokenize(sentence: str) -> list[str]:
    """Tokenization for word vectors: lower-case, then split on spaces (no empty tokens)."""
    return sentence.lower().split()


@dataclass
class WordVectors:
    """A vocabulary ``words`` (row order) and its vectors ``matrix: [V, d]`` (float32).

    ``index`` maps each word to its row. Words must be unique.
    """

    words: list[str]
    matrix: np.ndarray
    index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.words = list(self.words)
        matrix = np.asarray(self.matrix)
        if matrix.ndim != 2:
            raise ValueError(f"WordVectors: matrix must have shape [V, d], got {matrix.shape}")
        if matrix.shape[0] != len(self.words):
            raise ValueError(
                f"WordVectors: {len(self.words)} words but the matrix has {matrix.shape[0]} rows"
            )
        if matrix.dtype.kind not in "fiu":
            raise TypeError(f"WordVectors: matrix must be numeric, got dtype {matrix.dtype}")
        self.matrix = np.ascontiguousarray(matrix, dtype=np.float32)
        self.index = {word: row for row, word in enumerate(self.words)}
        if len(self.index) != len(self.words):
            counts = Counter(self.words)
            duplicate = next(word for word in self.words if counts[word] > 1)
            raise ValueError(f"WordVectors: the word {duplicate!r} appears more than once")

    @property
    def dim(self) -> int:
        """The number of dimensions d."""
        return int(self.matrix.shape[1])

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self.index

    def vector(self, word: str) -> np.ndarray:
        """The vector of one word, ``[d]``; the zero vector for an unknown word."""
        row = self.index.get(word)
        return np.zeros(self.dim, np.float32) if row is None else self.matrix[row].copy()

    def lookup(self, tokens: Sequence[str]) -> tuple[np.ndarray, list[str]]:
        """Vectors of a token sequence: ``([len(tokens), d] float32, unknown words)``.

        Unknown tokens get zero rows and are listed once each, in order of first appearance.
        """
        vectors = np.zeros((len(tokens), self.dim), np.float32)
        unknown: list[str] = []
        for position, token in enumerate(tokens):
            row = self.index.get(token)
            if row is None:
                if token not in unknown:
                    unknown.append(token)
            else:
                vectors[position] = self.matrix[row]
        return vectors, unknown

    def nearest(self, vector: np.ndarray, count: int = 5) -> list[tuple[str, float]]:
        """The ``count`` words whose vectors have the highest cosine with ``vector``."""
        vector = np.asarray(vector, dtype=np.float32)
        if vector.shape != (self.dim,):
            raise ValueError(f"nearest: vector must have shape [{self.dim}], got {vector.shape}")
        norms = np.linalg.norm(self.matrix, axis=1) * (np.linalg.norm(vector) or 1.0)
        cosines = (self.matrix @ vector) / np.where(norms > 0, norms, 1.0)
        best = np.argsort(-cosines, kind="stable")[:count]
        return [(self.words[row], float(cosines[row])) for row in best]


# --------------------------------------------------------------------------- fastText .vec


def _open_text(path: Path) -> io.TextIOBase:
    """A UTF-8 text stream of a plain or gzip file (recognised by its magic bytes)."""
    with open_regular(path) as probe:  # a FIFO or a device is refused (attnmt.runtime.reading)
        compressed = probe.read(2) == b"\x1f\x8b"
    raw = gzip.open(path, "rb") if compressed else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8", newline="\n")


def load_vec(path: str | Path, max_words: int | None = None) -> WordVectors:
    """Read fastText ``.vec`` text (plain or gzip): header ``count dim``, then ``word x1 … x_dim``.

    max_words: keep only the first ``max_words`` words (fastText files list frequent words first).
    Raises DataError naming the file and the 1-based line for a missing file, a bad header, a line
    with the wrong number of values or a non-number, a repeated word, or fewer/more lines than the
    header announces.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: word-vector file not found")
    try:
        with _open_text(path) as handle:
            return _parse_vec(handle, path, max_words)
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not valid UTF-8 ({error.reason})") from None
    except DataTooLarge as error:
        raise DataError(f"{path}: {error}") from None
    except (OSError, EOFError) as error:
        raise DataError(f"{path}: cannot read ({error})") from None


def _parse_vec(handle: Iterable[str], path: Path, max_words: int | None) -> WordVectors:
    lines = iter(handle)
    header = next(lines, "").split()
    try:
        count, dim = (int(value) for value in header)
        if count < 0 or dim <= 0:
            raise ValueError
    except ValueError:
        raise DataError(
            f"{path}:1: the header must be two positive integers 'count dim', got {' '.join(header)!r}"
        ) from None
    wanted = count if max_words is None else min(count, max_words)
    words: list[str] = []
    numbers: list[str] = []  # the text after each word, parsed in one call at the end (fast)
    seen: dict[str, int] = {}
    line_number = 1
    for line_number, line in enumerate(lines, start=2):
        if len(words) == wanted:
            if max_words is not None:
                break
            if line.strip():
                raise DataError(f"{path}:{line_number}: more words than the {count} the header announces")
            continue
        word, _, rest = line.rstrip("\r\n").rstrip(" ").partition(" ")
        if not word:
            raise DataError(f"{path}:{line_number}: the line does not start with a word")
        found = len(rest.split(" ")) if rest else 0
        if found != dim:
            raise DataError(
                f"{path}:{line_number}: expected the word and {dim} numbers, found {found} numbers after {word!r}"
            )
        if word in seen:
            raise DataError(f"{path}:{line_number}: the word {word!r} already appeared on line {seen[word]}")
        seen[word] = line_number
        words.append(word)
        numbers.append(rest)
    if len(words) < wanted:
        raise DataError(
            f"{path}: the header announces {count} words but the file ends after {len(words)} "
            f"(line {line_number})"
        )
    matrix = _parse_numbers(numbers, dim, path)
    check_finite(matrix, words, path, line_of_row=lambda row: row + 2)
    return WordVectors(words, matrix)


def check_finite(matrix: np.ndarray, words: Sequence[str], source: str | Path,
                 line_of_row: Callable[[int], int] | None = None) -> None:
    """DataError naming the first word whose vector holds NaN or inf (attention over it would be
    NaN, and every link drawn from it meaningless)."""
    finite = np.isfinite(matrix).all(axis=1)
    if not finite.all():
        row = int(np.argmin(finite))
        where = f"{source}:{line_of_row(row)}" if line_of_row is not None else str(source)
        bad = matrix[row][~np.isfinite(matrix[row])][0]
        raise DataError(f"{where}: the vector of {words[row]!r} holds {bad} ({int((~finite).sum())} vectors are not "
                        "finite); word vectors must be finite numbers")


def _parse_numbers(rows: list[str], dim: int, path: Path) -> np.ndarray:
    """``[len(rows), dim]`` float32 from rows of ``dim`` space-separated numbers (line 2 = row 0)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy warns (instead of failing) when it meets a non-number
        try:
            flat = np.fromstring(" ".join(rows), dtype=np.float32, sep=" ") if rows else np.empty(0, np.float32)
        except (ValueError, DeprecationWarning):
            flat = None
    if flat is None or flat.size != len(rows) * dim:
        for row, text in enumerate(rows):  # find the culprit to name it
            bad = next((value for value in text.split(" ") if not _is_number(value)), None)
            if bad is not None:
                raise DataError(f"{path}:{row + 2}: {bad!r} is not a number")
        raise DataError(f"{path}: could not read the numbers")  # pragma: no cover - every value parsed alone
    return flat.reshape(len(rows), dim)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def save_vec(vectors: WordVectors, path: str | Path, *, overwrite: bool = False, precision: int = 6) -> Path:
    """Write ``vectors`` as fastText ``.vec`` text, atomically (``attnmt.runtime.atomic_files``).

    Numbers are written with ``precision`` significant digits (fastText's own precision).
    Raises DataError when ``path`` exists and ``overwrite`` is False.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise DataError(f"{path} exists; refusing to overwrite it (remove it or ask to overwrite)")
    check_finite(vectors.matrix, vectors.words, f"the vectors for {path}")
    for word in vectors.words:
        if not word or any(character.isspace() for character in word):
            raise ValueError(f"save_vec: the word {word!r} is empty or contains white space")
    row_format = " ".join([f"%.{precision}g"] * vectors.dim)
    lines = [f"{len(vectors)} {vectors.dim}"]
    lines.extend(f"{word} {row_format % tuple(row)}" for word, row in zip(vectors.words, vectors.matrix.tolist()))
    return write_text_atomic(path, "\n".join(lines) + "\n")


# --------------------------------------------------------------------------- a pickled index and an npz matrix


class _Refused(Exception):
    """A pickle asked for something other than plain dicts, strings and integers."""


class _WordIndexUnpickler(pickle.Unpickler):
    """Reads pickles of plain data only: every class, function or persistent id is refused, so no
    code of the file runs (a pickle runs code only through the objects it names)."""

    def find_class(self, module: str, name: str):
        raise _Refused(f"a reference to {module}.{name}")

    def persistent_load(self, pid):
        raise _Refused("a persistent id")


def _read_word_index(path: Path) -> dict[str, int]:
    """The pickled ``{word: row}`` dict, read by the restricted unpickler; DataError otherwise."""
    try:
        with open_regular(path) as handle:
            mapping = _WordIndexUnpickler(handle).load()
    except _Refused as refused:
        advice = ("; write the indices as Python ints ({word: int(index) ...}) or use .vec"
                  if "numpy" in str(refused) else "")
        raise DataError(f"{path}: refused to read it: it holds {refused}, and a word -> index pickle "
                        f"holds only a dict of str -> int; nothing of the file was built{advice}") from None
    except DataTooLarge as error:
        raise DataError(f"{path}: {error}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, IndexError, KeyError, TypeError, MemoryError) as error:
        raise DataError(f"{path}: not a readable pickle ({error})") from None
    if not isinstance(mapping, dict):
        raise DataError(f"{path}: expected a pickled dict word -> index, got {type(mapping).__name__}")
    for word, row in mapping.items():
        if not isinstance(word, str) or isinstance(row, bool) or not isinstance(row, (int, np.integer)):
            raise DataError(f"{path}: expected str -> int entries, found {word!r} -> {row!r}")
    return mapping


def _read_embeddings(path: Path) -> np.ndarray:
    """The ``embeddings`` [V, d] array of an ``.npz`` read without pickles; DataError otherwise."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            if "embeddings" not in archive.files:
                raise DataError(f"{path}: no 'embeddings' array (it holds {', '.join(archive.files) or 'nothing'})")
            embeddings = archive["embeddings"]
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise DataError(f"{path}: not a readable .npz archive ({error})") from None
    if embeddings.ndim != 2 or embeddings.dtype.kind not in "fiu":
        raise DataError(f"{path}: 'embeddings' must be a numeric [V, d] array, got {embeddings.dtype} "
                        f"{embeddings.shape}")
    return embeddings


def load_pickle_npz_vectors(word2int_path: str | Path, embeddings_path: str | Path) -> WordVectors:
    """Read the pickle + npz format: a pickled ``{word: row}`` dict and an ``.npz`` with ``embeddings``.

    Only rows named by the dictionary are kept, in order of row index. Raises DataError naming
    the file when it is missing, is not a dict of str → int, lacks the ``embeddings`` array, or
    when an index is out of range of the array. The pickle is read by a restricted unpickler that
    builds plain dicts, strings and integers only: a file that names any class or function (the
    way a pickle runs code) is refused before anything of it is built.
    """
    word2int_path, embeddings_path = Path(word2int_path), Path(embeddings_path)
    for path in (word2int_path, embeddings_path):
        if not path.is_file():
            raise DataError(f"{path}: file not found")
    mapping = _read_word_index(word2int_path)
    embeddings = _read_embeddings(embeddings_path)
    items = sorted(mapping.items(), key=lambda item: int(item[1]))
    for word, row in items:
        if not 0 <= int(row) < embeddings.shape[0]:
            raise DataError(
                f"{word2int_path}: the word {word!r} has index {row}, outside the {embeddings.shape[0]} "
                f"rows of {embeddings_path}"
            )
    rows = np.array([int(row) for _, row in items], dtype=np.int64)
    words = [word for word, _ in items]
    check_finite(embeddings[rows], words, embeddings_path)
    return WordVectors(words, embeddings[rows])


def load_word_vectors(paths: str | Path | Sequence[str | Path]) -> WordVectors:
    """Load vectors from one ``.vec`` file, or from a ``.pkl`` dict plus ``.npz`` matrix.

    ``paths`` is one path (fastText text) or two paths in any order, one ending in ``.npz``.
    """
    files = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(path) for path in paths]
    if len(files) == 1:
        return load_vec(files[0])
    if len(files) == 2:
        npz = [path for path in files if path.suffix.lower() == ".npz"]
        if len(npz) == 1:
            other = files[1] if files[0] is npz[0] else files[0]
            return load_pickle_npz_vectors(other, npz[0])
    raise DataError(
        "word vectors are one fastText .vec file, or a pickled word->index dict plus an .npz with "
        f"'embeddings'; got {', '.join(map(str, files))}"
    )



# --------------------------------------------------------------------------- a folder of vectors

VECTOR_INFO_FILE = "vectors.json"


def save_vector_dir(
    folder: str | Path,
    src_vectors: WordVectors,
    tgt_vectors: WordVectors,
    info: dict,
    *,
    src_lang: str = "en",
    tgt_lang: str = "fr",
    overwrite: bool = False,
) -> dict[str, Path]:
    """Write ``<folder>/<src_lang>.vec``, ``<tgt_lang>.vec`` and ``vectors.json``, each atomically.

    ``vectors.json`` holds ``info`` plus the languages and file names, so :func:`load_vector_dir`
    knows which file is the source side. Raises DataError when a file exists and ``overwrite``
    is False (checked for all three before anything is written).
    """
    folder = Path(folder)
    if src_lang == tgt_lang:
        raise ValueError(f"save_vector_dir: src_lang and tgt_lang are both {src_lang!r}")
    paths = {
        "src": folder / f"{src_lang}.vec",
        "tgt": folder / f"{tgt_lang}.vec",
        "info": folder / VECTOR_INFO_FILE,
    }
    if not overwrite:
        existing = [str(path) for path in paths.values() if path.exists()]
        if existing:
            raise DataError(f"{', '.join(existing)} already exist(s); refusing to overwrite (pass overwrite=True)")
    save_vec(src_vectors, paths["src"], overwrite=True)
    save_vec(tgt_vectors, paths["tgt"], overwrite=True)
    record = dict(info, src_lang=src_lang, tgt_lang=tgt_lang,
                  src_file=paths["src"].name, tgt_file=paths["tgt"].name)
    write_text_atomic(paths["info"], json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    return paths


def load_vector_dir(folder: str | Path) -> tuple[WordVectors, WordVectors, dict]:
    """Read a folder written by :func:`save_vector_dir` (or holding ``en.vec`` and ``fr.vec``).

    Returns ``(src_vectors, tgt_vectors, info)``. Without ``vectors.json`` the source is
    ``en.vec`` and the target ``fr.vec``. Raises DataError when the folder or a file is missing.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: no such folder of word vectors")
    info: dict = {}
    info_path = folder / VECTOR_INFO_FILE
    if info_path.is_file():
        try:
            info = json.loads(info_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise DataError(f"{info_path}: not valid JSON ({error})") from None
    if not isinstance(info, dict):
        raise DataError(f"{info_path}: not a vectors.json written by attnmt embed (expected a JSON object)")
    # names read from a file are names: the vectors lie in this folder, never elsewhere
    src_file = folder / check_plain_name(info.get("src_file", "en.vec"), f"{info_path}: src_file")
    tgt_file = folder / check_plain_name(info.get("tgt_file", "fr.vec"), f"{info_path}: tgt_file")
    src_vectors, tgt_vectors = load_vec(src_file), load_vec(tgt_file)
    if src_vectors.dim != tgt_vectors.dim:
        raise DataError(
            f"{src_file} has {src_vectors.dim}-dimensional vectors but {tgt_file} has {tgt_vectors.dim}: "
            "they cannot share one space"
        )
    return src_vectors, tgt_vectors, info


def unknown_words(sentences: Sequence[Sequence[str]], vectors: WordVectors) -> Counter[str]:
    """How often each word of ``sentences`` that ``vectors`` lacks occurs (vector attention gives
    such a word a zero vector)."""
    return Counter(word for sentence in sentences for word in sentence if word not in vectors)
