"""Word alignment with eflomal (Östling & Tiedemann, 2016), a measured peer and a teacher.

eflomal is a Bayesian IBM-model aligner (fertility and distortion, Gibbs sampling), among the
best statistical aligners. It is an optional dependency: ``pip install 'attnmt[align]'``.

:func:`eflomal_alignments` aligns whole corpora in both directions, as such aligners are used:
every pair is aligned together with the others, so more text (``also``: pairs aligned alongside
whose links are not returned) helps the pairs you want. The forward direction links each target
word to at most one source word (``tgt2src`` in :data:`attnmt.runtime.choices.LINK_METHODS`), the reverse
direction each source word to at most one target word (``src2tgt``); the other methods symmetrise
the two (:func:`attnmt.alignment.links.symmetrize`).

Words are split on spaces and lower-cased before eflomal sees them (the links are positions, so
the case only splits a word's counts). Links are ``(i_src, j_tgt)``, 0-based.

:class:`EflomalSettings` holds the three knobs of eflomal worth turning: the number of independent
Gibbs samplers whose link marginals are averaged, a factor on its default numbers of iterations,
and a prefix length that cuts every word to its first characters before counting (a crude stem that
pools the forms of one word). The defaults are eflomal's own.

**A vote of several runs.** eflomal samples without a seed, and each setting sees the words
otherwise (a prefix pools different forms), so runs disagree on some links. :func:`voted_directions`
keeps, in each direction, the links that at least ``min_votes`` of the runs found (default: a
majority). With a majority each target word still has at most one source word in the forward
direction (and each source word one target word in the reverse one), so every symmetrisation applies
as to a single run. :func:`eflomal_runs` runs eflomal once per setting, ready for the vote.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from attnmt.alignment.links import Links, symmetrize
from attnmt.data.link_files import read_pharaoh_alignments
from attnmt.errors import ConfigError, DataError
from attnmt.runtime.checks import is_int

__all__ = ["EFLOMAL_METHODS", "EflomalPlan", "EflomalSettings", "directional_links", "eflomal_alignments",
           "eflomal_directions", "eflomal_runs", "import_eflomal", "majority", "voted_directions", "voted_links"]

#: the link methods that need no weights: one direction of eflomal, or both symmetrised
EFLOMAL_METHODS = ("src2tgt", "tgt2src", "intersect", "union", "grow-diag", "grow-diag-final",
                   "grow-diag-final-and")


@dataclass(frozen=True)
class EflomalSettings:
    """How eflomal samples. samplers: independent Gibbs samplers whose link marginals are averaged
    (>= 1; eflomal's default 3); iterations: factor on eflomal's default numbers of iterations per
    model stage (> 0; default 1); prefix: words are cut to their first ``prefix`` characters before
    counting, both languages (0 = whole words, the default). ConfigError for a value out of range."""

    samplers: int = 3
    iterations: float = 1.0
    prefix: int = 0

    def __post_init__(self) -> None:
        # Bounded: each sampler is a whole Gibbs chain (1e9 of them crash eflomal), and the factor
        # multiplies eflomal's hundreds of iterations per stage (1e12 would never end).
        if not is_int(self.samplers) or not 1 <= self.samplers <= MAX_SAMPLERS:
            raise ConfigError(f"eflomal_samplers={self.samplers!r}: must be an integer from 1 to {MAX_SAMPLERS}")
        if not isinstance(self.iterations, (int, float)) or not MIN_ITERATIONS <= self.iterations <= MAX_ITERATIONS:
            raise ConfigError(f"eflomal_iterations={self.iterations!r}: must be a factor from {MIN_ITERATIONS:g} to "
                              f"{MAX_ITERATIONS:g} on eflomal's numbers of iterations")
        if not is_int(self.prefix) or not 0 <= self.prefix <= MAX_PREFIX:
            raise ConfigError(f"eflomal_prefix={self.prefix!r}: must be an integer from 0 (whole words) to "
                              f"{MAX_PREFIX}")

    def describe(self) -> str:
        words = "whole words" if self.prefix == 0 else f"words cut to {self.prefix} characters"
        samplers = f"{self.samplers} sampler{'' if self.samplers == 1 else 's'}"
        return f"{samplers}, {self.iterations:g}x iterations, {words}"


MAX_SAMPLERS = 64
MIN_ITERATIONS, MAX_ITERATIONS = 0.01, 100.0
MAX_PREFIX = 100


def import_eflomal():
    """The eflomal module, or ConfigError saying how to install it."""
    try:
        import eflomal
    except ImportError:
        raise ConfigError("eflomal is not installed; install it with: pip install 'attnmt[align]' "
                          "(or pip install eflomal)") from None
    return eflomal


def eflomal_alignments(
    src_sentences: Sequence[Sequence[str]],
    tgt_sentences: Sequence[Sequence[str]],
    method: str = "intersect",
    *,
    also: tuple[Sequence[Sequence[str]], Sequence[Sequence[str]]] | None = None,
    settings: EflomalSettings = EflomalSettings(),
    quiet: bool = True,
) -> list[Links]:
    """Links of every pair ``(src_sentences[k], tgt_sentences[k])`` by eflomal with ``method``.

    src_sentences, tgt_sentences: lists of words, one list per pair (same length). also: more
    (source, target) pairs aligned in the same run to give the model more text; their links are
    dropped. method: one of :data:`EFLOMAL_METHODS`. settings: how eflomal samples
    (:class:`EflomalSettings`; eflomal's defaults). Pairs with an empty side get no links. Raises
    ConfigError without eflomal or for an unknown method, DataError when the lists differ in length.
    """
    _check_method(method)
    forward, backward = eflomal_directions(src_sentences, tgt_sentences, also=also, settings=settings, quiet=quiet)
    return [directional_links(f, b, method) for f, b in zip(forward, backward)]


def eflomal_directions(
    src_sentences: Sequence[Sequence[str]],
    tgt_sentences: Sequence[Sequence[str]],
    *,
    also: tuple[Sequence[Sequence[str]], Sequence[Sequence[str]]] | None = None,
    settings: EflomalSettings = EflomalSettings(),
    quiet: bool = True,
) -> tuple[list[Links], list[Links]]:
    """eflomal's (forward, backward) links of every pair: one run, both directions, sampled as
    ``settings`` says (see :func:`eflomal_alignments`). eflomal samples without a seed, so two runs
    differ a little."""
    if len(src_sentences) != len(tgt_sentences):
        raise DataError(f"eflomal: {len(src_sentences)} source sentences but {len(tgt_sentences)} target sentences")
    extra_src, extra_tgt = also if also is not None else ([], [])
    if len(extra_src) != len(extra_tgt):
        raise DataError(f"eflomal: {len(extra_src)} extra source sentences but {len(extra_tgt)} extra target sentences")
    eflomal = import_eflomal()
    wanted = len(src_sentences)
    if wanted == 0:
        return [], []
    src_lines = [_line(words) for words in [*src_sentences, *extra_src]]
    tgt_lines = [_line(words) for words in [*tgt_sentences, *extra_tgt]]
    with tempfile.TemporaryDirectory(prefix="attnmt-eflomal-") as folder:
        forward_path, backward_path = os.path.join(folder, "forward"), os.path.join(folder, "backward")
        try:
            aligner = eflomal.Aligner(n_samplers=settings.samplers, rel_iterations=settings.iterations,
                                      source_prefix_len=settings.prefix, target_prefix_len=settings.prefix)
            aligner.align(src_lines, tgt_lines, links_filename_fwd=forward_path, links_filename_rev=backward_path,
                          quiet=quiet)
        except (OSError, subprocess.SubprocessError, RuntimeError, ValueError) as error:
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise DataError(f"eflomal failed on {len(src_lines)} pairs: {first_line[:200]}") from None
        forward = _read_links(forward_path, len(src_lines))[:wanted]
        backward = _read_links(backward_path, len(src_lines))[:wanted]
    empty = [not src or not tgt for src, tgt in zip(src_sentences, tgt_sentences)]
    return ([set() if e else links for e, links in zip(empty, forward)],
            [set() if e else links for e, links in zip(empty, backward)])


def majority(runs: int) -> int:
    """The smallest number of votes that is more than half of ``runs``."""
    return runs // 2 + 1


def voted_directions(
    runs: Sequence[tuple[Sequence[Links], Sequence[Links]]],
    min_votes: int | None = None,
) -> tuple[list[Links], list[Links]]:
    """The (forward, backward) links that at least ``min_votes`` of ``runs`` found, pair by pair.

    runs: R results of :func:`eflomal_directions` on the same pairs, each (forward, backward) with
    one link set per pair. min_votes: 1..R (default :func:`majority`: more than half; then, as in one
    run, forward links each target word to at most one source word). ValueError for no runs, runs of
    different lengths or min_votes out of range.
    """
    if not runs:
        raise ValueError("voted_directions: no runs to vote")
    votes = majority(len(runs)) if min_votes is None else min_votes
    if isinstance(votes, bool) or not isinstance(votes, int) or not 1 <= votes <= len(runs):
        raise ValueError(f"voted_directions: min_votes must be an integer from 1 to {len(runs)}, got {min_votes!r}")
    pairs = len(runs[0][0])
    if any(len(forward) != pairs or len(backward) != pairs for forward, backward in runs):
        raise ValueError("voted_directions: the runs cover different numbers of pairs")
    if len(runs) == 1:  # one run (the command's default): its own links, without counting
        return list(runs[0][0]), list(runs[0][1])

    def kept(per_run: Sequence[Links]) -> Links:
        counts = Counter(link for links in per_run for link in links)
        return {link for link, count in counts.items() if count >= votes}

    forward = [kept([run[0][n] for run in runs]) for n in range(pairs)]
    backward = [kept([run[1][n] for run in runs]) for n in range(pairs)]
    return forward, backward


def eflomal_runs(
    src_sentences: Sequence[Sequence[str]],
    tgt_sentences: Sequence[Sequence[str]],
    settings: Sequence[EflomalSettings],
    *,
    also: tuple[Sequence[Sequence[str]], Sequence[Sequence[str]]] | None = None,
    quiet: bool = True,
    progress: Callable[[int, EflomalSettings], None] | None = None,
) -> list[tuple[list[Links], list[Links]]]:
    """eflomal run once per entry of ``settings``: one (forward, backward) per run, ready for
    :func:`voted_directions` (:func:`eflomal_directions` does each run; a setting may repeat: another
    unseeded run). progress(k, settings) is called before run k (from 1). ConfigError for no
    settings."""
    if not settings:
        raise ConfigError("eflomal: no settings to run")
    runs = []
    for number, one in enumerate(settings, 1):
        if progress is not None:
            progress(number, one)
        runs.append(eflomal_directions(src_sentences, tgt_sentences, also=also, settings=one, quiet=quiet))
    return runs


@dataclass(frozen=True)
class EflomalPlan:
    """Several runs of eflomal and their vote: one ``EflomalSettings`` per run, the votes a link
    needs (``votes``) and the votes a possible link needs (``possible_votes``)."""

    settings: tuple[EflomalSettings, ...]
    votes: int
    possible_votes: int

    @classmethod
    def of(cls, samplers: int | None = None, iterations: float | None = None, prefixes: Sequence[int] | None = None,
           votes: int | None = None, possible_votes: int | None = None, possible: bool = False) -> EflomalPlan:
        """One run per prefix (a single run of whole words by default), eflomal's defaults where
        ``samplers`` and ``iterations`` are None; ``votes`` defaults to a majority of the runs and
        ``possible_votes`` to ``votes``. ConfigError (naming the command's option) for a value out
        of range, a vote with one run, or ``possible_votes`` without ``possible``."""
        default = EflomalSettings()
        settings = tuple(EflomalSettings(default.samplers if samplers is None else samplers,
                                         default.iterations if iterations is None else iterations, prefix)
                         for prefix in prefixes or [0])
        for flag, count in (("--eflomal-votes", votes), ("--possible-votes", possible_votes)):
            if count is not None and len(settings) == 1:
                raise ConfigError(f"{flag}: only with several --eflomal-prefix values (one run each)")
            if count is not None and not 1 <= count <= len(settings):
                raise ConfigError(f"{flag} must be from 1 to {len(settings)} (the number of runs), got {count}")
        if possible_votes is not None and not possible:
            raise ConfigError("--possible-votes: only with --possible")
        votes = majority(len(settings)) if votes is None else votes
        return cls(settings, votes, votes if possible_votes is None else possible_votes)


def voted_links(runs: Sequence[tuple[Sequence[Links], Sequence[Links]]], method: str, votes: int,
                possible: str | None = None, possible_votes: int | None = None) -> tuple[list[Links], list[Links]]:
    """The links of each pair by ``method`` from the directions that at least ``votes`` of ``runs``
    found (:func:`voted_directions`), and the possible links: those ``possible`` (a method) finds
    beyond them from the directions ``possible_votes`` of the runs found (empty sets when
    ``possible`` is None)."""
    forward, backward = voted_directions(runs, votes)
    sure = [directional_links(f, b, method) for f, b in zip(forward, backward)]
    if possible is None:
        return sure, [set() for _ in sure]
    if possible_votes is not None and possible_votes != votes:
        forward, backward = voted_directions(runs, possible_votes)
    return sure, [directional_links(f, b, possible) - links for f, b, links in zip(forward, backward, sure)]


def directional_links(forward: Links, backward: Links, method: str) -> Links:
    """One pair's links by ``method``: ``tgt2src`` = forward (each target word to at most one
    source word), ``src2tgt`` = backward, else the two symmetrised."""
    _check_method(method)
    if method == "tgt2src":
        return set(forward)
    if method == "src2tgt":
        return set(backward)
    return symmetrize(forward, backward, method)


def _check_method(method: str) -> None:
    if method not in EFLOMAL_METHODS:
        raise ConfigError(f"eflomal: method {method!r} needs attention weights; choose one of "
                          f"{', '.join(EFLOMAL_METHODS)}")


def _line(words: Sequence[str]) -> str:
    return " ".join(word.lower() for word in words)


def _read_links(path: str, expected: int) -> list[Links]:
    """eflomal's output: one Pharaoh line per pair; DataError when it wrote another number of lines."""
    links = read_pharaoh_alignments(Path(path)).sure
    if len(links) != expected:
        raise DataError(f"eflomal wrote {len(links)} lines of links for {expected} pairs")
    return links
