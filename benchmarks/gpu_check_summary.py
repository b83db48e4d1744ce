"""One JSON from the raw files of a lease run by ``benchmarks/gpu_check_session.sh``, and its tables.

    python benchmarks/gpu_check_summary.py benchmarks/results/gpu/lease-3 \\
        --json benchmarks/results/gpu/lease-3/summary.json

The folder holds what came back from the GPU machine: ``suite-N.txt`` (the outcome lines of each
run of the test suite there, in order), ``session.log``, the Transformer's ``metrics.jsonl`` and
``transformer-test.json``, ``decode.json`` (host reads per search step) and ``compile.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

# The cause of each failure of the lease's suite runs, as its traceback showed it (suite.log there),
# by the test's name; a test name absent here stops the script.
CAUSES = {
    "suite-1.txt": [
        ("attnmt: saliency of an RNN on CUDA (cuDNN has no backward in eval mode)",
         ("test_saliency_aligner_reads", "test_cli_align_with_saliency", "test_saliency_is_stored_beside",
          "test_view_with_saliency", "test_compare_adds_the_agreement", "test_translations_and_show_render")),
        ("attnmt: a model too large was allocated before it was checked (the worker process died)",
         ("test_what_the_fuzzer_found",)),
        ("test: its reference put CPU tensors into a CUDA model",
         ("test_batched_force_decoding", "test_transformer_layer_and_head_selection")),
        ("test: TF32 products beyond a float32 tolerance",
         ("test_reversed_direction", "test_the_readout_of_a_search_output", "test_per_head_weights_reproduce")),
        ("test: expected the CPU (a message naming it, fp16 LSTM refused there)",
         ("test_commands_say_where", "test_bfloat16_search", "test_the_longest_output", "test_every_mechanism_and_seed",
          "test_running_again_reuses", "test_fp16_lstm_on_the_cpu", "test_a_training_batch_too_big")),
        ("test: numbers stored by attnmt 0.1.0 on a CPU", ("test_a_run_of_0_1_0", "test_relative_data_paths")),
    ],
    "suite-2.txt": [
        ("test: TF32 products beyond a float32 tolerance", ("test_saliency_aligner_reads",)),
        ("test: expected the CPU (a message naming it, fp16 LSTM refused there)", ("test_commands_say_where",)),
        ("test: another processor's rounding in a CPU run (9e-8 in a loss)",
         ("test_a_run_of_0_1_0_resumes", "test_relative_data_paths")),
    ],
}


def causes(name: str, failed: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for test in failed:
        function = test.split("::")[1]
        cause = next(cause for cause, prefixes in CAUSES[name] if function.startswith(prefixes))
        counts[cause] = counts.get(cause, 0) + 1
    return counts


def suite_run(path: Path) -> dict:
    """Counts and failed tests of one suite run, from pytest's last line and its FAILED lines."""
    text = path.read_text(encoding="utf-8")
    counts = {word: int(number) for number, word in re.findall(r"(\d+) (passed|failed|skipped)", text.splitlines()[-1])}
    seconds = re.search(r"in ([\d.]+)s", text.splitlines()[-1])
    failed = [line.split()[1] for line in text.splitlines() if line.startswith("FAILED ")]
    return {"file": path.name, "passed": counts.get("passed", 0), "failed": counts.get("failed", 0),
            "skipped": counts.get("skipped", 0), "seconds": float(seconds.group(1)) if seconds else None,
            "crashed_workers": text.count("replacing crashed worker"),
            "causes": causes(path.name, failed) if failed else {}, "failed_tests": failed}


def transformer(folder: Path) -> dict:
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    [summary] = [r for r in records if r["type"] == "summary"]
    speeds = [r["tokens_per_s"] for r in records if r["type"] == "train" and "tokens_per_s" in r]
    log = (folder / "session.log").read_text(encoding="utf-8")
    valid, test = (float(bleu) for bleu in re.findall(r"alpha 1\.2: BLEU ([\d.]+)", log))
    test_json = json.loads((folder / "transformer-test.json").read_text(encoding="utf-8"))
    [row] = test_json["runs"][0]["by_alpha"]
    assert round(row["bleu"], 2) == test  # the log's test line is the JSON's
    return {"minutes_trained": round(summary["elapsed"] / 60, 2),
            "minutes_to_best": round(summary["best_elapsed"] / 60, 2), "stop_reason": summary["stop_reason"],
            "best_val_ppl": round(summary["best_val_ppl"], 2),
            "tokens_per_s_median": round(statistics.median(speeds)), "alpha": row["alpha"], "val_bleu": valid,
            "test_bleu": round(row["bleu"], 2), "test_chrf": round(row["chrf"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--json", type=Path, required=True, help="where to write the summary")
    args = parser.parse_args()
    folder = args.folder
    decode = json.loads((folder / "decode.json").read_text(encoding="utf-8"))
    compiled = json.loads((folder / "compile.json").read_text(encoding="utf-8"))
    eager, fast = compiled["results"]
    result = {
        "device": decode["machine"]["name"], "torch": decode["machine"]["torch"],
        "suite": [suite_run(path) for path in sorted(folder.glob("suite-*.txt"))],
        "transformer": transformer(folder),
        "host_reads": {run["model"]: run["host_reads"] | {"seconds_median": run["by_batch_size"][0]["seconds_median"]}
                       for run in decode["runs"]},
        "compile": {"eager_tokens_per_s": round(eager["tokens_per_s"]),
                    "compiled_tokens_per_s": round(fast["tokens_per_s"]),
                    "ratio": round(fast["tokens_per_s"] / eager["tokens_per_s"], 2),
                    "first_steps_seconds_eager": round(eager["first_steps_seconds"], 2),
                    "first_steps_seconds_compiled": round(fast["first_steps_seconds"], 2)},
    }
    print(format_table(["suite run", "passed", "failed", "skipped", "seconds"],
                       [[s["file"], s["passed"], s["failed"], s["skipped"], s["seconds"]] for s in result["suite"]]))
    print(format_table(["model", "decoder steps", "host reads", "per step", "seconds"],
                       [[m, r["decoder_steps"], r["host_reads"], r["host_reads_per_step"], r["seconds_median"]]
                        for m, r in result["host_reads"].items()]))
    print(json.dumps(result["transformer"], indent=1))
    write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
