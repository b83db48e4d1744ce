"""What a JoeyNMT 2.3 training did, read from its ``train.log``, as attnmt's recipes report it.

- ``tokens_per_s_median``: the median of JoeyNMT's own "Tokens per Sec" lines, one per
  ``logging_freq`` steps, each counting target tokens over training time (validation left out);
  ``tokens_per_s_first``: the first such line (start-up and first shapes).
- ``minutes_to_best``: wall minutes from "EPOCH 1" to the best checkpoint's save, validation
  included, as ``minutes_to_best`` of attnmt's ``benchmarks/recipe.py``; ``training_minutes``: to
  the last line of the log.
- ``validations``: step, minutes, perplexity and greedy BLEU of each validation.
- ``batch_size``: the training batch_size its configuration printout names;
  ``epoch_target_tokens``: the target tokens JoeyNMT counted in its first epoch (None before one ends).

    python benchmarks/peers/joeynmt/summarize.py runs/peer/joey-rnn --json joey-rnn.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from datetime import datetime
from pathlib import Path

from attnmt.runtime.atomic_files import write_text_atomic

STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
TOKENS = re.compile(r"Epoch\s+(\d+), Step:\s+(\d+), .*Tokens per Sec:\s+([\d.]+)")
RESULT = re.compile(r"Evaluation result \(greedy\): bleu:\s+([\d.]+), loss:\s+([\d.]+), ppl:\s+([\d.]+)")
PARAMS = re.compile(r"Total params: (\d+)")
BATCH_SIZE = re.compile(r"cfg\.training\.batch_size : (\d+)")
EPOCH_TOKENS = re.compile(r"Epoch\s+1, total training loss: .*num\. of tokens: (\d+)")


def summarize(log: Path) -> dict:
    start = last = None
    tokens_per_s, validations, params, step, epoch_tokens, batch_size = [], [], None, 0, None, None
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        stamp = STAMP.match(line)
        if not stamp:
            continue
        when = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f")
        last = when
        if start is None and line.rstrip().endswith("EPOCH 1"):
            start = when
        if match := PARAMS.search(line):
            params = int(match.group(1))
        if match := BATCH_SIZE.search(line):
            batch_size = int(match.group(1))
        if match := EPOCH_TOKENS.search(line):
            epoch_tokens = int(match.group(1))
        if match := TOKENS.search(line):
            step = int(match.group(2))
            tokens_per_s.append(float(match.group(3)))
        if match := RESULT.search(line):
            validations.append({"step": step, "bleu": float(match.group(1)), "ppl": float(match.group(3)),
                                "best": False, "minutes": None})
        if "New best validation result" in line and validations:
            validations[-1]["best"] = True
        if "Checkpoint saved" in line and validations and validations[-1]["best"] and start is not None:
            validations[-1]["minutes"] = round((when - start).total_seconds() / 60, 2)
    if start is None or last is None or not tokens_per_s:
        raise SystemExit(f"{log}: no training steps logged")
    best = [v for v in validations if v["best"]]
    return {
        "parameters": params,
        "steps": step,
        "training_minutes": round((last - start).total_seconds() / 60, 2),
        "tokens_per_s_median": statistics.median(tokens_per_s),
        "tokens_per_s_first": tokens_per_s[0],
        "log_windows": len(tokens_per_s),
        "epoch_target_tokens": epoch_tokens,
        "batch_size": batch_size,
        "minutes_to_best": best[-1]["minutes"] if best else None,
        "best_step": best[-1]["step"] if best else None,
        "best_val_ppl": best[-1]["ppl"] if best else None,
        "best_val_bleu_greedy": best[-1]["bleu"] if best else None,
        "validations": validations,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", type=Path, help="JoeyNMT's model_dir (holds train.log)")
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args(argv)
    log = args.model_dir / "train.log"
    if not log.is_file():
        parser.error(f"{log}: not found")
    summary = summarize(log)
    text = json.dumps(summary, indent=2) + "\n"
    if args.json:
        write_text_atomic(args.json, text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
