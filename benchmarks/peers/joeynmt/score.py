"""Cased sacrebleu BLEU and chrF of JoeyNMT's hypothesis files, and the length penalty chosen on them.

JoeyNMT's ``test`` writes one detokenised hypothesis a line to ``OUTPUT.dev`` and ``OUTPUT.test``.
This scores each file given against the raw references of a Multi30k split, exactly as attnmt's own
BLEU is computed, and, with ``--choose``, prints the alpha of the highest BLEU (ties: the first
given), so that the length penalty is chosen on validation and the test set scored with it once.

    python benchmarks/peers/joeynmt/score.py --split val --choose \\
        0.6=runs/race/peer/rnn-a0.6/hyps.dev 1.0=runs/race/peer/rnn-a1.0/hyps.dev --json alpha-rnn.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from pathlib import Path

import sacrebleu

from attnmt.runtime.atomic_files import write_text_atomic


def references(data: Path, split: str, language: str = "en") -> list[str]:
    with gzip.open(data / f"{split}.{language}.gz", "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


def score(hypotheses_file: Path, reference_lines: list[str]) -> dict:
    hypotheses = hypotheses_file.read_text(encoding="utf-8").splitlines()
    if len(hypotheses) != len(reference_lines):
        raise SystemExit(f"{hypotheses_file}: {len(hypotheses)} lines, but {len(reference_lines)} references")
    return {"bleu": sacrebleu.corpus_bleu(hypotheses, [reference_lines]).score,
            "chrf": sacrebleu.corpus_chrf(hypotheses, [reference_lines]).score,
            "length_ratio": sum(len(h.split()) for h in hypotheses) / sum(len(r.split()) for r in reference_lines)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("hypotheses", nargs="+", metavar="ALPHA=FILE", help="a length penalty and its hypotheses")
    parser.add_argument("--split", required=True, help="the Multi30k split the hypotheses translate")
    parser.add_argument("--data", type=Path,
                        default=Path(os.environ.get("ATTNMT_DATA_DIR", "../shared/data")) / "multi30k",
                        help="folder of the Multi30k .gz files (default $ATTNMT_DATA_DIR/multi30k)")
    parser.add_argument("--choose", action="store_true", help="print only the alpha of the highest BLEU")
    parser.add_argument("--json", type=Path, help="also write the scores here")
    args = parser.parse_args(argv)
    reference_lines = references(args.data, args.split)
    rows = []
    for item in args.hypotheses:
        alpha, separator, file = item.partition("=")
        if not separator:
            parser.error(f"{item!r}: give ALPHA=FILE")
        rows.append({"alpha": float(alpha), "file": file, **score(Path(file), reference_lines)})
    best = max(rows, key=lambda row: row["bleu"])  # max keeps the first of equal scores
    if args.json:
        write_text_atomic(args.json, json.dumps({"split": args.split, "by_alpha": rows, "chosen_alpha": best["alpha"]},
                                                indent=2) + "\n")
    if args.choose:
        print(best["alpha"])
    else:
        for row in rows:
            print(f"alpha {row['alpha']}: BLEU {row['bleu']:.2f}, chrF {row['chrf']:.2f}, "
                  f"length ratio {row['length_ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
