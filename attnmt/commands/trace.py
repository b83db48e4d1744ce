"""Causal tracing (Meng et al. 2022, for encoder-decoders): where does the information that decides
one output word live? The source words named by --corrupt (default: the word the attention gives
the output word most weight) get Gaussian noise on their embeddings (--noise standard deviations of
the embedding table, 3 as in the paper; --samples draws, seeded); then one clean hidden state at a
time is restored, every encoder layer at every source piece and every decoder layer at every output
piece up to the word, and the probability of the word regained is printed as a grid (the indirect
effect: restored minus corrupted). For an RNN of the parallel flow the states are its encoder's
states and its decoder's LSTM output at each step.

Examples:
  attnmt trace runs/transformer "Ein Mann fährt Fahrrad." --word 4
  attnmt trace runs/transformer "Ein Mann fährt Fahrrad." --word 4 --corrupt Fahrrad --plot trace.png
  attnmt trace runs/transformer "Ein Mann fährt Fahrrad." --word 2 --json
"""

from __future__ import annotations

import argparse
import json

from attnmt.commands.options import (
    add_checkpoint_option,
    add_device_option,
    add_threads_option,
    add_trust_option,
    load_translator,
    say,
    seed_value,
)


def _positive(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1000:
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to 1000, got {text!r}")
    return int(text)


def _noise(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 100:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 100], got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN", help="run folder (or a checkpoint file)")
    parser.add_argument("sentence", metavar="SENTENCE", help="the source sentence")
    parser.add_argument("--word", type=_positive, required=True, metavar="N",
                        help="the output word to trace, from 1 (the translation's words; its end </s> is the last)")
    parser.add_argument("--corrupt", nargs="+", default=None, metavar="WORD",
                        help="source words to corrupt (default: the one the attention ranks first for the word)")
    parser.add_argument("--samples", type=_positive, default=10, metavar="K", help="noise draws (default 10)")
    parser.add_argument("--noise", type=_noise, default=3.0, metavar="SIGMA",
                        help="noise in standard deviations of the embedding table (default 3)")
    parser.add_argument("--seed", type=seed_value, default=0, help="seed of the noise (default 0)")
    parser.add_argument("--json", action="store_true", help="print the trace as one JSON object")
    parser.add_argument("--plot", default=None, metavar="FILE.png|svg", help="draw the two grids")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --plot file")
    add_checkpoint_option(parser)
    add_device_option(parser)
    add_trust_option(parser)
    add_threads_option(parser)


def run(args: argparse.Namespace) -> int:
    from attnmt.errors import ConfigError
    from attnmt.evaluation.tracing import trace_word
    from attnmt.runtime.outputs import check_output

    if not args.sentence.strip():
        raise ConfigError("SENTENCE is empty; give the words to translate and trace")
    plot = check_output(args.plot, "--plot", args.overwrite, suffixes=(".png", ".svg"), inputs=[args.run_dir]) \
        if args.plot else None
    args.hf = None
    translator = load_translator(args)
    say("trace", translator.describe())
    problem = translator.source_problem(args.sentence)
    if problem is not None:
        raise ConfigError(f"SENTENCE: {problem}")
    trace = trace_word(translator, args.sentence, args.word, corrupt=args.corrupt, samples=args.samples,
                       noise=args.noise, seed=args.seed)
    if args.json:
        print(json.dumps(trace.to_dict(), ensure_ascii=False))
    else:
        pieces = " ".join(trace.out_pieces[k - 1] for k in trace.word_pieces)
        print(f"output: {trace.output}\nword {trace.word}: {pieces}; corrupted: {' '.join(trace.corrupted)} "
              f"({trace.samples} draws of {trace.noise:g} sd)")
        print(f"p(word): clean {trace.clean:.4f}, corrupted {trace.corrupt:.4f}; restored minus corrupted:")
        for name, grid, columns in (("encoder", trace.encoder, trace.src_pieces),
                                    ("decoder", trace.decoder, ["<s>", *trace.out_pieces][:len(trace.decoder[0])])):
            print(f"  {name}: " + " ".join(f"{piece:>8.8}" for piece in columns))
            for layer, row in enumerate(grid):
                label = "embed" if name == "encoder" and layer == 0 and len(trace.encoder) > 1 else f"layer {layer}"
                print(f"  {label:>7}: " + " ".join(f"{value:>+8.4f}" for value in row))
        print(f"{trace.seconds:.2f} s")
    if plot is not None:
        from attnmt.visual.charts import trace_chart

        trace_chart(trace, plot)
        say("trace", f"wrote {plot}")
    return 0
