"""What a translator returns (``Translation``) and what every translator offers, stated once
(``BaseTranslator``).

attnmt's own ``Translator`` and ``HFTranslator`` (a Hugging Face model) both derive from it, and
everything that reads a translator (the viewer, ``attnmt serve``, the aligner, the agreement of
attention and saliency) asks only for this. A translator

- translates sentences (``translate``) with the search settings of ``search_config``;
- force-decodes given source and output ids (``force_decode``), the one way attention is read;
- computes gradient saliency of given outputs (``saliency``);
- encodes words alone (``encode_words``), for aligning words with pieces;
- says where it runs (``device``, ``describe``) and which ids end a sentence or stand for an unknown
  piece (``eos_id``, ``unk_id``);

and from those, here: ``read_attention`` ([L, h, T, S] per translation) and ``read_attributions``
([T, S] per translation) of the translations it made.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnmt.attribution.methods import AttributionOptions, applicable
from attnmt.models.readout import DEFAULT_MAX_TOKENS, ForcedReading
from attnmt.runs.run_config import SearchConfig

__all__ = ["BaseTranslator", "Translation", "Translations", "source_texts"]


@dataclass
class Translation:
    """One translated sentence.

    source       the input sentence as given
    output       the detokenized translation
    src_pieces   source subword pieces + "</s>": the columns of ``attention``
    out_pieces   output subword pieces + "</s>": the rows of ``attention``
    attention    [len(out_pieces), len(src_pieces)] float array, or None when not asked for
    score        log-probability of the output (EOS included) under the model
    """

    source: str
    output: str
    src_pieces: list[str]
    out_pieces: list[str]
    attention: np.ndarray | None
    score: float


class Translations(list):
    """The list ``Translator.translate`` returns (of ``Translation``); in a notebook it renders as
    the interactive attention viewer when its translations carry attention (module docstring)."""


def source_texts(sentences: Sequence[Any]) -> list[str]:
    """``sentences`` as a list of strings; TypeError naming the first item that is not one (``None``
    would otherwise be translated as the text "None")."""
    texts = list(sentences)
    wrong = next((number for number, text in enumerate(texts) if not isinstance(text, str)), None)
    if wrong is not None:
        raise TypeError(f"translate: sentence {wrong + 1} is {_shown(texts[wrong])}, not a string")
    return texts


def _shown(value: Any) -> str:
    return "None" if value is None else f"a {type(value).__name__} ({str(value)[:40]!r})"


class BaseTranslator(ABC):
    """The contract of a translator (module docstring); subclasses implement the abstract methods."""

    search_config: SearchConfig

    @property
    @abstractmethod
    def device(self) -> torch.device:
        """Where the model (and so every search) runs."""

    @property
    @abstractmethod
    def eos_id(self) -> int:
        """The id that ends a source and an output."""

    @property
    @abstractmethod
    def unk_id(self) -> int:
        """The id of an unknown piece."""

    @property
    @abstractmethod
    def attributed_model(self) -> torch.nn.Module:
        """The module saliency and the attributions read (``attnmt.attribution``): attnmt's own
        model, or a Hugging Face model's read-out."""

    @abstractmethod
    def describe(self) -> str:
        """One line for stderr: the model, the device and the precision searches run on."""

    @abstractmethod
    def translate(self, sentences: Sequence[str], beam: int | None = None, return_attention: bool = False,
                  batch_size: int | None = None, *, progress: bool = False) -> Translations:
        """One Translation per sentence, in order (greedy for ``beam=1``, else beam search); the
        defaults come from ``search_config``. Translators may take more options by keyword."""

    @abstractmethod
    def encode_words(self, words: Sequence[str], side: str = "source") -> list[list[int]]:
        """The piece ids of each word encoded alone on ``side`` ("source" or "target")."""

    @abstractmethod
    def force_decode(
        self, sources: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]], *,
        max_tokens: int = DEFAULT_MAX_TOKENS, log_probs: bool = False, progress: bool = False,
        foils: Sequence[Sequence[int]] | None = None,
    ) -> Iterator[tuple[int, ForcedReading]]:
        """``(pair index, ForcedReading)`` for complete rows of source and output ids, batch by batch."""

    @abstractmethod
    def attribute(
        self, sources: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]],
        options: AttributionOptions | str = "gradient", *, max_tokens: int = DEFAULT_MAX_TOKENS, progress: bool = False,
        foils: Sequence[Sequence[int]] | None = None,
    ) -> Iterator[tuple[int, np.ndarray]]:
        """``(pair index, scores [T, S])`` for complete rows of source and output ids, batch by
        batch (``attnmt.attribution.reader.attribute``; ``foils`` for a contrastive explanation)."""

    @abstractmethod
    def target_pieces(self, ids: Sequence[int]) -> list[str]:
        """The target pieces of ``ids``, as ``Translation.out_pieces`` writes them."""

    @abstractmethod
    def target_ids(self, pieces: Sequence[str]) -> list[int]:
        """The ids of target ``pieces`` (the unknown piece's id for one the vocabulary lacks)."""

    @abstractmethod
    def piece_ids(self, translations: Sequence[Translation]) -> tuple[list[list[int]], list[list[int]]]:
        """The source and output piece ids of ``translations``, as this translator's tokenizers number them."""

    # ---- read from the above, the same for every translator ------------------------------------

    def read_attention(self, translations: Sequence[Translation], progress: bool = False) -> list[np.ndarray]:
        """Every decoder layer's and head's cross-attention of each translation's output, read by
        force-decoding it (``attnmt.models.readout``): one [L, h, T, S] float32 array each."""
        sources, outputs = self.piece_ids(translations)
        weights: list[np.ndarray] = [np.empty(0)] * len(translations)
        for index, reading in self.force_decode(sources, outputs, progress=progress):
            weights[index] = reading.weights
        return weights

    def read_attributions(self, translations: Sequence[Translation], options: AttributionOptions | str = "gradient",
                          progress: bool = False, foils: Sequence[Sequence[int]] | None = None) -> list[np.ndarray]:
        """An attribution of each translation's output over its source pieces, read by
        force-decoding it (``attnmt.attribution``): one [T, S] float32 array each, row t for output
        piece t. ``options``: a method name or an AttributionOptions; ``foils``: per translation a
        row of foil ids as long as its output (``attnmt.attribution.forced.NO_FOIL`` where none)."""
        sources, outputs = self.piece_ids(translations)
        scores: list[np.ndarray] = [np.empty(0)] * len(translations)
        for index, matrix in self.attribute(sources, outputs, options, progress=progress, foils=foils):
            scores[index] = matrix
        return scores

    def attribution_methods(self) -> list[str]:
        """The methods of the attribution registry that can read this translator's model."""
        return applicable(self.attributed_model)

    def saliency(self, *args: Any, **kwargs: Any) -> Iterator[tuple[int, np.ndarray]]:
        """Deprecated (removed in 0.4): ``attribute``."""
        self._deprecated("saliency", "attribute")
        return self.attribute(*args, **kwargs)

    def read_saliency(self, translations: Sequence[Translation], options: AttributionOptions | str = "gradient",
                      progress: bool = False) -> list[np.ndarray]:
        """Deprecated (removed in 0.4): ``read_attributions``."""
        self._deprecated("read_saliency", "read_attributions")
        return self.read_attributions(translations, options, progress)

    def saliency_methods(self) -> list[str]:
        """Deprecated (removed in 0.4): ``attribution_methods``."""
        self._deprecated("saliency_methods", "attribution_methods")
        return self.attribution_methods()

    def _deprecated(self, old: str, new: str) -> None:
        name = type(self).__name__
        warnings.warn(f"{name}.{old} is deprecated; use {name}.{new}", DeprecationWarning, stacklevel=3)
