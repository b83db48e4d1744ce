"""Word-align two whole files with attention and write the links in Pharaoh format (i-j, 0-based).

With --vectors DIR (written by `attnmt embed`) every target word attends over the source words
with vector attention (see `attnmt align-words`); the weights become links by --method. With
--gold the links are scored: alignment error rate, precision, recall and F1 (Och & Ney, 2003).
Sentences are lower-cased and split on spaces; line i of --src and --tgt form pair i.
Example: attnmt align --vectors vectors/hansards --src test.en --tgt test.fr --out links.txt
  --gold test.naacl --gold-format naacl
"""

from __future__ import annotations

import argparse

from attnmt.alignment.names import GOLD_FORMATS, LINK_METHODS
from attnmt.commands.align_words import add_scoring_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--vectors", metavar="DIR", help="folder of word vectors written by `attnmt embed`")
    source.add_argument("--model", metavar="RUN", help="a trained translator run (its decoder attention)")
    parser.add_argument("--src", required=True, help="source sentences, one a line (plain or .gz)")
    parser.add_argument("--tgt", required=True, help="target sentences, line i translating line i of --src")
    parser.add_argument("--method", choices=LINK_METHODS, default="intersect",
                        help="how to turn weights into links (default intersect)")
    add_scoring_arguments(parser)
    parser.add_argument("--out", required=True, metavar="FILE", help="write the links here, one line per pair")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    parser.add_argument("--gold", default=None, metavar="FILE", help="gold alignment to score the links against")
    parser.add_argument("--gold-format", choices=GOLD_FORMATS, default=None,
                        help="naacl ('sent src tgt S|P', 1-based) or pharaoh ('i-j' sure, 'ipj' possible); "
                        "default: naacl for a .naacl/.wa file, else pharaoh")
    parser.add_argument("--gold-one-based", action="store_true",
                        help="Pharaoh gold positions count from 1 (default 0)")


def _vector_aligner(args: argparse.Namespace):
    from attnmt.alignment import VectorAligner, load_vector_dir
    from attnmt.commands.align_words import scoring_from_arguments

    scoring = scoring_from_arguments(args)
    src_vectors, tgt_vectors, info = load_vector_dir(args.vectors)
    aligner = VectorAligner(src_vectors, tgt_vectors, scoring)
    print(f"vector attention: {args.vectors} ({info.get('method', 'unknown method')}, "
          f"{len(src_vectors)} + {len(tgt_vectors)} words, d={src_vectors.dim}); "
          f"scoring {scoring.describe(src_vectors.dim)}")
    return aligner, src_vectors, tgt_vectors


def _read_sentences(src_path: str, tgt_path: str) -> tuple[list[list[str]], list[list[str]]]:
    from attnmt.alignment import tokenize
    from attnmt.data.corpus import read_lines
    from attnmt.errors import DataError

    src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise DataError(
            f"parallel files have different line counts: {src_path} has {len(src_lines)} lines, "
            f"{tgt_path} has {len(tgt_lines)} lines"
        )
    return [tokenize(line) for line in src_lines], [tokenize(line) for line in tgt_lines]


def _report_unknown(side: str, sentences: list[list[str]], vectors) -> None:
    import sys
    from collections import Counter

    unknown = Counter(token for sentence in sentences for token in sentence if token not in vectors)
    total = sum(len(sentence) for sentence in sentences)
    if unknown:
        examples = " ".join(word for word, _ in unknown.most_common(10))
        print(f"warning: {sum(unknown.values())} of {total} {side} tokens ({len(unknown)} distinct words) are "
              f"unknown and got a zero vector, e.g. {examples}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from attnmt.alignment import align_corpus, alignment_error_rate, read_gold, write_pharaoh
    from attnmt.errors import AttnmtError, DataError

    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise DataError(f"{out} exists; pass --overwrite to replace it")
    src_sentences, tgt_sentences = _read_sentences(args.src, args.tgt)
    gold = None
    if args.gold:
        gold_format = args.gold_format or ("naacl" if Path(args.gold).suffix in (".naacl", ".wa") else "pharaoh")
        gold = read_gold(args.gold, gold_format, [len(s) for s in src_sentences], [len(s) for s in tgt_sentences],
                         one_based=args.gold_one_based)
    if args.model is not None:
        # The hook for translator attention: a weight function (src_tokens, tgt_tokens) -> [T, S]
        # from a run's decoder, passed to the same align_corpus as the vectors below.
        raise AttnmtError(
            f"--model {args.model}: aligning with a translator's attention is not available yet; use --vectors"
        )
    weight_fn, src_vectors, tgt_vectors = _vector_aligner(args)
    _report_unknown("source", src_sentences, src_vectors)
    _report_unknown("target", tgt_sentences, tgt_vectors)

    alignments = align_corpus(weight_fn, src_sentences, tgt_sentences, args.method, progress=True)
    write_pharaoh(out, alignments, overwrite=True)
    print(f"aligned {len(alignments)} pairs with {args.method}: {sum(map(len, alignments))} links; wrote {out}")
    if gold is not None:
        scores = alignment_error_rate(alignments, gold.sure, gold.possible)
        print(f"against {args.gold} ({sum(map(len, gold.sure))} sure, {sum(map(len, gold.possible))} possible links):")
        print(f"  AER {scores['aer']:.4f}  precision {scores['precision']:.4f}  "
              f"recall {scores['recall']:.4f}  F1 {scores['f1']:.4f}")
    return 0
