"""Attention kept for your own analyses: ``attnmt translate --attention-out FILE`` writes it and
``attnmt.load_attention(FILE)`` reads it back.

Every translated sentence becomes one ``AttentionRecord``:

    source, output                 the input sentence and its translation (text)
    src_pieces [S], out_pieces [T] subword pieces, each ending with "</s>"
    src_words, out_words           the words those pieces form ("</s>" is a word of its own)
    src_word_of_piece [S]          for each source piece, the index of its word in src_words
    out_word_of_piece [T]          likewise for the output pieces
    weights [L, h, T, S] float32   the cross-attention of decoder layer l and head j: row t is
                                   output piece t, column s source piece s; every row sums to 1
                                   over the S source positions (there is no padding)
    attribution [T, S] float32     only when asked for (``--attribution METHOD``): the
                                   attribution (e.g. gradient saliency) of output piece t to
                                   source piece s (``attnmt.attribution``); None otherwise
    attribution_method             how it was read, e.g. "integrated gradients (50 steps)"
    attributions                   only from ``attnmt explain``: {method: [T, S] float32}, every
                                   attribution it measured (``attnmt.attribution``)
    explanation                    only from ``attnmt explain``: its figures for the sentence
                                   (comprehensiveness, sufficiency, the random baseline, the
                                   agreement with attention, counterfactual attention), as JSON

L is the number of decoder layers that attend over the source (1 for the RNN), h the number of
heads (1 for a single-head mechanism). The weights come from *force-decoding* the search's output:
teacher forcing on BOS + output under the model gives, step by step, the weights the search saw
(``attnmt.models.readout``).

Two formats, chosen by the file's suffix:

- ``.npz``: a NumPy archive (read without pickle): ``format``, ``records`` (the JSON list of the
  records without their weights) and ``weights_K`` for record K, shape [L, h, T, S]
  (``attribution_K`` [T, S] beside it when there is an attribution, ``attribution_K_M`` [T, S] for
  each attribution M the record names in ``attributions``).
- ``.jsonl``: one JSON object a line, with ``format``, ``shape`` [L, h, T, S], ``axes`` and
  ``weights`` as nested lists (the float32 values written exactly), ``attribution`` [T, S] when
  there is one, and ``attributions`` {method: [T, S]} when there are attributions.

Format 2 (0.3.1) names the attribution ``attribution`` and ``attribution_method``; format 1 (up to
0.3.0) named them ``saliency`` and ``saliency_method`` (``saliency_K`` in an archive). Both load;
``record.saliency``, ``record.saliency_method`` and ``record.word_saliency()`` still work and warn.
"""

from __future__ import annotations

import io
import json
import os
import warnings
import zipfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnmt.attribution.methods import NAMES as SALIENCY_METHODS
from attnmt.attribution.methods import AttributionOptions
from attnmt.data.pieces import group_pieces, merge_subwords
from attnmt.errors import ConfigError, DataError
from attnmt.runtime.atomic_files import write_bytes_atomic
from attnmt.runtime.reading import special_file_kind

__all__ = ["FORMATS", "AttentionRecord", "attention_lines", "attention_records", "load_attention", "save_attention"]

FORMAT = "attnmt-attention/2"
#: the formats load_attention reads: 1 named the attribution "saliency" (up to 0.3.0)
READABLE_FORMATS = ("attnmt-attention/1", FORMAT)
FORMATS = (".npz", ".jsonl")
AXES = ["layer", "head", "output piece", "source piece"]


@dataclass
class AttentionRecord:
    """One translated sentence and its attention over the source (module docstring)."""

    index: int
    source: str
    output: str
    src_pieces: list[str]
    out_pieces: list[str]
    src_words: list[str]
    out_words: list[str]
    src_word_of_piece: list[int]
    out_word_of_piece: list[int]
    weights: np.ndarray  # [L, h, T, S]
    attribution: np.ndarray | None = None  # [T, S]
    attribution_method: str | None = None
    attributions: dict[str, np.ndarray] | None = None  # method -> [T, S]
    explanation: dict[str, Any] | None = None

    @property
    def layers(self) -> int:
        return self.weights.shape[0]

    @property
    def heads(self) -> int:
        return self.weights.shape[1]

    def word_weights(self, layer: int = -1, head: int | None = None) -> np.ndarray:
        """[T', S'] over output and source words for one layer (default the last) and one head
        (default the mean over the heads): summed over a source word's pieces, averaged over an
        output word's pieces (``attnmt.data.pieces.merge_subwords``)."""
        per_head = self.weights[layer]
        matrix = per_head.mean(axis=0) if head is None else per_head[head]
        return merge_subwords(matrix, self.src_pieces, self.out_pieces)[0]

    def word_attribution(self) -> np.ndarray:
        """[T', S'] over output and source words: summed over a source word's pieces and over an
        output word's pieces (a word's log-probability is the sum of its pieces'). ValueError when
        there is none."""
        if self.attribution is None:
            raise ValueError("this record has no attribution (translate with --attribution METHOD)")
        return merge_subwords(self.attribution, self.src_pieces, self.out_pieces, output_words="sum")[0]

    @property
    def saliency(self) -> np.ndarray | None:
        """Deprecated (removed in 0.4): ``attribution``."""
        _deprecated("saliency", "attribution")
        return self.attribution

    @property
    def saliency_method(self) -> str | None:
        """Deprecated (removed in 0.4): ``attribution_method``."""
        _deprecated("saliency_method", "attribution_method")
        return self.attribution_method

    def word_saliency(self) -> np.ndarray:
        """Deprecated (removed in 0.4): ``word_attribution``."""
        _deprecated("word_saliency()", "word_attribution()")
        return self.word_attribution()

    def describe(self) -> dict[str, Any]:
        """Everything but the weights and the attribution, as JSON-ready values."""
        values = asdict(self)
        del values["weights"], values["attribution"]
        values["attributions"] = None if self.attributions is None else list(self.attributions)
        return values


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"AttentionRecord.{old} is deprecated; use AttentionRecord.{new}", DeprecationWarning,
                  stacklevel=3)


def _words(pieces: Sequence[str]) -> tuple[list[str], list[int]]:
    words, word_of_piece = [], [0] * len(pieces)
    for number, (word, start, stop) in enumerate(group_pieces(pieces)):
        words.append(word)
        word_of_piece[start:stop] = [number] * (stop - start)
    return words, word_of_piece


def attention_records(
    translator, translations: Sequence, indices: Sequence[int] | None = None,
    attribution: AttributionOptions | None = None,
) -> list[AttentionRecord]:
    """An AttentionRecord for each of ``translations`` (``Translator.translate``'s results), with
    every layer's and head's weights force-decoded (``translator.read_attention``) and, with
    ``attribution``, the attribution it says (``translator.read_attributions``). ``indices``
    numbers the records (default 0, 1, ...), e.g. with the input line each came from."""
    indices = range(len(translations)) if indices is None else indices
    scores = translator.read_attributions(translations, attribution) if attribution is not None and translations \
        else [None] * len(translations)
    records = []
    for index, translation, weights, matrix in zip(indices, translations, translator.read_attention(translations),
                                                   scores):
        src_words, src_word_of_piece = _words(translation.src_pieces)
        out_words, out_word_of_piece = _words(translation.out_pieces)
        records.append(AttentionRecord(
            index=int(index), source=translation.source, output=translation.output,
            src_pieces=list(translation.src_pieces), out_pieces=list(translation.out_pieces),
            src_words=src_words, out_words=out_words, src_word_of_piece=src_word_of_piece,
            out_word_of_piece=out_word_of_piece, weights=weights.astype(np.float32),
            attribution=None if matrix is None else matrix.astype(np.float32),
            attribution_method=None if attribution is None else attribution.describe(),
        ))
    return records


def check_attention_path(path: str | os.PathLike, overwrite: bool = False) -> Path:
    """``path`` as an --attention-out target: ConfigError for an unknown suffix, or an existing
    file without ``overwrite``; checked before any work."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise ConfigError(f"{path}: the attention file must end in {' or '.join(FORMATS)}, "
                          f"got {path.suffix or 'no suffix'!r}")
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder; give a file name")
    special = special_file_kind(path)
    if special is not None:
        raise ConfigError(f"{path}: is {special}, not a regular file; give a file name")
    if path.exists() and not overwrite:
        raise ConfigError(f"{path}: already exists; pass overwrite=True to replace it")
    return path


def save_attention(records: Sequence[AttentionRecord], path: str | os.PathLike) -> Path:
    """Write ``records`` to ``path`` (.npz or .jsonl, by its suffix) atomically; returns the path."""
    path = Path(path)
    if path.suffix.lower() == ".npz":
        arrays: dict[str, Any] = {
            "format": np.array(FORMAT),
            "records": np.array(json.dumps([record.describe() for record in records], ensure_ascii=False)),
            **{f"weights_{number}": record.weights for number, record in enumerate(records)},
            **{f"attribution_{number}": record.attribution for number, record in enumerate(records)
               if record.attribution is not None},
            **{f"attribution_{number}_{method}": matrix for number, record in enumerate(records)
               for method, matrix in (record.attributions or {}).items()},
        }
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)
        return write_bytes_atomic(path, buffer.getvalue())
    if path.suffix.lower() == ".jsonl":
        return write_bytes_atomic(path, attention_lines(records).encode("utf-8"))
    raise ConfigError(f"{path}: the attention file must end in {' or '.join(FORMATS)}")


def attention_lines(records: Sequence[AttentionRecord]) -> str:
    """``records`` as the lines of a .jsonl attention file (what ``load_attention`` reads), one JSON
    object a line."""
    lines = []
    for record in records:
        values = {"format": FORMAT, **record.describe(), "shape": list(record.weights.shape), "axes": AXES,
                  "weights": record.weights.tolist()}
        if record.attribution is not None:
            values["attribution"] = record.attribution.tolist()
        if record.attributions is not None:
            values["attributions"] = {method: matrix.tolist() for method, matrix in record.attributions.items()}
        lines.append(json.dumps(values, ensure_ascii=False) + "\n")
    return "".join(lines)


_OPTIONAL_FIELDS = ("attribution", "attribution_method", "attributions", "explanation")
#: format 1's names of the attribution's keys (up to 0.3.0) -> format 2's
_FORMAT_1_KEYS = {"saliency": "attribution", "saliency_method": "attribution_method"}


_TEXT_FIELDS = ("source", "output")
_WORD_LISTS = ("src_pieces", "out_pieces", "src_words", "out_words")


def _check_fields(values: Any, where: str) -> None:
    """DataError naming the field when a record's fields are not what ``translate`` writes: a
    hand-edited or foreign file is refused here, not in a later traceback."""
    if not isinstance(values, dict):
        raise DataError(f"{where}: not an attention record of attnmt (a {type(values).__name__}, not a mapping)")
    missing = [key for key in ("index", *_TEXT_FIELDS, *_WORD_LISTS, "src_word_of_piece", "out_word_of_piece")
               if key not in values]
    if missing:
        raise DataError(f"{where}: not an attention record of attnmt (no {', '.join(missing)})")
    if not isinstance(values["index"], int) or isinstance(values["index"], bool) or values["index"] < 0:
        raise DataError(f"{where}: index must be an integer >= 0, got {values['index']!r}")
    for key in _TEXT_FIELDS:
        if not isinstance(values[key], str):
            raise DataError(f"{where}: {key} must be a string, got {values[key]!r:.80}")
    for key in _WORD_LISTS:
        if not isinstance(values[key], list) or not all(isinstance(word, str) for word in values[key]):
            raise DataError(f"{where}: {key} must be a list of strings")
    for side in ("src", "out"):
        owners, pieces, words = values[f"{side}_word_of_piece"], values[f"{side}_pieces"], values[f"{side}_words"]
        if (not isinstance(owners, list) or len(owners) != len(pieces)
                or not all(isinstance(k, int) and not isinstance(k, bool) and 0 <= k < len(words) for k in owners)):
            raise DataError(f"{where}: {side}_word_of_piece must give, for each of the {len(pieces)} pieces, the "
                            f"number of its word (0 to {len(words) - 1})")
    method = values.get("attribution_method")
    if method is not None and not isinstance(method, str):
        raise DataError(f"{where}: attribution_method must be a string or null, got {method!r:.80}")
    explanation = values.get("explanation")
    if explanation is not None and not isinstance(explanation, dict):
        raise DataError(f"{where}: explanation must be a mapping or null")


def _real_array(value: Any, what: str, where: str) -> np.ndarray:
    """``value`` as a float32 array: finite real numbers only (a complex, text or object array, NaN
    or infinity is a DataError naming ``what``)."""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:
        raise DataError(f"{where}: {what} are not an array of numbers ({error})") from None
    if array.dtype.kind not in "biuf":
        raise DataError(f"{where}: {what} must be real numbers, got an array of {array.dtype}")
    array = array.astype(np.float32)
    if not np.isfinite(array).all():
        raise DataError(f"{where}: {what} hold a value that is not finite (NaN or infinity)")
    return array


def _attributions(found: Any, where: str) -> dict[str, np.ndarray] | None:
    """The record's attributions {method: [T, S]} as float32 arrays (DataError for anything else)."""
    if found is None:
        return None
    if not isinstance(found, dict) or not all(method in SALIENCY_METHODS for method in found):
        raise DataError(f"{where}: attributions must map method names ({', '.join(SALIENCY_METHODS)}) to [T, S] "
                        "arrays")
    return {method: _real_array(matrix, f"the {method} attributions", where) for method, matrix in found.items()}


def _current_keys(values: Any) -> Any:
    """A record's values with format 1's keys (``saliency``, ``saliency_method``) under format 2's names."""
    if not isinstance(values, dict):
        return values
    return {_FORMAT_1_KEYS.get(key, key): value for key, value in values.items()}


def _record(values: Any, weights: Any, attribution: Any, where: str, attributions: Any = None) -> AttentionRecord:
    values = _current_keys(values)
    _check_fields(values, where)
    weights = _real_array(weights, "the weights", where)
    if weights.size and not (weights.min() >= 0 and weights.max() <= 1 + 1e-4):
        raise DataError(f"{where}: the weights must lie in [0, 1] (attention weights), found "
                        f"{float(weights.min()):.3g} to {float(weights.max()):.3g}")
    attribution = None if attribution is None else _real_array(attribution, "the attribution values", where)
    record = AttentionRecord(**{key: values[key] for key in AttentionRecord.__dataclass_fields__
                                if key not in ("weights", *_OPTIONAL_FIELDS)},
                             weights=weights, attribution=attribution,
                             attribution_method=values.get("attribution_method"),
                             attributions=_attributions(attributions, where), explanation=values.get("explanation"))
    shape = (len(record.out_pieces), len(record.src_pieces))
    if weights.ndim != 4 or weights.shape[2:] != shape:
        raise DataError(f"{where}: weights of shape {list(weights.shape)}, expected [L, h, {shape[0]}, {shape[1]}]")
    if attribution is not None and attribution.shape != shape:
        raise DataError(f"{where}: attribution of shape {list(attribution.shape)}, expected [{shape[0]}, {shape[1]}]")
    for method, matrix in (record.attributions or {}).items():
        if matrix.shape != shape:
            raise DataError(f"{where}: {method} attributions of shape {list(matrix.shape)}, "
                            f"expected [{shape[0]}, {shape[1]}]")
    return record


def _archived_attributions(archive: Any, number: int, values: Any) -> dict[str, Any] | None:
    """Record ``number``'s attribution arrays of an .npz archive, by the methods it names."""
    methods = values.get("attributions") if isinstance(values, dict) else None
    if methods is None:
        return None
    if not isinstance(methods, list) or not all(method in SALIENCY_METHODS for method in methods):
        raise DataError(f"record {number}: attributions must list method names ({', '.join(SALIENCY_METHODS)})")
    return {method: archive[f"attribution_{number}_{method}"] for method in methods}


def _archived_attribution(archive: Any, number: int) -> Any:
    """Record ``number``'s attribution array of an .npz archive (format 1 named it saliency_K), or None."""
    for key in (f"attribution_{number}", f"saliency_{number}"):
        if key in archive:
            return archive[key]
    return None


def load_attention(path: str | os.PathLike) -> list[AttentionRecord]:
    """Read a file written by ``attnmt translate --attention-out`` (.npz or .jsonl); DataError,
    naming the file (and line), when it is missing or not such a file."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    if path.suffix.lower() == ".npz":
        try:
            with np.load(path, allow_pickle=False) as archive:
                if "format" not in archive or str(archive["format"]) not in READABLE_FORMATS:
                    raise DataError(f"{path}: not an attention file of attnmt (no format {FORMAT!r})")
                described = json.loads(str(archive["records"]))
                if not isinstance(described, list):
                    raise DataError(f"{path}: not an attention file of attnmt (its records are not a list)")
                return [_record(values, archive[f"weights_{number}"], _archived_attribution(archive, number),
                                f"{path}: record {number}", _archived_attributions(archive, number, values))
                        for number, values in enumerate(described)]
        except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as error:
            raise DataError(f"{path}: not a readable .npz attention file ({type(error).__name__}: {error})") from None
    if path.suffix.lower() == ".jsonl":
        records = []
        with open(path, encoding="utf-8") as handle:
            try:
                for number, line in enumerate(handle, start=1):
                    if not line.strip():
                        continue
                    try:
                        values = json.loads(line)
                    except json.JSONDecodeError as error:
                        raise DataError(f"{path}, line {number}: not JSON ({error.msg})") from None
                    if not isinstance(values, dict) or values.get("format") not in READABLE_FORMATS:
                        raise DataError(f"{path}, line {number}: not an attention record of attnmt "
                                        f"(no format {FORMAT!r})")
                    records.append(_record(values, values.get("weights"), _current_keys(values).get("attribution"),
                                           f"{path}, line {number}", values.get("attributions")))
            except UnicodeDecodeError as error:
                raise DataError(f"{path}: not UTF-8 ({error.reason})") from None
        return records
    raise DataError(f"{path}: an attention file ends in {' or '.join(FORMATS)}")
