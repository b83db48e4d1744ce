"""The models ``attnmt serve`` shows: each loaded once at start, under a name the page uses, with a
lock so that one request at a time runs on it (requests on different models run side by side).

A run folder loads under the same trust rule as every other command (``Translator.load``: code a
run keeps runs only when this machine trained with it, or with ``trust_run_code``); a Hugging Face
model loads with ``HFTranslator.load``. Nothing a request says is ever a path: a request names a
model by the name given here, and an unknown name is refused.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnmt.alignment.protocol import read_gold_split
from attnmt.data import load_split
from attnmt.decoding.hf import HFTranslator
from attnmt.decoding.interventions import can_intervene, needs_head
from attnmt.decoding.translator import Translator
from attnmt.errors import AttnmtError, ConfigError
from attnmt.models import count_parameters
from attnmt.models.head_gates import head_count
from attnmt.runtime.checks import PLAIN_NAME

__all__ = ["MAX_EXAMPLES", "ServedModel", "gold_examples", "load_models", "test_examples"]

#: test-set sentences the page offers to pick from
MAX_EXAMPLES = 200


@dataclass
class ServedModel:
    """A translator under a ``name``; ``lock`` serialises the requests that run on it."""

    name: str
    translator: Any  # a BaseTranslator (Translator or HFTranslator); some views use a Translator's own methods
    origin: str  # the run folder or the Hugging Face model it came from
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def kind(self) -> str:
        """``rnn``, ``transformer`` or ``hf``."""
        if isinstance(self.translator, HFTranslator):
            return "hf"
        return str(self.translator.run_config.model.type)

    @property
    def can_decode_from_prefix(self) -> bool:
        return isinstance(self.translator, Translator)

    @property
    def can_intervene(self) -> bool:
        """Pin one step's attention, step through one step, or replace every step's: an RNN with a
        one-head mechanism, or attnmt's Transformer (in one cross-attention head the request names)."""
        return isinstance(self.translator, Translator) and can_intervene(self.translator.model)

    @property
    def intervenes_per_head(self) -> bool:
        """Whether an intervention names its head (``cross:LAYER:HEAD``): a Transformer."""
        return self.can_intervene and needs_head(self.translator.model)

    def describe(self) -> dict[str, Any]:
        """What the page needs to know of this model."""
        translator = self.translator
        if isinstance(translator, HFTranslator):
            layers, heads, attention = translator.layers, translator.heads, "Hugging Face cross-attention"
        else:
            model = translator.run_config.model
            attention = str(getattr(model, "attention", "scaled_dot"))
            layers = int(getattr(translator.model, "cross_attention_layers", 1))
            heads = int(getattr(translator.model, "attention_heads", 1))
        return {"name": self.name, "kind": self.kind, "origin": self.origin, "attention": attention,
                "layers": layers, "heads": heads, "parameters": count_parameters(translator.model),
                "head_parts": {part: list(shape) for part, shape in head_count(translator.attributed_model).items()},
                "prefix": self.can_decode_from_prefix, "intervene": self.can_intervene,
                "intervene_per_head": self.intervenes_per_head,
                "device": str(translator.device), "saliency_methods": self.saliency_methods}

    @property
    def saliency_methods(self) -> list[str]:
        """The methods of the saliency registry that can read this model."""
        return self.translator.attribution_methods()


def _name_of(origin: str, taken: set[str]) -> str:
    """A short, unique, plain name for a model: its run folder's or model's last part."""
    base = Path(origin.rstrip("/")).name or "model"
    base = base if PLAIN_NAME.fullmatch(base) and ".." not in base else "model"
    name, number = base, 2
    while name in taken:
        name, number = f"{base}-{number}", number + 1
    return name


def load_models(runs: Sequence[str | Path], hf: Sequence[str] = (), checkpoint: str = "best",
                device: str | None = None, trust_run_code: bool = False, say=print) -> list[ServedModel]:
    """Load every run folder and Hugging Face model once; ConfigError (one line) when none is given."""
    if not runs and not hf:
        raise ConfigError("give at least one RUN folder, or a Hugging Face model with --hf MODEL")
    models: list[ServedModel] = []
    taken: set[str] = set()
    for run in runs:
        translator = Translator.load(run, checkpoint, num_threads=1, device=device, trust_run_code=trust_run_code)
        translator.thread_reason = "each model on a thread of its own (attnmt.serve.jobs)"
        name = _name_of(str(run), taken)
        taken.add(name)
        models.append(ServedModel(name, translator, str(run)))
        say(f"loaded {name} ({run}): {translator.describe()}")
    for model_name in hf:
        hf_translator = HFTranslator.load(model_name, device=device or "auto")
        name = _name_of(model_name, taken)
        taken.add(name)
        models.append(ServedModel(name, hf_translator, model_name))
        say(f"loaded {name} ({model_name}): {hf_translator.describe()}")
    return models


def test_examples(models: Sequence[ServedModel], split: str = "test", limit: int = MAX_EXAMPLES) -> list[dict]:
    """The first ``limit`` pairs of the first run's ``split`` (its first test set), as
    ``{"source", "reference"}``; none when no run has that split's files here."""
    for served in models:
        config = getattr(served.translator, "run_config", None)
        if config is None:
            continue
        try:
            corpus = load_split(config.data, split)
        except (AttnmtError, OSError):  # the data is not on this machine: then there are no examples
            continue
        return [{"source": source, "reference": reference}
                for source, reference in zip(corpus.src[:limit], corpus.tgt[:limit])]
    return []


def gold_examples(prefix: str | Path, models: Sequence[ServedModel], limit: int = MAX_EXAMPLES) -> list[dict]:
    """The pairs of a gold alignment split, ``PREFIX.<src>-<tgt>.<src|tgt|naacl>`` (the languages of
    the first run), as examples with their links (``i-j``, 0-based, over the words split on spaces):
    ``{"source", "reference", "links"}`` (sure) and ``"possible"``. DataError naming a file."""
    config = next((getattr(served.translator, "run_config", None) for served in models
                   if getattr(served.translator, "run_config", None) is not None), None)
    languages = (config.data.src_lang, config.data.tgt_lang) if config is not None else ("en", "fr")
    path = Path(prefix)
    split = read_gold_split(path.parent, path.name, languages, lowercase=False)
    examples = []
    for src, tgt, sure, possible in zip(split.src, split.tgt, split.gold.sure, split.gold.possible):
        examples.append({"source": " ".join(src), "reference": " ".join(tgt),
                         "links": " ".join(f"{i}-{j}" for i, j in sorted(sure)),
                         "possible": " ".join(f"{i}-{j}" for i, j in sorted(possible - sure))})
    return examples[:limit]
