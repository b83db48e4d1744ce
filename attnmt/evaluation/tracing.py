"""Causal tracing for encoder–decoders (Meng et al., 2022, "Locating and Editing Factual
Associations in GPT", adapted to two stacks): where does the information that decides an output
word live?

For a sentence x, its translation y and output word w (the pieces y_a … y_b), with p(w) the
probability the model gives its pieces in turn under teacher forcing::

    clean        p*(w)   the model's own run
    corrupted    p̃(w)    the embeddings of the corrupted source words plus Gaussian noise of
                         ``noise`` (3) standard deviations of the embedding table, the mean over
                         ``samples`` seeded draws
    restored     p_h(w)  the corrupted run with one hidden state h set to its clean value

and the indirect effect of h is p_h(w) − p̃(w). The states are the encoder's, layer by layer and
source piece by source piece (layer 0: the embeddings, then each layer's output), and the
decoder's, layer by layer and output piece by output piece (the positions up to w's last piece;
those after it cannot change w). For an RNN (its parallel flow) the encoder states are the states
h̄_s its attention reads, and the decoder's its LSTM's output at each step. Restoring every state
of the last encoder layer and of the last decoder layer gives p*(w) exactly; restoring none gives
p̃(w).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from attnmt.data.pieces import group_pieces
from attnmt.decoding.translator import Translation, Translator
from attnmt.errors import ConfigError
from attnmt.models.readout import ATTNMT_SPECIALS

__all__ = ["Trace", "WordTracer", "trace_word"]


@dataclass
class Trace:
    """The figures of one traced output word (module docstring): the source and output pieces, the
    word (1-based) and its pieces, the corrupted source words, p*(w) and p̃(w), and the restored
    p_h(w) − p̃(w) as ``encoder`` [L_e + 1, S] and ``decoder`` [L_d, T'] (T' the output pieces up to
    w's last), and the seconds it took."""

    source: str
    output: str
    src_pieces: list[str]
    out_pieces: list[str]
    word: int
    word_pieces: list[int]
    corrupted: list[str]
    clean: float
    corrupt: float
    encoder: list[list[float]]
    decoder: list[list[float]]
    samples: int
    noise: float
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Stacks:
    """Where the states of one model are, and how to hold one: ``encoder`` and ``decoder`` modules
    whose output (or first output) is [B, L, d]; ``embedding`` the source token table."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.embedding: torch.nn.Module = model.source_token_embedding
        if hasattr(model, "encoder_layers") and hasattr(model, "decoder_layers"):
            self.encoder = [model.source_embeddings, *model.encoder_layers]
            self.decoder = list(model.decoder_layers)
        elif hasattr(model, "encoder_rnn") and getattr(model.config, "flow", None) == "parallel":
            self.encoder = [model.encoder_rnn]
            self.decoder = [model.decoder_rnn]
        else:
            raise ConfigError("trace: attnmt's Transformer, or an RNN of the parallel flow (its decoder's states "
                              "at every step come from one LSTM call)")


def _first(output: Any) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output


def _replaced(output: Any, tensor: torch.Tensor) -> Any:
    return (tensor, *output[1:]) if isinstance(output, tuple) else tensor


@contextmanager
def _recorded(modules: Sequence[torch.nn.Module]) -> Iterator[list[torch.Tensor | None]]:
    """Within the block, each module's (first) output of the last call is kept, in module order."""
    seen: list[torch.Tensor | None] = [None] * len(modules)

    def keeper(index: int) -> Callable[..., None]:
        def keep(module: Any, inputs: Any, output: Any) -> None:
            seen[index] = _first(output).detach()
        return keep

    handles = [module.register_forward_hook(keeper(k)) for k, module in enumerate(modules)]
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def _restoring(module: torch.nn.Module, clean: torch.Tensor, positions: Sequence[int]) -> Iterator[None]:
    """Within the block, ``module``'s output at ``positions`` is its clean value (every row)."""
    def restore(module: Any, inputs: Any, output: Any) -> Any:
        tensor = _first(output).clone()
        tensor[:, list(positions)] = clean[0, list(positions)].to(tensor.dtype)
        return _replaced(output, tensor)

    handle = module.register_forward_hook(restore)
    try:
        yield
    finally:
        handle.remove()


def _rnn_encoder_restore(model: Any, clean: torch.Tensor, positions: Sequence[int]) -> Any:
    """An RNN's attention reads the encoder states h̄ through ``prepare``: restore them there."""
    attention = model.attention
    original = attention.prepare

    def prepare(keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None = None) -> Any:
        keys, values = keys.clone(), values.clone()
        for position in positions:
            keys[:, position] = clean[0, position].to(keys.dtype)
            values[:, position] = clean[0, position].to(values.dtype)
        return original(keys, values, mask)

    attention.prepare = prepare
    return attention


@contextmanager
def _noised(table: torch.nn.Module, positions: Sequence[int], noise: torch.Tensor) -> Iterator[None]:
    """Within the block, the first call of the source table (the source's) adds ``noise``
    [samples, len(positions), E] at ``positions`` of every row."""
    called = [False]

    def add(module: Any, inputs: Any, output: torch.Tensor) -> torch.Tensor | None:
        if called[0]:
            return None  # a later call: the target side of a shared table
        called[0] = True
        output = output.clone()
        output[:, list(positions)] += noise.to(output.dtype)
        return output

    handle = table.register_forward_hook(add)
    try:
        yield
    finally:
        handle.remove()


def trace_word(  # noqa: PLR0913 (the options of `attnmt trace`, each a keyword)
    translator: Translator, sentence: str, word: int, *, corrupt: Sequence[str] | None = None,
    samples: int = 10, noise: float = 3.0, seed: int = 0, translation: Translation | None = None,
) -> Trace:
    """Trace output word ``word`` (from 1) of ``sentence``'s translation (module docstring).
    ``corrupt``: the source words to corrupt (default: the one the search's attention gives word's
    first piece most weight). ConfigError for a word beyond the output, or a corrupt list naming no
    source word."""
    started = time.perf_counter()
    tracer = WordTracer(translator, sentence, word, corrupt=corrupt, samples=samples, noise=noise, seed=seed,
                        translation=translation)
    with tracer.running():
        encoder_grid = [[tracer.restored([("encoder", layer, position)]) - tracer.corrupt
                         for position in range(tracer.source_length)] for layer in range(len(tracer.stacks.encoder))]
        decoder_grid = [[tracer.restored([("decoder", layer, position)]) - tracer.corrupt
                         for position in range(tracer.prefix_length)] for layer in range(len(tracer.stacks.decoder))]
    translation = tracer.translation
    return Trace(sentence, translation.output, list(translation.src_pieces), list(translation.out_pieces), word,
                 list(range(tracer.first_piece + 1, tracer.end_piece + 1)), tracer.corrupted_words, tracer.clean,
                 tracer.corrupt, encoder_grid, decoder_grid, samples, noise, time.perf_counter() - started)


class WordTracer:
    """One traced output word, ready to restore states (module docstring): ``clean`` p*(w) and
    ``corrupt`` p̃(w) once built; ``restored(states)`` p_h(w) with every state of ``states``
    ((``"encoder"`` or ``"decoder"``, layer, position) triples) restored at once, within
    ``running()``."""

    def __init__(self, translator: Translator, sentence: str, word: int, *,  # noqa: PLR0913 (trace_word's)
                 corrupt: Sequence[str] | None = None, samples: int = 10, noise: float = 3.0, seed: int = 0,
                 translation: Translation | None = None) -> None:
        self.model: Any = translator.model
        self.stacks = _Stacks(self.model)
        self.translation = translation or translator.translate([sentence], return_attention=True)[0]
        out_words = group_pieces(self.translation.out_pieces)
        if not 1 <= word <= len(out_words):
            raise ConfigError(f"--word {word}: the translation {self.translation.output!r} has {len(out_words)} "
                              "words (its end </s> counted); give 1 to " + str(len(out_words)))
        _, self.first_piece, self.end_piece = out_words[word - 1]
        src_words = group_pieces(self.translation.src_pieces)
        chosen = _corrupted_words(self.translation, src_words, self.first_piece, corrupt)
        self.corrupted_words = [src_words[n][0] for n in chosen]
        self.positions = [k for _, start, stop in (src_words[n] for n in chosen) for k in range(start, stop)]
        src_ids, out_ids = translator.piece_ids([self.translation])
        device = translator.device
        src = torch.tensor([src_ids[0]], device=device)
        src_mask = torch.ones_like(src, dtype=torch.bool)
        tgt_in = torch.tensor([[ATTNMT_SPECIALS.start, *out_ids[0][:self.end_piece - 1]]], device=device)
        self.targets = torch.tensor(out_ids[0][self.first_piece:self.end_piece], device=device)
        self.source_length, self.prefix_length = src.shape[1], tgt_in.shape[1]
        generator = torch.Generator().manual_seed(seed)
        table = torch.as_tensor(self.stacks.embedding.weight).detach().double()
        scale = noise * float(table.std())
        self.drawn = (torch.randn(samples, len(self.positions), table.shape[1], generator=generator,
                                  dtype=torch.float64) * scale).to(device)
        self.rows = (src.expand(samples, -1), src_mask.expand(samples, -1), tgt_in.expand(samples, -1))
        with self.running():
            with _recorded(self.stacks.encoder) as encoder, _recorded(self.stacks.decoder) as decoder:
                self.clean = float(self._probability(self.model(src, src_mask, tgt_in)[0])[0])
            if hasattr(self.model, "encoder_rnn"):  # its encoder runs its weights itself: read h̄ from encode
                encoder[0] = self.model.encode(src, src_mask).states.detach()
            self.states = {"encoder": encoder, "decoder": decoder}
            self.corrupt = self.restored([])

    @contextmanager
    def running(self) -> Iterator[None]:
        """The model in eval mode and inference mode, its mode given back after."""
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                yield
        finally:
            self.model.train(was_training)

    def _probability(self, logits: torch.Tensor) -> torch.Tensor:
        """p(w) of each row: the product of its pieces' probabilities."""
        log_probs = torch.log_softmax(logits.float(), dim=-1)[:, self.first_piece:self.end_piece]  # [n, pieces, V]
        picked = log_probs.gather(-1, self.targets.expand(log_probs.shape[0], -1).unsqueeze(-1)).squeeze(-1)
        return picked.sum(-1).exp()

    def restored(self, states: Sequence[tuple[str, int, int]]) -> float:
        """p_h(w) with the ``states`` restored (none: p̃(w)), the mean over the samples."""
        by_module: dict[tuple[str, int], list[int]] = {}
        for stack, layer, position in states:
            by_module.setdefault((stack, layer), []).append(position)
        with ExitStack() as hooks:
            hooks.enter_context(_noised(self.stacks.embedding, self.positions, self.drawn))
            for (stack, layer), positions in by_module.items():
                clean = self.states[stack][layer]
                assert clean is not None
                if stack == "encoder" and hasattr(self.model, "encoder_rnn"):
                    attention = _rnn_encoder_restore(self.model, clean, positions)
                    hooks.callback(delattr, attention, "prepare")
                else:
                    modules = self.stacks.encoder if stack == "encoder" else self.stacks.decoder
                    hooks.enter_context(_restoring(modules[layer], clean, positions))
            return float(self._probability(self.model(*self.rows)[0]).mean())


def _corrupted_words(translation: Translation, src_words: Sequence[tuple[str, int, int]], piece: int,
                     corrupt: Sequence[str] | None) -> list[int]:
    """The source words (their indices) to corrupt: those ``corrupt`` names, or the one the
    attention gives output piece ``piece`` most weight (its pieces summed), EOS left out."""
    words = [text for text, _, _ in src_words]
    if corrupt:
        chosen = [n for n, text in enumerate(words) if text in set(corrupt) and text != "</s>"]
        if not chosen:
            raise ConfigError(f"--corrupt {' '.join(corrupt)!r} names no source word; the source words are "
                              f"{' '.join(w for w in words if w != '</s>')}")
        return chosen
    attention = np.asarray(translation.attention)
    weights = [float(attention[piece, start:stop].sum()) if text != "</s>" else -1.0
               for text, start, stop in src_words]
    return [int(np.argmax(weights))]
