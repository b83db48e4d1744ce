"""Batches of sentence pairs, grouped by length and limited by a token budget.

What a batch holds, for B pairs with source ids x and target ids y (``batching`` adds the specials):

    src      [B, S]  x + EOS                   padded with PAD_ID = 0
    tgt_in   [B, T]  BOS + y                   what the decoder reads (teacher forcing)
    tgt_out  [B, T]  y + EOS                   what the decoder must predict at each step
    src_mask [B, S], tgt_mask [B, T]  bool, True = real token (may attend / counts in the loss)
    scored_mask [B, T]                bool or None: where the output layer runs (``token_ladder``)

The source ends with EOS so that even an empty sentence has one position to attend to, and so
the encoder sees where the sentence stops. S = max |x| + 1 and T = max |y| + 1 over the batch.

**Token budget.** ``max_tokens`` bounds the padded size of the larger of the two tensors:
``B · max(S, T) <= max_tokens``. So memory per batch is bounded, and short sentences come in big
batches. Pairs are sorted by length before packing so little of a batch is padding; a pair that
alone exceeds the budget gets a batch of its own (and a warning), rather than stopping training.

**Fewer shapes.** With ``pad_multiple`` m > 1, S and T are rounded up to a multiple of m
(S = m · ⌈(max |x| + 1) / m⌉, likewise T) and the budget counts the rounded widths. A batch then
has one of a few shapes instead of one of hundreds, which a CPU's kernels and its allocator keep
(docs/experiments.md, "Fewer shapes"); the extra positions are padding like any other: masked in
the attention and out of the loss. m = 1 pads to the batch's longest sentence, as before the option.

**The output layer's rows.** The model runs its output layer (and the softmax over the vocabulary,
a step's largest tensors) on the batch's N real target tokens only, and N differs in nearly every
batch: on a CPU each new N is a new matrix-product kernel that oneDNN compiles and keeps, about one
per step, and the kept kernels are what made a long training's memory grow (docs/experiments.md,
"Fewer shapes"). With ``token_ladder`` k > 0 the batch also names ``scored_mask``: the real
positions and the first padding positions (row by row) that bring their count up to the next of k
sizes per doubling,

    N' = step · ⌈N / step⌉,   step = max(1, 2^⌊log₂ N⌋ / k)        (at most B · T)

so N' takes a few dozen values and at most N/k + 1 rows more are computed. Their loss has weight 0
(``attnmt.models.losses.token_losses``): the loss and its gradients are those of the N real tokens.

**The rows of a batch.** With ``row_ladder`` k > 0 a batch's row count B is cut down to one of k
sizes per doubling (B' = step · ⌊B / step⌋, the same steps as above): packing closes a batch as
before, keeps its first B' pairs (the shorter ones) and starts the next batch with the rest. So B,
and with it every product over B · S or B · T rows, takes a few values; a batch loses fewer than
B/k rows, which the next batch takes. Which pairs train together changes (not the loss of a
batch), so a run keeps its ``row_ladder`` for good.

**Order.** With ``shuffle``, the order is a function of ``(seed, epoch)`` only: the same seed gives
the same batches on every machine and every rank; another epoch gives another order. Pairs are
shuffled, cut into large chunks, sorted by length inside each chunk (by max(S, T), then S, then
T; ties stay in shuffled order), packed, and the batches are shuffled. Without ``shuffle``, the
whole corpus is sorted by length.

**Distributed training.** With ``world_size`` > 1 the batch list is padded (repeating batches from
its start) to a multiple of ``world_size`` and rank r takes ``batches[r::world_size]``: every rank
gets the same number of batches, and together they cover every pair at least once.
"""

from __future__ import annotations

import atexit
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import numpy as np
import torch

from attnmt.data.special_tokens import BOS_ID, EOS_ID, PAD_ID

logger = logging.getLogger(__name__)

T = TypeVar("T")

# A shuffled chunk holds about this many batches' worth of pairs before it is sorted by length:
# big enough that batches are nearly free of padding, small enough that no two epochs share a batch.
CHUNK_BATCHES = 100


@dataclass
class Batch:
    """Padded tensors of B sentence pairs (see the module docstring for the layout).

    indices: position in the corpus (in the ``src_ids`` list) of each row, so outputs can be put
        back in corpus order (``restore_order``).
    The ``tgt_*`` fields are None in a batch made for inference from sources alone.
    """

    src: torch.Tensor  # [B, S] long
    src_lengths: torch.Tensor  # [B] long, counting the EOS
    src_mask: torch.Tensor  # [B, S] bool
    tgt_in: torch.Tensor | None  # [B, T] long
    tgt_out: torch.Tensor | None  # [B, T] long
    tgt_lengths: torch.Tensor | None  # [B] long, counting the EOS (= BOS in tgt_in)
    tgt_mask: torch.Tensor | None  # [B, T] bool
    num_tgt_tokens: int  # sum of tgt_lengths: the number of predictions the loss averages over
    indices: list[int]
    scored_mask: torch.Tensor | None = None  # [B, T] bool: tgt_mask and the padding positions that put its
    #                                          count on the token ladder (module docstring); None: tgt_mask

    @property
    def size(self) -> int:
        """B, the number of sentence pairs."""
        return len(self.indices)

    def __len__(self) -> int:
        return len(self.indices)

    def pin_memory(self) -> Batch:
        """A copy with every tensor in page-locked memory (for non-blocking copies to a GPU)."""
        return Batch(**{f.name: getattr(self, f.name).pin_memory() if isinstance(getattr(self, f.name), torch.Tensor)
                        else getattr(self, f.name) for f in fields(self)})

    def to(self, device: Any, non_blocking: bool = False) -> Batch:
        """A copy with every tensor on ``device``."""
        moved = {}
        for field in fields(self):
            value = getattr(self, field.name)
            moved[field.name] = value.to(device, non_blocking=non_blocking) if hasattr(value, "to") else value
        return Batch(**moved)


def _pad(rows: list[list[int]], width: int) -> list[list[int]]:
    return [row + [PAD_ID] * (width - len(row)) for row in rows]


def padded_width(width: T, pad_multiple: int = 1) -> T:
    """``width`` (an int, or a NumPy array of them) rounded up to a multiple of ``pad_multiple``
    (module docstring, "Fewer shapes")."""
    return -(-width // pad_multiple) * pad_multiple  # type: ignore[operator]


def _ladder_step(count: int, per_doubling: int) -> int:
    """The distance between the ladder's sizes in ``count``'s doubling: max(1, 2^⌊log₂ count⌋ / k)."""
    return max(1, (1 << (count.bit_length() - 1)) // per_doubling)


def ladder_size(count: int, per_doubling: int) -> int:
    """``count`` rounded up to the next of ``per_doubling`` sizes per doubling (module docstring, "The
    output layer's rows"); ``count`` itself when ``per_doubling`` is 0 or ``count`` is below 1."""
    if per_doubling <= 0 or count < 1:
        return count
    return padded_width(count, _ladder_step(count, per_doubling))


def ladder_floor(count: int, per_doubling: int) -> int:
    """``count`` rounded down to the next of ``per_doubling`` sizes per doubling (module docstring, "The
    rows of a batch"); ``count`` itself when ``per_doubling`` is 0 or ``count`` is below 1. Every
    count below 2 · ``per_doubling`` is a size of its own, so the result is at least 1."""
    if per_doubling <= 0 or count < 1:
        return count
    step = _ladder_step(count, per_doubling)
    return count // step * step


def scored_positions(mask: torch.Tensor, per_doubling: int) -> torch.Tensor:
    """``mask`` [B, T] (True = a real target token) with as many of its first False positions (row by
    row) set as bring its count to ``ladder_size`` (at most B · T): the positions the output layer
    is run on. A new tensor; ``mask`` itself is not changed."""
    flat = mask.reshape(-1)
    real = int(flat.sum())
    extra = min(ladder_size(real, per_doubling), flat.numel()) - real
    scored = flat.clone()
    if extra > 0:
        scored[torch.nonzero(~flat).reshape(-1)[:extra]] = True
    return scored.reshape(mask.shape)


def collate(
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]] | None,
    indices: Sequence[int],
    pad_multiple: int = 1,
    token_ladder: int = 0,
) -> Batch:
    """Build the Batch of the pairs at ``indices`` (ids without specials; EOS/BOS are added here),
    S and T rounded up to a multiple of ``pad_multiple``; with ``token_ladder`` > 0 it also names
    ``scored_mask`` (module docstring, "The output layer's rows")."""
    indices = [int(i) for i in indices]
    if not indices:
        raise ValueError("collate: indices is empty; a batch needs at least one pair")
    src_rows = [list(src_ids[i]) + [EOS_ID] for i in indices]
    src_lengths = torch.tensor([len(row) for row in src_rows], dtype=torch.long)
    src_width = padded_width(int(src_lengths.max()), pad_multiple)
    src = torch.tensor(_pad(src_rows, src_width), dtype=torch.long)
    src_mask = torch.arange(src_width).unsqueeze(0) < src_lengths.unsqueeze(1)
    if tgt_ids is None:
        return Batch(src, src_lengths, src_mask, None, None, None, None, 0, indices)
    tgt_in_rows = [[BOS_ID] + list(tgt_ids[i]) for i in indices]
    tgt_out_rows = [list(tgt_ids[i]) + [EOS_ID] for i in indices]
    tgt_lengths = torch.tensor([len(row) for row in tgt_out_rows], dtype=torch.long)
    tgt_width = padded_width(int(tgt_lengths.max()), pad_multiple)
    tgt_in = torch.tensor(_pad(tgt_in_rows, tgt_width), dtype=torch.long)
    tgt_out = torch.tensor(_pad(tgt_out_rows, tgt_width), dtype=torch.long)
    tgt_mask = torch.arange(tgt_width).unsqueeze(0) < tgt_lengths.unsqueeze(1)
    scored_mask = scored_positions(tgt_mask, token_ladder) if token_ladder > 0 else None
    return Batch(
        src, src_lengths, src_mask, tgt_in, tgt_out, tgt_lengths, tgt_mask, int(tgt_lengths.sum()), indices,
        scored_mask,
    )


def _check_budget(max_tokens: int | None, max_sentences: int | None) -> None:
    if max_tokens is None and max_sentences is None:
        raise ValueError("batching needs max_tokens or max_sentences (or both)")
    for name, value in (("max_tokens", max_tokens), ("max_sentences", max_sentences)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive integer or None, got {value!r}")


def _pack(
    order: np.ndarray,
    widths: np.ndarray,
    max_tokens: int | None,
    max_sentences: int | None,
    row_ladder: int = 0,
) -> list[list[int]]:
    """Cut ``order`` into consecutive batches with ``len(batch) · max(widths[batch]) <= max_tokens``;
    with ``row_ladder`` k > 0 each batch keeps ``ladder_floor(len, k)`` pairs and hands the rest on
    to the next (module docstring, "The rows of a batch")."""
    batches: list[list[int]] = []
    current: list[int] = []
    current_width = 0
    oversized = 0

    def close() -> None:
        nonlocal current, current_width
        keep = ladder_floor(len(current), row_ladder)
        batches.append(current[:keep])
        current = current[keep:]
        current_width = max((int(widths[index]) for index in current), default=0)

    for index in order.tolist():
        width = int(widths[index])
        while current and (
            (max_tokens is not None and (len(current) + 1) * max(current_width, width) > max_tokens)
            or (max_sentences is not None and len(current) >= max_sentences)
        ):
            close()
        current.append(index)
        current_width = max(current_width, width)
        if max_tokens is not None and width > max_tokens:
            oversized += 1
    while current:
        close()
    if oversized:
        _warn_once_per_budget(oversized, max_tokens)
    return batches


_OVERSIZED_WARNINGS: dict[int | None, int] = {}  # max_tokens -> batchings that found pairs over it


def _warn_once_per_budget(oversized: int, max_tokens: int | None) -> None:
    """The warning about pairs over ``max_tokens``, once per budget and process (validation and
    decoding batch many times); at exit, how many more batchings found such pairs."""
    seen = _OVERSIZED_WARNINGS.get(max_tokens, 0)
    _OVERSIZED_WARNINGS[max_tokens] = seen + 1
    if seen == 0:
        logger.warning("%d sentence pairs are longer than max_tokens=%d; each gets a batch of its own",
                       oversized, max_tokens)
        if not _OVERSIZED_REPORT:
            atexit.register(_report_repeats)
        _OVERSIZED_REPORT.add(max_tokens)


_OVERSIZED_REPORT: set[int | None] = set()  # budgets to report on at exit


def _report_repeats() -> None:
    for max_tokens in sorted(_OVERSIZED_REPORT, key=str):
        repeats = _OVERSIZED_WARNINGS.get(max_tokens, 1) - 1
        if repeats > 0:
            logger.warning("(the warning about max_tokens=%s applied to %d more batchings)", max_tokens, repeats)


def shard(batches: list[T], rank: int, world_size: int) -> list[T]:
    """Rank ``rank``'s share of ``batches``; all ranks get the same number (see module docstring)."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"shard: need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    if world_size == 1 or not batches:
        return list(batches)
    missing = -len(batches) % world_size
    padded = list(batches) + [batches[k % len(batches)] for k in range(missing)]
    return padded[rank::world_size]


def batch_indices(  # noqa: PLR0913 (the batching settings of the data section, each a keyword)
    src_lengths: Sequence[int],
    tgt_lengths: Sequence[int] | None,
    max_tokens: int | None = 4096,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    max_sentences: int | None = None,
    rank: int = 0,
    world_size: int = 1,
    pad_multiple: int = 1,
    row_ladder: int = 0,
) -> list[list[int]]:
    """Group corpus positions into batches; lengths are of the ids without specials.

    Returns lists of positions; ``collate`` (with the same ``pad_multiple``) turns one into a
    Batch. Deterministic in (seed, epoch).
    """
    _check_budget(max_tokens, max_sentences)
    if isinstance(pad_multiple, bool) or not isinstance(pad_multiple, int) or pad_multiple < 1:
        raise ValueError(f"pad_multiple must be a positive integer, got {pad_multiple!r}")
    if isinstance(row_ladder, bool) or not isinstance(row_ladder, int) or row_ladder < 0:
        raise ValueError(f"row_ladder must be an integer >= 0, got {row_ladder!r}")
    src_widths = np.asarray(src_lengths, dtype=np.int64) + 1  # + EOS
    if tgt_lengths is None:
        tgt_widths = np.zeros_like(src_widths)
    else:
        tgt_widths = np.asarray(tgt_lengths, dtype=np.int64) + 1  # + BOS / EOS
        if len(tgt_widths) != len(src_widths):
            raise ValueError(f"batching: {len(src_widths)} sources but {len(tgt_widths)} targets")
    # the widths the batches will have: what the budget counts and the sort groups
    src_widths, tgt_widths = padded_width(src_widths, pad_multiple), padded_width(tgt_widths, pad_multiple)
    widths = np.maximum(src_widths, tgt_widths)
    count = len(widths)
    if count == 0:
        return []
    if not shuffle:
        # Stable sort: equal lengths keep corpus order, so the batches never depend on a seed.
        order = np.lexsort((tgt_widths, src_widths, widths))
        return shard(_pack(order, widths, max_tokens, max_sentences, row_ladder), rank, world_size)

    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(count)
    mean_width = max(1.0, float(widths.mean()))
    if max_tokens is not None:
        batch_size_guess = max_tokens / mean_width
    else:
        assert max_sentences is not None  # _check_budget: one of the two is given
        batch_size_guess = float(max_sentences)
    if max_sentences is not None:
        batch_size_guess = min(batch_size_guess, max_sentences)
    chunk_size = max(1, int(CHUNK_BATCHES * batch_size_guess))
    batches: list[list[int]] = []
    for start in range(0, count, chunk_size):
        chunk = order[start : start + chunk_size]
        # lexsort is stable: ties keep their shuffled order, so equal-length pairs still mix.
        chunk = chunk[np.lexsort((tgt_widths[chunk], src_widths[chunk], widths[chunk]))]
        batches.extend(_pack(chunk, widths, max_tokens, max_sentences, row_ladder))
    batches = [batches[k] for k in rng.permutation(len(batches))]
    return shard(batches, rank, world_size)


def make_batches(  # noqa: PLR0913 (the batching settings of the data section, each a keyword)
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    max_tokens: int | None = 4096,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    max_sentences: int | None = None,
    rank: int = 0,
    world_size: int = 1,
    pad_multiple: int = 1,
    row_ladder: int = 0,
) -> list[Batch]:
    """Training or validation batches of (src_ids[i], tgt_ids[i]) pairs, ids without specials.

    max_tokens: bound on B · max(S, T) per batch (padded tokens of the larger tensor).
    max_sentences: optional bound on B.
    shuffle, seed, epoch: see the module docstring; validation uses ``shuffle=False``.
    rank, world_size: this process's equal share for distributed training.
    pad_multiple, row_ladder: fewer shapes (module docstring).
    """
    if len(src_ids) != len(tgt_ids):
        raise ValueError(f"make_batches: {len(src_ids)} sources but {len(tgt_ids)} targets")
    groups = batch_indices(
        [len(ids) for ids in src_ids],
        [len(ids) for ids in tgt_ids],
        max_tokens=max_tokens,
        shuffle=shuffle,
        seed=seed,
        epoch=epoch,
        max_sentences=max_sentences,
        rank=rank,
        world_size=world_size,
        pad_multiple=pad_multiple,
        row_ladder=row_ladder,
    )
    return [collate(src_ids, tgt_ids, group, pad_multiple) for group in groups]


def batches_for_inference(
    src_ids: Sequence[Sequence[int]],
    max_tokens: int | None = None,
    batch_size: int | None = None,
    tgt_ids: Sequence[Sequence[int]] | None = None,
) -> list[Batch]:
    """Batches for translating (or scoring) a whole file, longest sources first.

    Sorting by length keeps padding, and so wasted work, small; ``batch.indices`` and
    ``restore_order`` put the outputs back in file order. Give ``max_tokens`` (bound on B · S) or
    ``batch_size`` (bound on B), or both. ``tgt_ids`` adds targets, e.g. to compute perplexity.
    """
    if tgt_ids is not None and len(tgt_ids) != len(src_ids):
        raise ValueError(f"batches_for_inference: {len(src_ids)} sources but {len(tgt_ids)} targets")
    widths = [len(ids) + 1 for ids in src_ids]  # + EOS
    if tgt_ids is not None:
        widths = [max(width, len(ids) + 1) for width, ids in zip(widths, tgt_ids)]  # + BOS / EOS
    return [collate(src_ids, tgt_ids, group) for group in longest_first(widths, max_tokens, batch_size)]


def longest_first(
    widths: Sequence[int], max_tokens: int | None = None, batch_size: int | None = None
) -> list[list[int]]:
    """Positions 0 … N−1 grouped into batches, the widest first (a stable sort), each batch within
    ``len(batch) · max(widths[batch]) <= max_tokens`` and ``len(batch) <= batch_size``: the grouping
    of inference (``batches_for_inference``, ``attnmt.models.readout``)."""
    _check_budget(max_tokens, batch_size)
    if len(widths) == 0:
        return []
    array = np.asarray(widths, dtype=np.int64)
    return _pack(np.argsort(-array, kind="stable"), array, max_tokens, batch_size)


def restore_order(batches: Sequence[Batch], outputs: Sequence[Sequence[T]]) -> list[T]:
    """Outputs in corpus order: ``outputs[b][r]`` belongs to corpus position ``batches[b].indices[r]``.

    Every position 0..N-1 must appear exactly once across the batches (not true of sharded batches).
    """
    if len(batches) != len(outputs):
        raise ValueError(f"restore_order: {len(batches)} batches but {len(outputs)} output lists")
    total = sum(len(batch.indices) for batch in batches)
    placed: list[Any] = [None] * total
    filled = [False] * total
    for batch, batch_outputs in zip(batches, outputs):
        if len(batch_outputs) != len(batch.indices):
            raise ValueError(
                f"restore_order: a batch of {len(batch.indices)} rows has {len(batch_outputs)} outputs"
            )
        for position, output in zip(batch.indices, batch_outputs):
            if not 0 <= position < total or filled[position]:
                raise ValueError(f"restore_order: corpus position {position} is missing or repeated")
            placed[position] = output
            filled[position] = True
    return placed


class TokenBatchSampler:
    """``batch_indices`` as an iterable with ``set_epoch``, usable as a DataLoader ``batch_sampler``.

    Call ``set_epoch(epoch)`` before each epoch, as with torch's DistributedSampler.
    """

    def __init__(
        self,
        src_lengths: Sequence[int],
        tgt_lengths: Sequence[int] | None,
        max_tokens: int | None = 4096,
        shuffle: bool = True,
        seed: int = 0,
        max_sentences: int | None = None,
        rank: int = 0,
        world_size: int = 1,
    ):
        _check_budget(max_tokens, max_sentences)
        self.src_lengths = list(src_lengths)
        self.tgt_lengths = None if tgt_lengths is None else list(tgt_lengths)
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.max_sentences = max_sentences
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        self._cache: tuple[int, list[list[int]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _batches(self) -> list[list[int]]:
        if self._cache is None or self._cache[0] != self.epoch:
            batches = batch_indices(
                self.src_lengths,
                self.tgt_lengths,
                max_tokens=self.max_tokens,
                shuffle=self.shuffle,
                seed=self.seed,
                epoch=self.epoch,
                max_sentences=self.max_sentences,
                rank=self.rank,
                world_size=self.world_size,
            )
            self._cache = (self.epoch, batches)
        return self._cache[1]

    def __iter__(self) -> Iterator[list[int]]:
        return iter([list(batch) for batch in self._batches()])

    def __len__(self) -> int:
        return len(self._batches())
