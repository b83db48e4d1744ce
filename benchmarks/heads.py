"""Which heads carry the translation? Every head of each run switched off, ranked, pruned and traced.

For each translation run (``NAME=RUN_FOLDER``, Multi30k), on the first --sentences pairs of the
validation split (nothing here is a choice made on a test set):

- ``attnmt heads``' report: per head Δ loss, Δ BLEU (the run's own beam), importance, confidence and
  roles, the rank correlation of importance with Δ loss, and its seconds;
- the pruning curves (``--prune-curve``): how many heads of each part go within 0.5 BLEU, per order;
- for a Transformer, the run pruned of the heads the ablation order removes within 0.5 BLEU
  (``attnmt prune``), its validation BLEU and its decoding seconds beside the original's (the same
  sentences, beam, threads, taking turns three times, the median);
- causal tracing (``attnmt trace``) of one output word per sentence over --trace-sentences pairs
  (the word the attention of the search ranks most sure of its source word, EOS aside): where the
  largest indirect effect lies (encoder or decoder, which layer, at a corrupted source piece or
  not, at the word's own decoder position or before), and the seconds per word.

For each alignment run (``--aer NAME=RUN_FOLDER``, Hansards en-fr) every cross-attention head's AER
on the HLT-NAACL 2003 test gold (one look at that set per run), beside its Δ loss and importance
on the 37 trial pairs.

    python benchmarks/heads.py transformer15=runs/t15 rnn_multihead=runs/rnn-mh \\
        --aer hansards_transformer=runs/hans-tf --json benchmarks/results/heads/heads.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import numpy as np

from attnmt.alignment import read_gold
from attnmt.alignment.links import read_word_pairs
from attnmt.alignment.translator_attention import TranslatorAligner, head_aers
from attnmt.data.pieces import group_pieces
from attnmt.decoding.translator import Translator
from attnmt.evaluation.heads import head_report, probe_of_run, prune_curve, removable_by_part
from attnmt.evaluation.scores import corpus_scores
from attnmt.evaluation.tracing import trace_word
from attnmt.runs.pruned import write_pruned_run
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

from common import DATA, machine, portable

PARTS = ("encoder_self", "decoder_self", "cross")


def part_means(rows: list[dict], key: str) -> dict[str, float | None]:
    """The mean of ``key`` over each part's heads."""
    return {part: (statistics.fmean(values) if (values := [row[key] for row in rows if row["part"] == part
                                                           and row[key] is not None]) else None)
            for part in PARTS}


def measure_run(run: Path, args: argparse.Namespace, workdir: Path) -> dict:
    translator = Translator.load(run, num_threads=args.threads)
    probe = probe_of_run(translator, run, "valid", args.sentences)
    report = head_report(translator, probe, name=str(run))
    curves = prune_curve(translator, probe, report)
    base = curves[0].bleu[0]
    reported = report.to_dict()
    result = {**reported, "model_type": translator.run_config.model.type,
              "attention": getattr(translator.run_config.model, "attention", None), "steps": translator.step,
              "mean_by_part": {key: part_means(reported["heads"], key)
                               for key in ("delta_loss", "delta_bleu", "importance")},
              "prune_curves": [asdict(curve) for curve in curves],
              "removable_within_half_bleu": {
                  f"{curve.order}{'' if curve.seed is None else f'-{curve.seed}'}":
                  {"total": curve.removable(base), **removable_by_part(curve, base)} for curve in curves}}
    best = max(reported["heads"], key=lambda row: row["delta_loss"])
    result["most_harmful_to_remove"] = f"{best['part']}:{best['layer']}:{best['head']}"
    if result["model_type"] == "transformer":
        result["pruned"] = pruned_speed(translator, run, curves[0], probe, args, workdir)
    result["tracing"] = tracing(translator, probe, args)
    return result


def pruned_speed(translator: Translator, run: Path, ablation, probe, args: argparse.Namespace, workdir: Path) -> dict:
    """The run pruned of the heads the ablation order removes within 0.5 BLEU: its BLEU and its
    decoding seconds beside the original's."""
    removable = ablation.removable(ablation.bleu[0])
    if removable == 0:
        return {"heads_removed": 0}
    heads = ablation.heads[:removable]
    out, _ = write_pruned_run(run, ",".join(heads), workdir / f"{run.name}-pruned")
    pruned = Translator.load(out, num_threads=args.threads)
    seconds: dict[str, list[float]] = {"original": [], "pruned": []}
    outputs = {}
    for _ in range(3):
        for name, model in (("original", translator), ("pruned", pruned)):
            started = time.perf_counter()
            translations = model.translate(probe.sources)
            seconds[name].append(time.perf_counter() - started)
            outputs[name] = [t.output for t in translations]
    original, after = statistics.median(seconds["original"]), statistics.median(seconds["pruned"])
    return {"heads_removed": removable, "heads": heads,
            "bleu_original": corpus_scores(outputs["original"], probe.references).bleu,
            "bleu_pruned": corpus_scores(outputs["pruned"], probe.references).bleu,
            "decode_seconds_original": original, "decode_seconds_pruned": after,
            "speed_ratio": original / after,
            "parameters_original": sum(p.numel() for p in translator.model.parameters()),
            "parameters_pruned": sum(p.numel() for p in pruned.model.parameters())}


def tracing(translator: Translator, probe, args: argparse.Namespace) -> dict:
    """One output word per sentence traced: where its largest indirect effect lies."""
    places: Counter = Counter()
    seconds, words = [], 0
    translations = translator.translate(probe.sources[:args.trace_sentences], return_attention=True)
    for source, translation in zip(probe.sources[:args.trace_sentences], translations):
        out_words = group_pieces(translation.out_pieces)
        if len(out_words) < 2:
            continue
        attention = np.asarray(translation.attention)
        peaks = [float(attention[start, :-1].max()) if text != "</s>" else -1.0 for text, start, _ in out_words]
        word = int(np.argmax(peaks)) + 1
        trace = trace_word(translator, source, word, samples=args.samples, translation=translation)
        seconds.append(trace.seconds)
        words += 1
        corrupted = {k for k, (text, start, stop) in enumerate(group_pieces(trace.src_pieces))
                     for k in range(start, stop) if text in trace.corrupted}
        grids = [("encoder", trace.encoder), ("decoder", trace.decoder)]
        stack, layer, position = max(((name, layer, position) for name, grid in grids
                                      for layer, row in enumerate(grid) for position in range(len(row))),
                                     key=lambda place: dict(grids)[place[0]][place[1]][place[2]])
        if stack == "encoder":
            where = "at the corrupted source word" if position in corrupted else "at another source piece"
        else:
            where = "at the word's own position" if position >= trace.word_pieces[0] - 1 else "at an earlier position"
        places[f"{stack} layer {layer}, {where}"] += 1
    return {"words": words, "samples": args.samples, "seconds_per_word_mean": statistics.fmean(seconds),
            "seconds_per_word_max": max(seconds), "largest_effect": dict(places.most_common())}


def measure_aer(run: Path, args: argparse.Namespace) -> dict:
    translator = Translator.load(run, num_threads=args.threads)
    probe = probe_of_run(translator, run, "valid", args.sentences)
    report = head_report(translator, probe, name=str(run), bleu=False)
    folder = DATA / "alignment-gold" / "hansards-en-fr"
    src, tgt = read_word_pairs(folder / "test.en-fr.en", folder / "test.en-fr.fr")
    gold = read_gold(folder / "test.en-fr.naacl", "naacl", [len(s) for s in src], [len(t) for t in tgt])
    aers = head_aers(TranslatorAligner(translator), src, tgt, gold.sure, gold.possible)
    rows = [{**row, "aer": aers[(row["layer"], row["head"])]} for row in report.to_dict()["heads"]
            if row["part"] == "cross"]
    most = max(rows, key=lambda row: row["delta_loss"])
    aligner = min(rows, key=lambda row: row["aer"])
    return {"steps": translator.step, "pairs_for_delta_loss": report.sentences, "gold_pairs": len(src),
            "cross_heads": rows, "most_harmful_to_remove": f"cross:{most['layer']}:{most['head']}",
            "best_aligner": f"cross:{aligner['layer']}:{aligner['head']}", "best_aer": aligner["aer"],
            "aer_of_most_harmful": most["aer"], "seconds": report.seconds}


def print_run(name: str, result: dict) -> None:
    print(f"\n{name}: {result['model_type']}, {result['sentences']} pairs, loss {result['loss']:.4f}, BLEU "
          f"{result['bleu']:.2f} (beam {result['beam']}); {result['seconds']:.1f} s; importance ~ Δ loss: ρ "
          f"{result['importance_rank_correlation']:.3f}")
    print(format_table(["part", "mean Δ loss", "mean Δ BLEU", "mean importance"],
                       [[part, *(f"{result['mean_by_part'][key][part]:+.4f}" if result['mean_by_part'][key][part]
                                 is not None else "–" for key in ("delta_loss", "delta_bleu", "importance"))]
                        for part in PARTS if result["mean_by_part"]["delta_loss"][part] is not None]))
    print(format_table(["order", "removable", *PARTS],
                       [[order, row["total"], *(row[part] for part in PARTS)]
                        for order, row in result["removable_within_half_bleu"].items()]))
    if result.get("pruned", {}).get("heads_removed"):
        pruned = result["pruned"]
        print(f"pruned of {pruned['heads_removed']} heads: BLEU {pruned['bleu_pruned']:.2f} against "
              f"{pruned['bleu_original']:.2f}, decoding {pruned['speed_ratio']:.2f}x as fast")
    trace = result["tracing"]
    print(f"tracing {trace['words']} words ({trace['seconds_per_word_mean']:.2f} s each, at most "
          f"{trace['seconds_per_word_max']:.2f}): largest effect " +
          "; ".join(f"{place}: {count}" for place, count in trace["largest_effect"].items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", metavar="NAME=RUN", help="Multi30k runs, each named")
    parser.add_argument("--aer", nargs="*", default=[], metavar="NAME=RUN", help="Hansards en-fr runs: AER per head")
    parser.add_argument("--sentences", type=int, default=200, help="validation pairs (default 200)")
    parser.add_argument("--trace-sentences", type=int, default=100, help="sentences traced (default 100)")
    parser.add_argument("--samples", type=int, default=10, help="noise draws of each trace (default 10)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: follow the load)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()

    def named(items: list[str]) -> dict[str, Path]:
        found = {}
        for item in items:
            name, _, folder = item.partition("=")
            if not folder:
                parser.error(f"{item!r}: give NAME=RUN_FOLDER")
            found[name] = Path(folder)
        return found

    runs, aer_runs = named(args.runs), named(args.aer)
    started = time.perf_counter()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as workdir:
        for name, run in runs.items():
            results[name] = measure_run(run, args, Path(workdir))
            print_run(name, results[name])
    alignment = {}
    for name, run in aer_runs.items():
        alignment[name] = measure_aer(run, args)
        print(f"\n{name}: best aligner {alignment[name]['best_aligner']} (AER {alignment[name]['best_aer']:.4f}); "
              f"most harmful to remove {alignment[name]['most_harmful_to_remove']} (AER "
              f"{alignment[name]['aer_of_most_harmful']:.4f})")
    wall = time.perf_counter() - started
    if args.json is not None:
        document = {"command": portable(" ".join(["python", "benchmarks/heads.py", *sys.argv[1:]])),
                    "machine": machine("torch"), "wall_seconds": wall, "runs": portable(results),
                    "alignment": portable(alignment)}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(args.json, json.dumps(document, indent=2, ensure_ascii=False) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
