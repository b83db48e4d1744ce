"""Hugging Face translation models in attnmt: ``--hf MODEL`` on ``translate``, ``view`` and ``align``.

Any ``AutoModelForSeq2SeqLM`` whose forward pass returns its cross-attention (Marian, BART and
mBART, T5, M2M100, ...), from a local folder or a hub name, with its own tokenizer. It needs the
optional extra ``pip install 'attnmt[hf]'`` (``transformers``). The model runs with eager
attention, the implementation that returns its weights.

- ``HFTranslator`` translates with the model's own ``generate`` (beam search with ``num_beams``),
  and reads the cross-attention of its output by force-decoding it: the decoder, given the start
  token and the output, computes at each step the weights it computed while generating. Every
  layer and head: ``[L, h, T, S]``, T output pieces (EOS included), S source pieces (EOS
  included). ``Translation.attention`` is the mean over the heads of the last layer.
- ``HFAligner`` reads a given translation instead (``attnmt align``): each word of both sides is
  tokenized alone with the model's tokenizer (so pieces merge back into words exactly), the target
  is force-decoded, and the weights of one layer (default the penultimate) and one head (default
  the mean) become word weights as for attnmt's own translators (``attnmt.alignment.translator``).

Language codes of multilingual models (mBART, M2M100) are the tokenizer's to set
(``tokenizer.src_lang``); the aligner tokenizes words without special tokens.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from attnmt.alignment.translator import ForcedAttention, Span
from attnmt.device import check_device_name, describe, resolve_device
from attnmt.errors import ConfigError
from attnmt.models.common import default_layer, resolve_position
from attnmt.search import SearchConfig
from attnmt.translator import Translation, Translations

__all__ = ["HFAligner", "HFTranslator"]


def _transformers():
    """The transformers module; ConfigError when the optional extra is missing."""
    if importlib.util.find_spec("transformers") is None:
        raise ConfigError("--hf needs the transformers package; pip install 'attnmt[hf]'")
    import transformers  # an optional extra: imported only when a Hugging Face model is asked for

    warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")  # Marian's, not ours
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


class HFTranslator:
    """A Hugging Face encoder–decoder model with attnmt's translator interface (module docstring).

    ``translate`` returns ``Translations`` like ``attnmt.translator.Translator.translate``, and
    ``layer_head_attention`` gives every layer's and head's weights of one of them."""

    def __init__(self, model, tokenizer, name: str, search: SearchConfig | None = None) -> None:
        self.model, self.tokenizer, self.name = model.eval(), tokenizer, name
        self.search = search or SearchConfig()
        config = model.config
        self.decoder_start = model.generation_config.decoder_start_token_id
        if self.decoder_start is None:
            self.decoder_start = config.decoder_start_token_id
        if self.decoder_start is None or tokenizer.pad_token_id is None:
            raise ConfigError(f"--hf {name}: the model names no decoder start or padding token; "
                              "it is not an encoder-decoder translation model")

    @classmethod
    def load(cls, name: str, device: str = "auto") -> HFTranslator:
        """The model and tokenizer ``name`` (a folder, or a hub name on a machine that can reach the
        hub) on ``device``; ConfigError in one line when it cannot be loaded."""
        transformers = _transformers()
        target = resolve_device(check_device_name(device))
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(name)
            model = transformers.AutoModelForSeq2SeqLM.from_pretrained(name, attn_implementation="eager")
        except (OSError, ValueError, KeyError) as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ConfigError(f"--hf {name}: could not load a sequence-to-sequence model and its tokenizer "
                              f"({first[:300]})") from None
        return cls(model.to(target), tokenizer, name)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def layers(self) -> int:
        return int(getattr(self.model.config, "decoder_layers", None) or self.model.config.num_decoder_layers)

    def describe(self) -> str:
        config = self.model.config
        return (f"Hugging Face {config.model_type} model {self.name}; "
                f"{describe(self.device, 'fp32')}")

    # ---- translation -------------------------------------------------------------------------

    def _forced(self, input_ids, attention_mask, decoder_input_ids, targets=None) -> tuple[np.ndarray, np.ndarray | None]:
        """Teacher forcing ``decoder_input_ids``: the cross-attention [B, L, h, T, S] float32 and,
        given ``targets`` [B, T] (the token each step predicts), their log-probabilities [B, T],
        taken on the device (the [B, T, V] log-probabilities never leave it)."""
        with torch.inference_mode():
            output = self.model(input_ids=input_ids, attention_mask=attention_mask,
                                decoder_input_ids=decoder_input_ids, output_attentions=True)
            if not output.cross_attentions or output.cross_attentions[0] is None:
                raise ConfigError(f"--hf {self.name}: the model returns no cross-attention")
            weights = torch.stack(output.cross_attentions, dim=1).float().cpu().numpy()
            if targets is None:
                return weights, None
            log_probs = torch.log_softmax(output.logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1))
        return weights, log_probs.squeeze(-1).cpu().numpy()

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
        beam = self.search.beam if beam is None else beam
        batch_size = self.search.batch_size if batch_size is None else batch_size
        for name, value in (("beam", beam), ("batch size", batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        sentences = [str(sentence) for sentence in sentences]
        results: list[Translation] = []
        bar = tqdm(total=len(sentences), desc=f"translate (beam {beam})", unit="sent", leave=False) \
            if progress else None
        for start in range(0, len(sentences), batch_size):
            chunk = sentences[start:start + batch_size]
            encoded = self.tokenizer(chunk, return_tensors="pt", padding=True).to(self.device)
            longest = int(encoded["attention_mask"].sum(dim=1).max())
            new_tokens = int(self.search.max_len_a * longest + self.search.max_len_b) + 1
            with torch.inference_mode():
                generated = self.model.generate(**encoded, num_beams=beam, num_return_sequences=1,
                                                max_new_tokens=new_tokens, output_scores=False)
            # The output force-decoded: its attention, and its log-probability (the score).
            weights, log_probs = self._forced(encoded["input_ids"], encoded["attention_mask"], generated[:, :-1],
                                              targets=generated[:, 1:])
            for row, sentence in enumerate(chunk):
                results.append(self._translation(sentence, encoded, generated, weights if return_attention else None,
                                                 log_probs, row))
            if bar is not None:
                bar.update(len(chunk))
        if bar is not None:
            bar.close()
        return Translations(results)

    def _translation(self, sentence: str, encoded, generated, weights, log_probs, row: int) -> Translation:
        source = encoded["input_ids"][row][encoded["attention_mask"][row].bool()].tolist()
        sequence = generated[row, 1:].tolist()  # without the decoder start token
        eos = self.tokenizer.eos_token_id
        output = sequence[: sequence.index(eos) + 1] if eos in sequence else \
            [token for token in sequence if token != self.tokenizer.pad_token_id]
        attention = None
        if weights is not None:
            columns = encoded["attention_mask"][row].bool().cpu().numpy()
            attention = weights[row, -1, :, : len(output)][:, :, columns].mean(axis=0)
        return Translation(
            source=sentence,
            output=self.tokenizer.decode(output, skip_special_tokens=True).strip(),
            src_pieces=self.tokenizer.convert_ids_to_tokens(source),
            out_pieces=self.tokenizer.convert_ids_to_tokens(output),
            attention=attention, score=float(log_probs[row, : len(output)].sum()),
        )

    def layer_head_attention(self, translation: Translation) -> np.ndarray:
        """[L, h, T, S] cross-attention of ``translation``'s output, force-decoded (float64)."""
        source = self.tokenizer.convert_tokens_to_ids(translation.src_pieces)
        output = self.tokenizer.convert_tokens_to_ids(translation.out_pieces)
        input_ids = torch.tensor([source], device=self.device)
        decoder_input_ids = torch.tensor([[self.decoder_start] + output[:-1]], device=self.device)
        return self._forced(input_ids, torch.ones_like(input_ids), decoder_input_ids)[0][0].astype(np.float64)


class HFAligner:
    """A Hugging Face model's attention as a weight function for ``attnmt.alignment.align_corpus``:
    ``aligner(src_words, tgt_words) -> [len(tgt), len(src)]`` (module docstring). Pairs given to
    ``precompute`` are force-decoded in batches of ``batch_size`` and looked up afterwards."""

    def __init__(self, translator: HFTranslator, layer: int | None = None, head: int | str | None = None,
                 shift: bool | None = None, renormalize: bool = True, batch_size: int = 32) -> None:
        self.translator = translator
        self.layers = translator.layers
        self.heads = int(getattr(translator.model.config, "decoder_attention_heads", None)
                         or translator.model.config.num_heads)
        self.layer = resolve_position(default_layer(self.layers) if layer is None else layer, self.layers,
                                      "decoder layer") + 1
        self.head = None if head is None or head == "mean" else resolve_position(head, self.heads, "head") + 1
        self.shift, self.renormalize, self.batch_size = bool(shift), renormalize, batch_size
        self._cache: dict[tuple[tuple[str, ...], tuple[str, ...]], np.ndarray] = {}

    def describe(self) -> str:
        heads = f"head {self.head} of {self.heads}" if self.head is not None else f"mean of {self.heads} heads"
        reading = "input reading (shift)" if self.shift else "output reading"
        return f"{self.translator.name}: layer {self.layer} of {self.layers}, {heads}, {reading}"

    def _pieces(self, words: Sequence[str], target: bool) -> tuple[list[int], list[Span]]:
        tokenizer = self.translator.tokenizer
        encoded = tokenizer(text_target=list(words), add_special_tokens=False) if target else \
            tokenizer(list(words), add_special_tokens=False)
        ids: list[int] = []
        spans: list[Span] = []
        for word_ids in encoded["input_ids"]:
            word_ids = list(word_ids) or [tokenizer.unk_token_id]
            spans.append((len(ids), len(ids) + len(word_ids)))
            ids.extend(word_ids)
        return ids, spans

    def _force_decode(self, src_sentences, tgt_sentences, progress: bool) -> Iterator[tuple[int, ForcedAttention]]:
        translator = self.translator
        pad, eos = translator.tokenizer.pad_token_id, translator.tokenizer.eos_token_id
        live = [k for k in range(len(src_sentences)) if len(src_sentences[k]) and len(tgt_sentences[k])]
        bar = tqdm(total=len(live), desc="force-decoding", unit=" pairs", leave=False) if progress else None
        for start in range(0, len(live), self.batch_size):
            chunk = live[start:start + self.batch_size]
            sources = [self._pieces(src_sentences[k], target=False) for k in chunk]
            targets = [self._pieces(tgt_sentences[k], target=True) for k in chunk]
            width = max(len(ids) for ids, _ in sources) + 1
            height = max(len(ids) for ids, _ in targets) + 1
            input_ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            attention_mask = torch.zeros((len(chunk), width), dtype=torch.long)
            decoder_input_ids = torch.full((len(chunk), height), pad, dtype=torch.long)
            for row, ((src_ids, _), (tgt_ids, _)) in enumerate(zip(sources, targets)):
                input_ids[row, : len(src_ids) + 1] = torch.tensor(src_ids + [eos])
                attention_mask[row, : len(src_ids) + 1] = 1
                decoder_input_ids[row, : len(tgt_ids) + 1] = torch.tensor([translator.decoder_start] + tgt_ids)
            device = translator.device
            weights, _ = translator._forced(input_ids.to(device), attention_mask.to(device),
                                            decoder_input_ids.to(device))
            for row, k in enumerate(chunk):
                (src_ids, src_spans), (tgt_ids, tgt_spans) = sources[row], targets[row]
                n, m = len(tgt_ids), len(src_ids)
                yield k, ForcedAttention(weights=np.ascontiguousarray(weights[row, :, :, : n + 1, : m + 1]),
                                         src_spans=src_spans, tgt_spans=tgt_spans)
            if bar is not None:
                bar.update(len(chunk))
        if bar is not None:
            bar.close()

    def weights_many(self, src_sentences, tgt_sentences, progress: bool = False) -> list[np.ndarray]:
        results = [np.zeros((len(tgt), len(src))) for src, tgt in zip(src_sentences, tgt_sentences)]
        for index, forced in self._force_decode(src_sentences, tgt_sentences, progress):
            results[index] = forced.word_weights(self.layer, self.head, self.shift, self.renormalize)
        return results

    def precompute(self, src_sentences, tgt_sentences, progress: bool = False) -> None:
        weights = self.weights_many(src_sentences, tgt_sentences, progress)
        self._cache = {(tuple(s), tuple(t)): w for s, t, w in zip(src_sentences, tgt_sentences, weights)}

    def __call__(self, src_tokens: Sequence[str], tgt_tokens: Sequence[str]) -> np.ndarray:
        cached = self._cache.get((tuple(src_tokens), tuple(tgt_tokens)))
        if cached is not None:
            return cached
        return self.weights_many([list(src_tokens)], [list(tgt_tokens)])[0]
