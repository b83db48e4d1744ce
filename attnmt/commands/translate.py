"""Translate sentences with a trained run.

With sentences as arguments, prints one translation per sentence. Without, reads standard input
one sentence a line and writes one translation a line to standard output (an empty line stays
empty), so it works in a pipe. Lines end at LF or CRLF; a lone CR is part of its line, so output
line k always translates input line k. --plot draws the attention of each sentence as a heatmap;
--attention-out keeps every layer's and head's weights in a .npz or .jsonl file for your own
analyses (read it back with attnmt.load_attention); with --attribution METHOD it keeps each output
word's gradient saliency on the source beside them.

With --hf MODEL instead of RUN, a Hugging Face translation model translates with its own
generate() and its cross-attention is read the same way.

Examples:
  attnmt translate runs/sdp "Ein Mann fährt Fahrrad." --beam 5 --plot bike.png
  zcat test.de.gz | attnmt translate runs/sdp > test.hyp.en
  attnmt translate runs/sdp --attention-out test.npz < test.de
  attnmt translate runs/sdp --attention-out test.npz --attribution integrated < test.de
  attnmt translate --hf Helsinki-NLP/opus-mt-de-en "Ein Mann fährt Fahrrad." --plot bike.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attnmt.commands.options import (
    add_attribution_options,
    add_checkpoint_option,
    add_device_option,
    add_head_mask_options,
    add_hf_option,
    add_precision_option,
    add_threads_option,
    add_trust_option,
    attribution_options,
    heads_off,
    load_translator,
    say,
)

STDIN_CHUNK = 512  # lines translated at once from standard input


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", nargs="?", metavar="RUN", help="run folder (or a checkpoint file); not with --hf")
    parser.add_argument("sentences", nargs="*", metavar="SENTENCE", help="sentences to translate (default: stdin)")
    parser.add_argument("--beam", type=int, default=None, metavar="K",
                        help="beam size (default: the run's search.beam, 1 = greedy)")
    add_checkpoint_option(parser)
    parser.add_argument("--plot", type=Path, metavar="FILE",
                        help="write the attention heatmap of each sentence (.png/.svg/.pdf); with several "
                             "sentences FILE gets -1, -2, ... before its suffix")
    parser.add_argument("--attention-out", type=Path, metavar="FILE",
                        help="write each sentence's pieces, words and attention weights per layer and head "
                             "[L, h, T, S] to FILE (.npz or .jsonl; read it with attnmt.load_attention)")
    add_attribution_options(parser, "with --attention-out, also store")
    add_head_mask_options(parser)
    parser.add_argument("--overwrite", action="store_true", help="replace existing --plot or --attention-out files")
    parser.add_argument("--no-merge-pieces", action="store_true", help="plot subword pieces, not words")
    parser.add_argument("--batch-size", type=int, default=None, metavar="B", help="sentences decoded at once")
    add_precision_option(parser)
    add_device_option(parser)
    add_hf_option(parser)
    add_trust_option(parser)
    add_threads_option(parser)


def _plot_paths(path: Path, count: int) -> list[Path]:
    if count == 1:
        return [path]
    return [path.with_name(f"{path.stem}-{k}{path.suffix}") for k in range(1, count + 1)]


def run(args: argparse.Namespace) -> int:
    from attnmt.errors import ConfigError
    from attnmt.runtime.choices import PLOT_FORMATS
    from attnmt.runtime.outputs import check_output
    from attnmt.visual.export import FORMATS

    if args.hf is not None and args.run_dir is not None:  # no RUN with --hf: the first word is a sentence
        args.sentences.insert(0, args.run_dir)
        args.run_dir = None
    if args.beam is not None and args.beam < 1:
        raise ConfigError(f"--beam must be >= 1, got {args.beam}")
    blank = next((number for number, sentence in enumerate(args.sentences, start=1) if not sentence.strip()), None)
    if blank is not None:
        raise ConfigError(f"sentence {blank} of the arguments is empty; give words to translate (on standard "
                          "input an empty line gives an empty output line)")
    if args.plot is not None and not args.sentences:
        raise ConfigError("--plot needs the sentences as arguments (not on standard input)")
    plot_paths = _plot_paths(args.plot, len(args.sentences)) if args.plot is not None else []
    inputs = [args.run_dir, args.hf]  # the run (its files and heatmaps) or the model folder
    for path in plot_paths:  # before any translating
        check_output(path, "--plot", args.overwrite, inputs, suffixes=[f".{suffix}" for suffix in PLOT_FORMATS])
    if args.attention_out is not None:
        check_output(args.attention_out, "--attention-out", args.overwrite, [*inputs, *plot_paths],
                     suffixes=list(FORMATS))
    args.saliency_options = attribution_options(args)
    if args.saliency_options is not None and args.attention_out is None:
        raise ConfigError("--attribution is stored with the attention: give --attention-out FILE too")
    translator = load_translator(args)
    say("translate", translator.describe())
    with heads_off(args, translator, "translate"):
        if args.sentences:
            return _translate_arguments(args, translator, plot_paths)
        return _translate_stdin(args, translator)


def _translate_arguments(args: argparse.Namespace, translator, plot_paths: list[Path]) -> int:
    """The sentences given as arguments: a translation a line, heatmaps, the attention file."""
    from attnmt.visual.export import attention_records, save_attention
    from attnmt.visual.heatmap import plot_attention

    translations = translator.translate(
        args.sentences, beam=args.beam, batch_size=args.batch_size, return_attention=bool(plot_paths)
    )
    for translation in translations:
        print(translation.output)
    if args.attention_out is not None:
        save_attention(attention_records(translator, translations, attribution=args.saliency_options),
                       args.attention_out)
        print(f"wrote {args.attention_out}", file=sys.stderr)
    for translation, path in zip(translations, plot_paths):
        plot_attention(
            translation.attention, translation.src_pieces, translation.out_pieces, path,
            title=translation.output, merge_pieces=not args.no_merge_pieces,
        )
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _translate_stdin(args: argparse.Namespace, translator) -> int:
    """Standard input, a sentence a line, in chunks: a translation a line on standard output (an
    empty or bad line gives an empty one), and the attention file at the end. Exit status 2 when a
    line could not be translated."""
    from attnmt.runtime.stdin import stdin_lines, undecodable
    from attnmt.visual.export import attention_records, save_attention

    records = []  # for --attention-out

    def flush(lines: list[str | None], first: int) -> None:
        """Translate a chunk of lines (the first is input line ``first``, 0-based); a None line
        (undecodable) and an empty one give an empty line."""
        keep = [k for k, line in enumerate(lines) if line is not None and line.strip()]
        outputs = [""] * len(lines)
        translations = translator.translate([lines[k] for k in keep], beam=args.beam, batch_size=args.batch_size)
        for k, translation in zip(keep, translations):
            outputs[k] = translation.output
        sys.stdout.write("".join(output + "\n" for output in outputs))
        sys.stdout.flush()
        if args.attention_out is not None:
            records.extend(attention_records(translator, translations, [first + k for k in keep],
                                             attribution=args.saliency_options))

    chunk: list[str | None] = []
    bad_lines = 0
    number = 0
    for number, read in enumerate(stdin_lines(), start=1):
        line: str | None = None if isinstance(read, UnicodeDecodeError) else read
        problem = undecodable(read) if isinstance(read, UnicodeDecodeError) else None
        if line is not None and line.strip():
            problem = translator.source_problem(line)
        if problem is not None:
            bad_lines += 1
            say("translate", f"error: standard input line {number}: {problem}; its output line is left empty")
            line = None
        chunk.append(line)
        if len(chunk) >= STDIN_CHUNK:
            flush(chunk, number - len(chunk))
            chunk = []
    if chunk:
        flush(chunk, number - len(chunk))
    if args.attention_out is not None:
        save_attention(records, args.attention_out)
        say("translate", f"wrote {args.attention_out} ({len(records)} sentences)")
    return 2 if bad_lines else 0
