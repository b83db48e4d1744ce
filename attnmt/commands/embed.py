"""Build English and French word vectors in one shared space from a parallel corpus, offline.

Counts how often each source word and each target word occur in the same sentence pair,
normalises the counts to C[e,f]/sqrt(n_e n_f) (the cosine between the words' sentence-occurrence
vectors) and factorises that matrix with a truncated SVD A = U S V^T: source vectors U S^p, target
vectors V S^p (p = 0 by default; p = 0.5 makes their dot products reconstruct A). Sentences are
lower-cased and split on spaces. Writes OUT/<src-lang>.vec and
OUT/<tgt-lang>.vec (fastText text format) and OUT/vectors.json (method and parameters).
Example: attnmt embed --src train.en.gz --tgt train.fr.gz --out vectors/hansards
"""

from __future__ import annotations

import argparse

from attnmt.commands.options import seed_value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--src", required=True, help="source-language side, one sentence a line (plain or .gz)")
    parser.add_argument("--tgt", required=True, help="target-language side, line i translating line i of --src")
    parser.add_argument("--out", required=True, help="folder to write the vectors into")
    parser.add_argument("--dim", type=int, default=300, help="vector dimension = SVD rank (default 300)")
    parser.add_argument("--max-lines", type=int, default=None, metavar="N", help="use only the first N pairs")
    parser.add_argument("--min-count", type=int, default=2, metavar="N",
                        help="keep words seen at least N times on their side (default 2)")
    parser.add_argument("--seed", type=seed_value, default=0,
                        help="seed of the SVD's start vector, from 0 to 2**63 - 1 (default 0)")
    parser.add_argument("--singular-power", type=float, default=0.0, metavar="P",
                        help="weight the SVD dimensions by singular value^P (default 0, best for alignment)")
    parser.add_argument("--src-lang", default="en", help="name of the source file OUT/<src-lang>.vec (default en)")
    parser.add_argument("--tgt-lang", default="fr", help="name of the target file OUT/<tgt-lang>.vec (default fr)")
    parser.add_argument("--overwrite", action="store_true", help="replace vector files already in OUT")


def run(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from attnmt.alignment import save_vector_dir, tokenize, train_cross_lingual_vectors
    from attnmt.data.corpus import read_parallel
    from attnmt.errors import ConfigError
    from attnmt.runtime.outputs import check_not_run_folder, check_output

    if args.max_lines is not None and args.max_lines < 1:
        raise ConfigError(f"--max-lines must be >= 1, got {args.max_lines}")
    for option, name in (("--src-lang", args.src_lang), ("--tgt-lang", args.tgt_lang)):
        if not name or name in (".", "..") or any(character in name for character in "/\\\0"):
            raise ConfigError(f"{option} {name!r}: a language name, without folders (it names OUT/<name>.vec)")
    if not -1.0 <= args.singular_power <= 1.0:  # NaN fails too
        raise ConfigError(f"--singular-power must be from -1 to 1 (0: no weighting, 0.5: square roots), "
                          f"got {args.singular_power}")
    if args.src_lang == args.tgt_lang:
        raise ConfigError(f"--src-lang and --tgt-lang are both {args.src_lang!r}; the file names would clash")
    out = Path(args.out)
    check_not_run_folder(out, "--out")
    for name in (f"{args.src_lang}.vec", f"{args.tgt_lang}.vec", "vectors.json"):  # before the minute of work
        check_output(out / name, "--out", args.overwrite, inputs=[args.src, args.tgt])

    started = time.perf_counter()
    corpus = read_parallel(args.src, args.tgt)
    src_lines, tgt_lines = corpus.src, corpus.tgt
    if args.max_lines is not None:
        src_lines, tgt_lines = src_lines[: args.max_lines], tgt_lines[: args.max_lines]
    print(f"read {corpus.describe()}; using {len(src_lines)} pairs")
    src_sentences = [tokenize(line) for line in src_lines]
    tgt_sentences = [tokenize(line) for line in tgt_lines]
    src_vectors, tgt_vectors, info = train_cross_lingual_vectors(
        src_sentences, tgt_sentences, dim=args.dim, min_count=args.min_count, seed=args.seed,
        singular_power=args.singular_power, progress=True
    )
    info.update(src_corpus=str(Path(args.src).resolve()), tgt_corpus=str(Path(args.tgt).resolve()),
                max_lines=args.max_lines)
    paths = save_vector_dir(out, src_vectors, tgt_vectors, info, src_lang=args.src_lang,
                            tgt_lang=args.tgt_lang, overwrite=args.overwrite)
    print(
        f"{len(src_vectors)} {args.src_lang} and {len(tgt_vectors)} {args.tgt_lang} words, {args.dim} dimensions "
        f"({info['nonzeros']} non-zero associations), {time.perf_counter() - started:.0f} s"
    )
    for path in paths.values():
        print(f"wrote {path}")
    return 0
