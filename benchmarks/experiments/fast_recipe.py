"""The fast CPU recipe (configs/multi30k_rnn_fast.yaml) over seeds and time budgets: what `make demo`'s
five minutes and a quarter of an hour of training give, as mean ± standard deviation.

    PYTHONPATH=benchmarks python benchmarks/experiments/fast_recipe.py                      # seeds 1-3, 5 and 15 minutes: about 50 minutes
    PYTHONPATH=benchmarks python benchmarks/experiments/fast_recipe.py --seeds 1 --minutes 5

Each seed is one run, trained to 5 minutes and scored (test_2016_flickr, greedy and beam 5, with
`benchmarks/recipe.py`), then resumed to 15 minutes and scored again; the JSON of each in
benchmarks/results/recipes/fast/. A recipe whose learning rate follows the budget (``lr_schedule:
warmdown`` or ``cosine``) trains one run per seed and budget instead, as a user who asks for that
budget gets. Run it on an otherwise idle machine:
the budgets are wall-clock minutes. Prints a table and writes
benchmarks/results/multi30k_rnn_fast.json.

A run folder that already holds a finished run of a seed and budget (a trial on validation of the
same config, moved there) is scored as it is, not trained again.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import recipe

from attnmt.cli import main as attnmt_cli
from attnmt.errors import ConfigError, ConfigMismatch
from attnmt.runs.folder import read_saved_config, resolve_resume_config, training_finished
from attnmt.runs.run_config import load_config
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

from common import portable

PROJECT = Path(__file__).resolve().parents[2]
CONFIG = PROJECT / "configs" / "multi30k_rnn_fast.yaml"
RESULTS = PROJECT / "benchmarks" / "results" / "recipes"


def spread(values: list[float]) -> dict:
    return {"mean": round(statistics.mean(values), 2),
            "std": round(statistics.stdev(values), 2) if len(values) > 1 else 0.0, "values": values}


def already_trained(run: Path, config: Path, seed: int, minutes: float) -> bool:
    """Whether ``run`` is a finished run of ``config`` with ``seed`` and a budget of ``minutes``."""
    saved = read_saved_config(run)
    if saved is None or not training_finished(run) or saved["training"].get("max_minutes") != minutes:
        return False
    try:
        resolve_resume_config(saved, load_config(config, {"seed": seed}), {}, run)
    except ConfigMismatch:
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=CONFIG, help="the recipe (default: %(default)s)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--minutes", type=float, nargs="+", default=[5, 15])
    parser.add_argument("--runs", type=Path, default=PROJECT / "runs" / "fast", help="where the runs go")
    parser.add_argument("--json", type=Path, default=RESULTS / "multi30k_rnn_fast.json")
    parser.add_argument("--scores", type=Path, default=RESULTS / "fast", help="where each run's JSON goes")
    args = parser.parse_args()
    config = args.config.resolve()
    try:
        follows_budget = load_config(config).training.lr_schedule in ("warmdown", "cosine")
    except ConfigError as error:
        print(f"fast_recipe.py: {error}", file=sys.stderr)
        return 2
    rows, record = [], {"config": portable(str(config)), "budgets": []}
    scored: dict[float, list[dict]] = {minutes: [] for minutes in sorted(args.minutes)}
    for seed in args.seeds:
        for number, minutes in enumerate(sorted(args.minutes)):
            if follows_budget:  # a run per budget: its lr falls by the end of that budget
                run, resume = args.runs / f"seed{seed}-{minutes:g}min", False
            else:  # one run per seed, resumed (exactly, as if never stopped) from one budget to the next
                run, resume = args.runs / f"seed{seed}", number > 0
            command = ["train", "--out", str(run), "--no-progress", "--max-minutes", f"{minutes:g}"]
            command += ["--resume"] if resume else ["--config", str(config), "--seed", str(seed)]
            if already_trained(run, config, seed, minutes):
                print(f"{run}: a finished run of seed {seed} and {minutes:g} minutes: scored, not trained again",
                      file=sys.stderr)
            else:
                code = attnmt_cli(command)
                if code:
                    return code
            out = args.scores / f"{minutes:g}min-seed{seed}.json"
            code = recipe.main(["--run", str(run), "--json", str(out)])
            if code:
                return code
            scored[minutes].append(json.loads(out.read_text(encoding="utf-8")))
    for minutes, runs in scored.items():
        bleu = {beam: spread([next(b["bleu"] for b in run["by_beam"] if b["beam"] == beam) for run in runs])
                for beam in (1, 5)}
        training = [run["training"] for run in runs]
        budget = {
            "minutes": minutes, "seeds": args.seeds, "parameters": runs[0]["parameters"],
            "bleu_greedy": bleu[1], "bleu_beam5": bleu[5],
            "perplexity": spread([run["test"]["perplexity"] for run in runs]),
            "tokens_per_s_median": spread([t["tokens_per_s_median"] for t in training]),
            "steps": [t["steps"] for t in training],
            "minutes_to_best": [t["minutes_to_best"] for t in training],
            "target_tokens_to_best": [t["target_tokens_to_best"] for t in training],
            "runs": [portable(str(args.scores / f"{minutes:g}min-seed{seed}.json")) for seed in args.seeds],
            "one_run_per_budget": follows_budget,
        }
        record["budgets"].append(budget)
        rows.append([f"{minutes:g}", len(args.seeds), f"{bleu[5]['mean']:.2f} ± {bleu[5]['std']:.2f}",
                     f"{bleu[1]['mean']:.2f} ± {bleu[1]['std']:.2f}",
                     f"{budget['perplexity']['mean']:.2f}", f"{budget['tokens_per_s_median']['mean']:.0f}",
                     f"{statistics.mean(budget['target_tokens_to_best']) / 1e6:.2f}M"])
    print(format_table(["minutes", "seeds", "BLEU beam 5", "BLEU greedy", "perplexity", "target tokens/s",
                        "tokens to best"], rows))
    write_text_atomic(args.json, json.dumps(portable(record), indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
