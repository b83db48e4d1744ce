"""Align the words of one sentence pair with vector attention and show the links.

Each target word attends over the source words: weights = softmax(Q K^T * scale), with the target
words' vectors as queries Q and the source words' vectors as keys K. The default scoring uses
unit-length vectors, a temperature and a preference for links near the diagonal (tuned on the
HLT-NAACL 2003 trial set); --scoring scaled_dot is the plain formula softmax(Q K^T / sqrt(d)).
Prints the weight matrix shape, the links as word pairs and the unknown words (they get a zero
vector); --plot writes the heatmap.
Example: attnmt align-words --src-vectors vec/en.vec --tgt-vectors vec/fr.vec
  --src "The agreement was signed ." --tgt "L accord a été signé ." --plot pair.png
"""

from __future__ import annotations

import argparse

from attnmt.runtime.choices import LINK_METHODS, SCORINGS


def add_scoring_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of vector attention, shared with ``attnmt align``."""
    parser.add_argument("--scoring", choices=SCORINGS, default="cosine", metavar="SCORING",
                        help="cosine: unit vectors, temperature and distortion prior (default); "
                        "scaled_dot: raw dot products / sqrt(d), no prior")
    parser.add_argument("--temperature", type=float, default=None,
                        help="divide scores by this (default: the tuned value for cosine, sqrt(d) for scaled_dot)")
    parser.add_argument("--distortion", type=float, default=None,
                        help="strength of the prior -k (t_j - s_i)^2 on relative positions "
                        "(default: the tuned value for cosine, 0 for scaled_dot)")


def scoring_from_arguments(args: argparse.Namespace):
    """The VectorScoring the options ask for (ConfigError for out-of-range values)."""
    from attnmt.alignment.vector_weights import VectorScoring
    from attnmt.errors import ConfigError

    try:
        return VectorScoring.named(args.scoring, args.temperature, args.distortion)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--src-vectors", required=True, nargs="+", metavar="FILE",
                        help="source word vectors: a fastText .vec file, or a word2int .pkl and "
                        "embeddings .npz")
    parser.add_argument("--tgt-vectors", required=True, nargs="+", metavar="FILE",
                        help="target word vectors, in the same space and format choices")
    parser.add_argument("--src", required=True, help="the source sentence (lower-cased and split on spaces)")
    parser.add_argument("--tgt", required=True, help="its translation")
    parser.add_argument("--method", choices=LINK_METHODS, default="intersect",
                        help="how to turn weights into links (default intersect)")
    add_scoring_arguments(parser)
    parser.add_argument("--plot", default=None, metavar="FILE", help="write the heatmap here (.png, .svg or .pdf)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --plot file")


def run(args: argparse.Namespace) -> int:
    import sys

    import numpy as np

    from attnmt.alignment import (
        VectorAligner,
        extract_links,
        load_word_vectors,
        tokenize,
    )
    from attnmt.errors import DataError
    from attnmt.runtime.outputs import check_output

    scoring = scoring_from_arguments(args)
    src_tokens, tgt_tokens = tokenize(args.src), tokenize(args.tgt)
    if not src_tokens or not tgt_tokens:
        raise DataError("--src and --tgt must each contain at least one word")
    if args.plot:
        check_output(args.plot, "--plot", args.overwrite, inputs=[*args.src_vectors, *args.tgt_vectors],
                     suffixes=[".png", ".svg", ".pdf"])
    aligner = VectorAligner(load_word_vectors(args.src_vectors), load_word_vectors(args.tgt_vectors), scoring)
    result = aligner.attend(src_tokens, tgt_tokens)
    links = extract_links(result.weights, args.method)

    rows, columns = result.weights.shape
    print(f"weights: {rows} x {columns} (target words x source words), each row sums to 1; "
          f"scoring: {scoring.describe(aligner.src_vectors.dim)}")
    print(f"attention output (context vectors): {result.output.shape[0]} x {result.output.shape[1]}")
    print(f"links ({args.method}, {len(links)}), source-target with weight:")
    link_width = max((len(f"{i}-{j}") for i, j in links), default=0)
    src_width = max(len(src_tokens[i]) for i, _ in links) if links else 0
    tgt_width = max(len(tgt_tokens[j]) for _, j in links) if links else 0
    for i, j in sorted(links):
        print(f"  {f'{i}-{j}':<{link_width}}  {src_tokens[i]:<{src_width}}  {tgt_tokens[j]:<{tgt_width}}  "
              f"{result.weights[j, i]:.2f}")
    unaligned_src = [token for i, token in enumerate(src_tokens) if all(link[0] != i for link in links)]
    unaligned_tgt = [token for j, token in enumerate(tgt_tokens) if all(link[1] != j for link in links)]
    print(f"unaligned: source {' '.join(unaligned_src) or '(none)'}; target {' '.join(unaligned_tgt) or '(none)'}")
    for side, unknown in (("source", result.unknown_src), ("target", result.unknown_tgt)):
        if unknown:
            print(f"warning: {len(unknown)} unknown {side} word(s) got a zero vector: {' '.join(unknown)}",
                  file=sys.stderr)
    print(f"unknown words: source {' '.join(result.unknown_src) or '(none)'}; "
          f"target {' '.join(result.unknown_tgt) or '(none)'}")
    if args.plot:
        from attnmt.visual.heatmap import plot_attention

        title = f"vector attention ({scoring.describe(aligner.src_vectors.dim)})"
        path = plot_attention(np.asarray(result.weights), src_tokens, tgt_tokens, args.plot, title=title,
                              overwrite=True)
        print(f"wrote {path}")
    return 0
