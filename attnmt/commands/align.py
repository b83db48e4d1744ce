"""Word-align two whole files with attention and write the links in Pharaoh format (i-j, 0-based).

With --vectors DIR (written by `attnmt embed`) every target word attends over the source words
with vector attention (see `attnmt align-words`). With --model RUN a trained translator reads each
pair: the source goes into its encoder, the target is force-decoded (teacher forcing), and its
attention over the source, merged from subword pieces to words (EOS dropped), gives the weights.
For a Transformer --layer and --head choose the cross-attention (numbers from 1, -1 = last; default:
the mean over the heads of the penultimate layer). A run trained with guided alignment
(data.train_links) is read by default with the layer, head and step its attention was trained to
align with; --layer, --head (or --head mean) and --shift/--no-shift override that. The direction
comes from --src-lang (default:
the --src file's suffix when it names one of the run's languages, else the run's source language):
a run trained the other way round is used with the pair swapped and its weights transposed.
With --attribution METHOD the translator's gradient saliency takes the place of its attention (the
positive part of each target piece's row, normalised; see attnmt.alignment.translator_attention).
Several sources combine: --model twice (e.g. an en→fr and a fr→en run) and/or --model with
--vectors give the weighted geometric mean of their weights (attnmt.alignment.combine): vector
attention gets --vector-weight, the translators share the rest equally.
The weights become links by --method, or with --threshold T every pair whose weight reaches T
(with two translators of opposite directions: alignment by agreement); with --gold the links are
scored: alignment error rate, precision, recall and F1 (Och & Ney, 2003). Line i of --src and
--tgt form pair i, split on spaces;
words are lower-cased for vectors and kept as they are for a translator.
With --eflomal the links come from eflomal instead (pip install 'attnmt[align]'), a statistical
aligner run in both directions over the whole files; --method then picks one direction (tgt2src,
src2tgt) or a symmetrisation, and --also-src/--also-tgt add pairs aligned alongside (more text for
its counts) whose links are not written: align a small test set together with a large corpus.
--possible METHOD also writes, as possible links (ipj), the links METHOD finds beyond --method's: a
guide file in which a word without any link is one that neither direction of eflomal aligns
(training.guide_unaligned: eos guides such words to the source EOS). --eflomal-samplers,
--eflomal-iterations and --eflomal-prefix set how eflomal samples (default: eflomal's own settings);
several --eflomal-prefix values run eflomal once each and keep the links of each direction that a
majority of the runs found (--eflomal-votes V: at least V runs; --possible-votes V for the
--possible links).
Examples: attnmt align --vectors vectors/hansards --src test.en --tgt test.fr --out links.txt
  --gold test.naacl --gold-format naacl
  attnmt align --model runs/hansards-rnn --src test.en-fr.en --tgt test.en-fr.fr --method grow-diag
  --out links.txt --gold test.en-fr.naacl
  attnmt align --model runs/hansards-rnn --model runs/hansards-rnn-fr-en --vectors vectors/hansards
  --src test.en-fr.en --tgt test.en-fr.fr --method intersect --out links.txt --gold test.en-fr.naacl
  attnmt align --eflomal --src train.en.gz --tgt train.fr.gz --method intersect --out train.links
  attnmt align --eflomal --src train.en.gz --tgt train.fr.gz --method intersect --possible union --out guide.links
  attnmt align --eflomal --eflomal-prefix 0 5 6 7 --src train.en.gz --tgt train.fr.gz --method intersect
  --possible union --out guide.links
  attnmt align --model runs/hansards-align-en-fr-120 --model runs/hansards-align-fr-en-120 --threshold 0.6
  --src test.en-fr.en --tgt test.en-fr.fr --out links.txt --gold test.en-fr.naacl
"""

from __future__ import annotations

import argparse

from attnmt.commands.align_words import add_scoring_arguments
from attnmt.commands.options import (
    add_attribution_options,
    add_device_option,
    add_hf_option,
    add_threads_option,
    add_trust_option,
    attribution_options,
    say,
)
from attnmt.runtime.choices import GOLD_FORMATS, LINK_METHODS

# Options that only mean something for one of the two sources of weights (checked in run).
EFLOMAL_OPTIONS = ("also_src", "also_tgt", "possible", "eflomal_samplers", "eflomal_iterations", "eflomal_prefix",
                   "eflomal_votes", "possible_votes")
HF_OPTIONS = ("layer", "head", "shift", "attribution", "old_saliency")  # of any translator
RUN_OPTIONS = ("checkpoint", "src_lang", "max_tokens", "threads")  # of a run
VECTOR_OPTIONS = ("temperature", "distortion")
#: share of vector attention in the geometric mean with translators, chosen on the 37 trial pairs of
#: the HLT-NAACL 2003 gold with the two Hansards translators (benchmarks/alignment_translator.py)
DEFAULT_VECTOR_WEIGHT = 0.7


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vectors", metavar="DIR", help="folder of word vectors written by `attnmt embed`")
    parser.add_argument("--model", metavar="RUN", action="append", default=None,
                        help="a trained translator run (its decoder attention); give it twice for both "
                        "directions (one of --vectors and --model is required)")
    add_hf_option(parser, action="append")
    parser.add_argument("--eflomal", action="store_true",
                        help="links from eflomal, both directions, symmetrised by --method (needs attnmt[align])")
    parser.add_argument("--also-src", metavar="FILE", default=None,
                        help="with --eflomal: more source sentences aligned alongside (their links are not written)")
    parser.add_argument("--also-tgt", metavar="FILE", default=None, help="with --eflomal: their translations")
    parser.add_argument("--possible", default=None, metavar="METHOD",
                        help="with --eflomal: also write the links of METHOD (e.g. union) that --method lacks, "
                        "as possible links 'ipj' (a guide file for training.guide_unaligned: eos)")
    parser.add_argument("--eflomal-samplers", type=int, default=None, metavar="N",
                        help="with --eflomal: independent samplers whose link marginals are averaged (default 3)")
    parser.add_argument("--eflomal-iterations", type=float, default=None, metavar="X",
                        help="with --eflomal: factor on eflomal's default numbers of iterations (default 1)")
    parser.add_argument("--eflomal-prefix", type=int, nargs="+", default=None, metavar="K",
                        help="with --eflomal: cut every word to its first K characters before counting, a crude "
                        "stem (default 0: whole words); several values: one run each, then a vote (--eflomal-votes)")
    parser.add_argument("--eflomal-votes", type=int, default=None, metavar="V",
                        help="with several --eflomal-prefix values: keep a link of either direction when at least V "
                        "runs found it (default: a majority)")
    parser.add_argument("--possible-votes", type=int, default=None, metavar="V",
                        help="with --possible and several --eflomal-prefix values: the votes a possible link needs "
                        "(default: --eflomal-votes); 1 marks every word any run aligns as aligned")
    parser.add_argument("--vector-weight", type=float, default=None, metavar="W",
                        help="with --vectors and --model: share of vector attention in the geometric mean, "
                        f"in [0, 1] (default {DEFAULT_VECTOR_WEIGHT}); the translators share the rest")
    parser.add_argument("--src", required=True, help="source sentences, one a line (plain or .gz)")
    parser.add_argument("--tgt", required=True, help="target sentences, line i translating line i of --src")
    parser.add_argument("--method", choices=LINK_METHODS, default=None,
                        help="how to turn weights into links (default intersect)")
    parser.add_argument("--threshold", type=float, default=None, metavar="T",
                        help="instead of --method: link every pair whose weight reaches T, in (0, 1]; with two "
                        "translators of opposite directions that is sqrt(p(src | tgt) p(tgt | src)) >= T")
    add_scoring_arguments(parser)
    translator = parser.add_argument_group(
        "translator attention (with --model; --layer, --head and --shift also with --hf)")
    translator.add_argument("--checkpoint", default=None, help="best (default) or last, or a file in the run")
    translator.add_argument("--layer", type=int, default=None,
                            help="decoder layer, from 1 (-1 = last; default: the penultimate, the only one "
                            "for an RNN)")
    translator.add_argument("--head", type=_head, default=None,
                            help="attention head, from 1, or 'mean' (default: the mean over the heads)")
    translator.add_argument("--shift", action=argparse.BooleanOptionalAction, default=None,
                            help="read the step whose decoder input is the target word instead of the step "
                            "that predicts it (Shift-Att); default off")
    translator.add_argument("--src-lang", default=None, metavar="LANG",
                            help="language of --src (default: its file suffix if it is one of the run's "
                            "languages, else the run's source language)")
    translator.add_argument("--max-tokens", type=int, default=None,
                            help="padded tokens per forward call (default 4000)")
    add_threads_option(translator)
    add_attribution_options(translator, "align with the translator's saliency instead of its attention")
    add_device_option(translator)
    add_trust_option(translator)
    parser.add_argument("--out", required=True, metavar="FILE", help="write the links here, one line per pair")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    parser.add_argument("--gold", default=None, metavar="FILE", help="gold alignment to score the links against")
    parser.add_argument("--gold-format", choices=GOLD_FORMATS, default=None,
                        help="naacl ('sent src tgt S|P', 1-based) or pharaoh ('i-j' sure, 'ipj' possible); "
                        "default: naacl for a .naacl/.wa file, else pharaoh")
    parser.add_argument("--gold-one-based", action="store_true",
                        help="Pharaoh gold positions count from 1 (default 0)")


def _head(value: str) -> int | str:
    """``--head``: an integer (from 1, negative from the end) or "mean"."""
    if value == "mean":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer or 'mean', got {value!r}") from None


def _check_options(args: argparse.Namespace) -> None:
    """ConfigError for a missing source of weights, or for an option of a source not given (it
    would be silently ignored)."""
    from attnmt.errors import ConfigError

    _check_reading(args)
    _check_eflomal_options(args)
    if (args.also_src is None) != (args.also_tgt is None):
        raise ConfigError("give both --also-src and --also-tgt, or neither")
    if args.model is None and args.vectors is None and args.hf is None and not args.eflomal:
        raise ConfigError("give the weights to align with: --vectors DIR, --model RUN (once or twice), "
                          "--hf MODEL, or several of them; or --eflomal for eflomal's links")
    for foreign, missing, wanted in ((VECTOR_OPTIONS, args.vectors is None, "--vectors"),
                                     (HF_OPTIONS, args.model is None and args.hf is None, "--model or --hf"),
                                     (RUN_OPTIONS, args.model is None, "--model")):
        given = [name for name in foreign if getattr(args, name, None) is not None]
        if given and missing:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise ConfigError(f"{flags}: only with {wanted}")
    args.saliency_options = attribution_options(args)
    if args.attribution is not None and (args.layer is not None or args.head is not None):
        raise ConfigError("--layer and --head choose an attention; --attribution has neither")
    if args.vector_weight is not None:
        if (args.model is None and args.hf is None) or args.vectors is None:
            raise ConfigError("--vector-weight: only with both --vectors and --model (it weighs one against the other)")
        if not 0.0 <= args.vector_weight <= 1.0:
            raise ConfigError(f"--vector-weight must be in [0, 1], got {args.vector_weight}")


def _check_reading(args: argparse.Namespace) -> None:
    """--threshold or --method (default intersect), never both; a threshold in (0, 1]."""
    from attnmt.errors import ConfigError

    if args.threshold is not None:
        if args.method is not None:
            raise ConfigError("give --method or --threshold, not both")
        if args.eflomal:
            raise ConfigError("--threshold needs attention weights; --eflomal gives links (choose them with --method)")
        if not 0 < args.threshold <= 1:
            raise ConfigError(f"--threshold must be in (0, 1], got {args.threshold}")
    args.method = args.method or "intersect"


def _check_eflomal_options(args: argparse.Namespace) -> None:
    """--eflomal aligns alone, with its own methods and settings; its settings need it."""
    from attnmt.errors import ConfigError

    if not args.eflomal:
        given = [name for name in EFLOMAL_OPTIONS if getattr(args, name, None) is not None]
        if given:
            raise ConfigError(f"{', '.join('--' + name.replace('_', '-') for name in given)}: only with --eflomal")
        return
    from attnmt.alignment.eflomal import EFLOMAL_METHODS

    others = [flag for flag, value in (("--vectors", args.vectors), ("--model", args.model), ("--hf", args.hf))
              if value is not None]
    if others:
        raise ConfigError(f"--eflomal aligns on its own; it does not combine with {', '.join(others)}")
    for flag, method in (("--method", args.method), ("--possible", args.possible)):
        if method is not None and method not in EFLOMAL_METHODS:
            raise ConfigError(f"{flag} {method} needs attention weights; with --eflomal choose one of "
                              f"{', '.join(EFLOMAL_METHODS)}")
    _eflomal_plan(args)  # out-of-range values fail before any file is read


def _vector_aligner(args: argparse.Namespace):
    """The vector aligner of --vectors, its two vocabularies, and its (source, target) languages."""
    from pathlib import Path

    from attnmt.alignment import VectorAligner, load_vector_dir
    from attnmt.commands.align_words import scoring_from_arguments

    scoring = scoring_from_arguments(args)
    src_vectors, tgt_vectors, info = load_vector_dir(args.vectors)
    aligner = VectorAligner(src_vectors, tgt_vectors, scoring, lowercase=True)
    print(f"vector attention: {args.vectors} ({info.get('method', 'unknown method')}, "
          f"{len(src_vectors)} + {len(tgt_vectors)} words, d={src_vectors.dim}); "
          f"scoring {scoring.describe(src_vectors.dim)}")
    languages = tuple(Path(info.get(key, default)).stem for key, default in (("src_file", "en.vec"),
                                                                             ("tgt_file", "fr.vec")))
    return aligner, src_vectors, tgt_vectors, languages


def _translator_aligner(args: argparse.Namespace, run: str):
    from attnmt.alignment.translator_attention import DEFAULT_MAX_TOKENS, TranslatorAligner, file_language
    from attnmt.decoding.translator import Translator
    from attnmt.errors import ConfigError

    if args.max_tokens is not None and args.max_tokens < 1:
        raise ConfigError(f"--max-tokens must be an integer >= 1, got {args.max_tokens}")
    translator = Translator.load(run, args.checkpoint or "best", num_threads=args.threads, device=args.device,
                                 trust_run_code=args.trust_run_code)
    say("align", translator.describe())
    languages = (translator.tokenizers.src_lang, translator.tokenizers.tgt_lang)
    src_lang = args.src_lang or file_language(args.src, languages)
    aligner = TranslatorAligner(
        translator, layer=args.layer, head=args.head, src_lang=src_lang, shift=args.shift,
        max_tokens=DEFAULT_MAX_TOKENS if args.max_tokens is None else args.max_tokens, saliency=args.saliency_options,
    )
    step = translator.step
    print(f"translator attention: {run}{f' (step {step})' if step is not None else ''}: {aligner.describe()}")
    return aligner


def _hf_aligner(args: argparse.Namespace, name: str):
    from attnmt.alignment.translator_attention import DEFAULT_MAX_TOKENS, TranslatorAligner
    from attnmt.decoding.hf import HFTranslator

    translator = HFTranslator.load(name, device=args.device or "auto")
    say("align", translator.describe())
    aligner = TranslatorAligner(translator, layer=args.layer, head=args.head, shift=args.shift,
                                max_tokens=DEFAULT_MAX_TOKENS if args.max_tokens is None else args.max_tokens,
                                saliency=args.saliency_options)
    print(f"translator attention: {aligner.describe()}")
    return aligner


def _weight_function(args: argparse.Namespace, src_sentences, tgt_sentences):
    """The aligner of the sources given: vectors, one translator, or the geometric mean of several."""
    from attnmt.alignment import CombinedAligner, translator_vector_shares
    from attnmt.alignment.combine import check_same_languages

    parts, names = [], []
    for run in args.model or []:
        aligner = _translator_aligner(args, run)
        parts.append(aligner)
        names.append(f"{run} ({'→'.join(aligner.run_languages)})")
    for name in args.hf or []:
        aligner = _hf_aligner(args, name)
        parts.append(aligner)
        names.append(f"{name} (Hugging Face)")
    translators = len(parts)
    vector_share = None
    if args.vectors is not None:
        aligner, src_vectors, tgt_vectors, languages = _vector_aligner(args)
        check_same_languages(languages, [(getattr(part, "languages", (None, None)), name)
                                         for part, name in zip(parts, names)], args.vectors)
        _report_unknown("source", [[word.lower() for word in s] for s in src_sentences], src_vectors)
        _report_unknown("target", [[word.lower() for word in t] for t in tgt_sentences], tgt_vectors)
        parts.append(aligner)
        names.append(f"vectors {args.vectors}")
        vector_share = DEFAULT_VECTOR_WEIGHT if args.vector_weight is None else args.vector_weight
    shares = translator_vector_shares(translators, vector_share)
    if len(parts) == 1:
        weight_fn = parts[0]
    else:
        weight_fn = CombinedAligner(parts, shares, names)
        print(f"combined: {weight_fn.describe()}")
    if hasattr(weight_fn, "precompute"):  # many pairs per forward call; align_corpus then looks them up
        weight_fn.precompute(src_sentences, tgt_sentences, progress=True)
    return weight_fn


def _report_unknown(side: str, sentences: list[list[str]], vectors) -> None:
    import sys

    from attnmt.alignment.vectors import unknown_words

    unknown = unknown_words(sentences, vectors)
    total = sum(len(sentence) for sentence in sentences)
    if unknown:
        examples = " ".join(word for word, _ in unknown.most_common(10))
        print(f"warning: {sum(unknown.values())} of {total} {side} tokens ({len(unknown)} distinct words) are "
              f"unknown and got a zero vector, e.g. {examples}", file=sys.stderr)


def _eflomal_plan(args: argparse.Namespace):
    """The runs and votes of --eflomal-samplers/-iterations/-prefix/-votes and --possible-votes."""
    from attnmt.alignment.eflomal import EflomalPlan

    return EflomalPlan.of(args.eflomal_samplers, args.eflomal_iterations, args.eflomal_prefix, args.eflomal_votes,
                          args.possible_votes, possible=args.possible is not None)


def _eflomal_links(args: argparse.Namespace, src_sentences, tgt_sentences):
    """eflomal's links of the pairs by --method, aligned together with the --also pairs, one run per
    setting and then the vote, and the possible links (``attnmt.alignment.eflomal.voted_links``)."""
    from attnmt.alignment.eflomal import eflomal_runs, import_eflomal, voted_links
    from attnmt.alignment.links import read_word_pairs

    import_eflomal()  # before reading --also files: a missing package is the first thing to say
    plan = _eflomal_plan(args)
    settings, votes = plan.settings, plan.votes
    also = read_word_pairs(args.also_src, args.also_tgt) if args.also_src is not None else None
    extra = f" together with {len(also[0])} pairs of {args.also_src}" if also else ""
    also_possible = f" (and {args.possible} as possible links)" if args.possible else ""
    vote = ""
    if len(settings) > 1:
        vote = f", then the links at least {votes} of the {len(settings)} runs found"
        if args.possible and plan.possible_votes != votes:
            also_possible = (f" (and {args.possible} of the links at least {plan.possible_votes} of the runs found, "
                             "as possible links)")
    say("align", f"eflomal ({'; '.join(one.describe() for one in settings)}): aligning {len(src_sentences)} "
                 f"pairs{extra} in both directions{vote}, then {args.method}{also_possible}")

    def progress(number, one):
        if len(settings) > 1:
            say("align", f"eflomal run {number}/{len(settings)}: {one.describe()}")

    runs = eflomal_runs(src_sentences, tgt_sentences, settings, also=also, quiet=False, progress=progress)
    return voted_links(runs, args.method, votes, args.possible, plan.possible_votes)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from attnmt.alignment import (
        aer_interval,
        align_corpus,
        alignment_error_rate,
        read_gold,
        write_pharaoh,
    )
    from attnmt.alignment.links import read_word_pairs
    from attnmt.runtime.outputs import check_output

    _check_options(args)
    out = check_output(args.out, "--out", args.overwrite,
                       inputs=[args.src, args.tgt, args.gold, args.also_src, args.also_tgt, args.vectors,
                               *(args.hf or []), *(args.model or [])])
    # Words keep their case here: a translator needs it, vector attention lower-cases for itself.
    src_sentences, tgt_sentences = read_word_pairs(args.src, args.tgt)
    gold = None
    if args.gold:
        named_naacl = Path(args.gold).suffix.lower() in (".naacl", ".wa")
        gold_format = args.gold_format or ("naacl" if named_naacl else "pharaoh")
        gold = read_gold(args.gold, gold_format, [len(s) for s in src_sentences], [len(s) for s in tgt_sentences],
                         one_based=args.gold_one_based)
    possible = None
    if args.eflomal:
        alignments, possible = _eflomal_links(args, src_sentences, tgt_sentences)
    else:
        weight_fn = _weight_function(args, src_sentences, tgt_sentences)
        alignments = align_corpus(weight_fn, src_sentences, tgt_sentences, args.method, threshold=args.threshold,
                                  progress=True)
    write_pharaoh(out, alignments, overwrite=True, possible=possible)
    how = args.method if args.threshold is None else f"threshold {args.threshold:g}"
    extra = f" and {sum(len(links) for links in possible or [])} possible links ({args.possible})" \
        if args.possible else ""
    print(f"aligned {len(alignments)} pairs with {how}: {sum(map(len, alignments))} links{extra}; wrote {out}")
    if gold is not None:
        scores = alignment_error_rate(alignments, gold.sure, gold.possible)
        print(f"against {args.gold} ({sum(map(len, gold.sure))} sure, {sum(map(len, gold.possible))} possible links):")
        print(f"  AER {scores['aer']:.4f}  precision {scores['precision']:.4f}  "
              f"recall {scores['recall']:.4f}  F1 {scores['f1']:.4f}")
        if alignments:
            low, high = aer_interval(alignments, gold.sure, gold.possible)
            print(f"  AER 95% interval {low:.4f}-{high:.4f} (the {len(alignments)} pairs redrawn 2,000 times)")
    return 0
