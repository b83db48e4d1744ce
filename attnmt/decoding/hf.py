"""Hugging Face translation models in attnmt: ``--hf MODEL`` on ``translate``, ``view`` and ``align``.

Any ``AutoModelForSeq2SeqLM`` whose forward pass returns its cross-attention (Marian, BART and
mBART, T5, M2M100, ...), from a local folder or a hub name, with its own tokenizer. It needs the
optional extra ``pip install 'attnmt[hf]'`` (``transformers``). The model runs with eager
attention, the implementation that returns its weights, and never with remote code.

``HFTranslator`` has the interface of ``attnmt.decoding.translator.Translator``: ``translate``
uses the model's own ``generate`` (beam search with ``num_beams``), then reads the output's
cross-attention and log-probability by force-decoding it (``attnmt.models.readout``, through
``HFReadout``): every layer and head, ``[L, h, T, S]``, T output pieces (EOS included), S source
pieces (the tokenizer's specials included). ``Translation.attention`` is the mean over the heads of
the last layer. ``force_decode`` and ``encode_words`` serve the aligner
(``attnmt.alignment.translator_attention``), which tokenizes each word alone.

Language codes of multilingual models (mBART, M2M100) are the tokenizer's to set
(``tokenizer.src_lang``); words are tokenized without special tokens.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from attnmt.attribution.methods import AttributionOptions
from attnmt.attribution.reader import attribute
from attnmt.decoding.base import BaseTranslator, Translation, Translations, source_texts
from attnmt.errors import ConfigError
from attnmt.models.readout import DEFAULT_MAX_TOKENS, ForcedReading, SpecialIds, force_decode
from attnmt.runs.run_config import SearchConfig
from attnmt.runtime.checks import is_int
from attnmt.runtime.device import check_device_name, describe, resolve_device

__all__ = ["HFReadout", "HFTranslator"]


def _transformers() -> Any:
    """The transformers module; ConfigError when the optional extra is missing."""
    if importlib.util.find_spec("transformers") is None:
        raise ConfigError("a Hugging Face model needs the transformers package; pip install 'attnmt[hf]'")
    import transformers  # an optional extra: imported only when a Hugging Face model is asked for

    warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")  # Marian's, not ours
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


class HFReadout(torch.nn.Module):
    """A Hugging Face encoder–decoder behind attnmt's model contract, for ``attnmt.models.readout``:
    ``(src, src_mask, tgt_in, return_attention="heads") -> (logits [B, T, V], weights [B, L, h, T, S])``."""

    def __init__(self, model: Any, name: str) -> None:
        super().__init__()
        self.model, self.name = model, name

    @property
    def source_token_embedding(self) -> torch.nn.Module:
        """The encoder's token table (a Marian model shares it with the decoder; the encoder calls
        it first), whose output saliency is taken against (``attnmt.attribution``)."""
        return self.model.get_encoder().embed_tokens

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.vocab_size)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor,
                return_attention: str = "heads") -> Any:
        output = self.model(input_ids=src, attention_mask=src_mask.long(), decoder_input_ids=tgt_in,
                            output_attentions=True)
        if not output.cross_attentions or output.cross_attentions[0] is None:
            raise ConfigError(f"hf={self.name}: the model returns no cross-attention")
        return output.logits, torch.stack(output.cross_attentions, dim=1)


class HFTranslator(BaseTranslator):
    """A Hugging Face encoder–decoder model with attnmt's translator interface (module docstring)."""

    def __init__(self, model: Any, tokenizer: Any, name: str, search_config: SearchConfig | None = None) -> None:
        self.model, self.tokenizer, self.name = model.eval(), tokenizer, name
        self.search_config = search_config or SearchConfig()
        config = model.config
        decoder_start = model.generation_config.decoder_start_token_id
        if decoder_start is None:
            decoder_start = config.decoder_start_token_id
        if decoder_start is None or tokenizer.pad_token_id is None:
            raise ConfigError(f"hf={name}: the model names no decoder start or padding token; "
                              "it is not an encoder-decoder translation model")
        self.decoder_start = int(decoder_start)
        self.specials = SpecialIds(pad=int(tokenizer.pad_token_id), start=self.decoder_start, unk=self.unk_id)
        self.readout = HFReadout(self.model, name).eval()  # the wrapper keeps the model in eval mode

    @classmethod
    def load(cls, name: str, device: str = "auto") -> HFTranslator:
        """The model and tokenizer ``name`` (a folder, or a hub name on a machine that can reach the
        hub) on ``device``; ConfigError in one line when it cannot be loaded."""
        local = Path(name).expanduser()
        looks_local = name.startswith(("/", ".", "~")) or name.count("/") > 1 or local.exists()
        if looks_local and not local.is_dir():
            raise ConfigError(f"hf={name}: no such folder" + (" (it is a file; give the model's folder)"
                                                              if local.exists() else ""))
        transformers = _transformers()
        target = resolve_device(check_device_name(device))
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(name, trust_remote_code=False)
            model = transformers.AutoModelForSeq2SeqLM.from_pretrained(name, attn_implementation="eager",
                                                                       trust_remote_code=False)
        except Exception as error:  # noqa: BLE001 - a damaged folder fails inside transformers or safetensors in
            # many ways (OSError, a SafetensorError, an UnpicklingError, a RuntimeError of torch): each is one line
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ConfigError(f"hf={name}: could not load a sequence-to-sequence model and its tokenizer "
                              f"({first[:300]})") from None
        return cls(model.to(target), tokenizer, name)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def layers(self) -> int:
        """Decoder layers (each attends over the source)."""
        return int(getattr(self.model.config, "decoder_layers", None) or self.model.config.num_decoder_layers)

    @property
    def heads(self) -> int:
        """Heads of each decoder layer's cross-attention."""
        return int(getattr(self.model.config, "decoder_attention_heads", None) or self.model.config.num_heads)

    @property
    def eos_id(self) -> int:
        """The id that ends a source and an output."""
        return int(self.tokenizer.eos_token_id)

    @property
    def unk_id(self) -> int:
        """The id of an unknown piece (what a word the tokenizer encodes as nothing becomes)."""
        return int(self.tokenizer.unk_token_id if self.tokenizer.unk_token_id is not None else self.eos_id)

    def describe(self) -> str:
        return f"Hugging Face {self.model.config.model_type} model {self.name}; {describe(self.device, 'fp32')}"

    # ---- translation -------------------------------------------------------------------------

    def translate(
        self,
        sentences: Sequence[str],
        beam: int | None = None,
        return_attention: bool = False,
        batch_size: int | None = None,
        progress: bool = False,
        **ignored: Any,
    ) -> Translations:
        """Translate with ``model.generate`` (``num_beams=beam``, at most max_len_a · |x| + max_len_b + 1
        new tokens, |x| the longest source of the batch of ``batch_size``: generate has one limit per
        call); with ``return_attention`` each Translation has its [T, S] attention."""
        if isinstance(sentences, str):
            raise TypeError("translate: sentences must be a list of strings, not one string")
        beam = self.search_config.beam if beam is None else beam
        batch_size = self.search_config.batch_size if batch_size is None else batch_size
        for name, value in (("beam", beam), ("batch_size", batch_size)):
            if not is_int(value) or value < 1:
                raise ConfigError(f"{name}={value!r}: must be an integer >= 1")
        sentences = source_texts(sentences)
        results: list[Translation] = []
        bar = tqdm(total=len(sentences), desc=f"translate (beam {beam})", unit="sent", leave=False) \
            if progress else None
        for start in range(0, len(sentences), batch_size):
            chunk = sentences[start:start + batch_size]
            sources, outputs = self._generate(chunk, beam)
            readings: list[ForcedReading] = [ForcedReading(np.empty(0))] * len(chunk)
            for index, reading in self.force_decode(sources, outputs, log_probs=True):
                readings[index] = reading
            results.extend(self._translation(sentence, source, output, reading, return_attention)
                           for sentence, source, output, reading in zip(chunk, sources, outputs, readings))
            if bar is not None:
                bar.update(len(chunk))
        if bar is not None:
            bar.close()
        return Translations(results)

    def _generate(self, sentences: list[str], beam: int) -> tuple[list[list[int]], list[list[int]]]:
        """The source ids of each sentence (the tokenizer's specials included) and the output ids
        ``generate`` found for it, up to its EOS (without the decoder start token)."""
        encoded = self.tokenizer(sentences, return_tensors="pt", padding=True).to(self.device)
        longest = int(encoded["attention_mask"].sum(dim=1).max())
        new_tokens = int(self.search_config.max_len_a * longest + self.search_config.max_len_b) + 1
        with torch.inference_mode():
            generated = self.model.generate(**encoded, num_beams=beam, num_return_sequences=1,
                                            max_new_tokens=new_tokens, output_scores=False)
        sources, outputs = [], []
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        for row in range(len(sentences)):
            sources.append(encoded["input_ids"][row][encoded["attention_mask"][row].bool()].tolist())
            sequence = generated[row, 1:].tolist()
            sequence = sequence[: sequence.index(eos) + 1] if eos in sequence else \
                [token for token in sequence if token != pad]
            outputs.append(sequence or [eos])
        return sources, outputs

    def _translation(self, sentence: str, source: list[int], output: list[int], reading: ForcedReading,
                     return_attention: bool) -> Translation:
        attention = reading.weights[-1].mean(axis=0) if return_attention else None  # the last layer's heads
        score = float(reading.log_probs.sum()) if reading.log_probs is not None else float("nan")
        return Translation(
            source=sentence, output=self.tokenizer.decode(output, skip_special_tokens=True).strip(),
            src_pieces=self.tokenizer.convert_ids_to_tokens(source),
            out_pieces=self.tokenizer.convert_ids_to_tokens(output), attention=attention, score=score,
        )

    # ---- reading the attention of given outputs ------------------------------------------------

    def encode_words(self, words: Sequence[str], side: str = "source") -> list[list[int]]:
        """The piece ids of each word of ``words`` tokenized alone (the target side with the
        tokenizer's target settings), without special tokens."""
        if not len(words):
            return []
        encoded = self.tokenizer(text_target=list(words), add_special_tokens=False) if side == "target" else \
            self.tokenizer(list(words), add_special_tokens=False)
        return [list(ids) for ids in encoded["input_ids"]]

    def force_decode(
        self, sources: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]], *,
        max_tokens: int = DEFAULT_MAX_TOKENS, log_probs: bool = False, progress: bool = False,
        foils: Sequence[Sequence[int]] | None = None,
    ) -> Iterator[tuple[int, ForcedReading]]:
        """``attnmt.models.readout.force_decode`` with this model and its special ids."""
        return force_decode(self.readout, sources, outputs, max_tokens=max_tokens, log_probs=log_probs,
                            specials=self.specials, progress=progress, foils=foils)

    @property
    def attributed_model(self) -> torch.nn.Module:
        """The read-out of the Hugging Face model (``HFReadout``): saliency and erasure read it."""
        return self.readout

    def target_pieces(self, ids: Sequence[int]) -> list[str]:
        """The target pieces of ``ids`` under the model's tokenizer."""
        return list(self.tokenizer.convert_ids_to_tokens([int(i) for i in ids]))

    def target_ids(self, pieces: Sequence[str]) -> list[int]:
        """The ids of target ``pieces`` under the model's tokenizer."""
        return [int(i) for i in self.tokenizer.convert_tokens_to_ids(list(pieces))]

    def piece_ids(self, translations: Sequence[Translation]) -> tuple[list[list[int]], list[list[int]]]:
        """The source and output piece ids of ``translations`` under the model's tokenizer."""
        return ([self.tokenizer.convert_tokens_to_ids(t.src_pieces) for t in translations],
                [self.tokenizer.convert_tokens_to_ids(t.out_pieces) for t in translations])

    def attribute(
        self, sources: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]],
        options: AttributionOptions | str = "gradient", *, max_tokens: int = DEFAULT_MAX_TOKENS, progress: bool = False,
        foils: Sequence[Sequence[int]] | None = None,
    ) -> Iterator[tuple[int, np.ndarray]]:
        """``attnmt.attribution.reader.attribute`` with this model and its special ids."""
        return attribute(self.readout, sources, outputs, **AttributionOptions.of(options).as_keywords(),
                         max_tokens=max_tokens, specials=self.specials, progress=progress, foils=foils)
