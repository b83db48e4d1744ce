"""Serve a local web page: type a sentence and watch several models translate it and attend, side
by side.

Each model is loaded once: run folders (under the same --trust-run-code rule as every other
command) and Hugging Face models (--hf). The page shows every model's translation with its
log-probability and time, its attention per layer and head, gradient saliency beside it, its best
hypotheses, decoding from a prefix you choose, alignment links scored against gold links, and for
an RNN what happens when one step's attention is pinned on a source word. Hovering an output word
in one panel shows where every model looked for it. Nothing is fetched from the network.

It listens on 127.0.0.1 (this machine only) unless --host says otherwise; Ctrl-C stops it.
docs/serving.md has the options, the safety rules and the JSON API.

Examples:
  attnmt serve runs/rnn-sdp
  attnmt serve runs/rnn-sdp runs/transformer --hf Helsinki-NLP/opus-mt-de-en --open
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnmt.commands.options import add_checkpoint_option, add_device_option, add_trust_option, say


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="*", type=Path, metavar="RUN", help="run folders to serve")
    parser.add_argument("--hf", metavar="MODEL", action="append", default=[],
                        help="a Hugging Face translation model to serve beside the runs (repeatable; needs "
                             "pip install 'attnmt[hf]')")
    add_checkpoint_option(parser)
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="the port (default 8000; 0: any free port)")
    parser.add_argument("--split", default="test",
                        help="the test set whose sentences the page offers (default: the first run's first)")
    parser.add_argument("--gold", metavar="PREFIX", default=None,
                        help="a gold alignment split, PREFIX.<src>-<tgt>.<src|tgt|naacl> (e.g. "
                             "../shared/data/alignment-gold/hansards-en-fr/trial): its pairs, with their links, "
                             "are the examples the page offers")
    parser.add_argument("--open", action="store_true", help="open the page in the default web browser")
    parser.add_argument("--log", action="store_true", help="print a line for every request")
    add_device_option(parser, default_from="each run's search.device")
    add_trust_option(parser)


def run(args: argparse.Namespace) -> int:
    import ipaddress
    import webbrowser

    from attnmt.errors import ConfigError
    from attnmt.serve.jobs import ModelWorkers
    from attnmt.serve.models import gold_examples, load_models, test_examples
    from attnmt.serve.server import make_server
    from attnmt.serve.views import Views

    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be from 0 to 65535, got {args.port}")
    models = load_models(args.runs, args.hf, args.checkpoint, args.device, args.trust_run_code,
                         say=lambda line: say("serve", line))
    examples = gold_examples(args.gold, models) if args.gold is not None else test_examples(models, args.split)
    jobs = ModelWorkers([served.name for served in models])  # a worker thread per model (attnmt.serve.jobs)
    try:
        server = make_server(Views(models, examples, jobs), args.host, args.port, quiet=not args.log)
    except OSError as error:
        raise ConfigError(f"--host {args.host} --port {args.port}: cannot listen there "
                          f"({error.strerror or error}); choose another port") from None
    try:
        loopback = ipaddress.ip_address(args.host).is_loopback
    except ValueError:
        loopback = args.host == "localhost"
    if not loopback:
        say("serve", f"warning: listening on {args.host}: anyone who can reach this address can use the models")
    print(f"attnmt serve: {server.url} ({len(models)} model{'' if len(models) == 1 else 's'}, "
          f"{len(examples)} examples; Ctrl-C stops it)", flush=True)
    if args.open:
        webbrowser.open(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        say("serve", "stopping: waiting for the models' running work to end")
    finally:
        server.server_close()
        try:
            ended = jobs.stop()
        except KeyboardInterrupt:  # a second Ctrl-C: the workers stay as they are, and so does the wait
            ended = jobs.stop()
        say("serve", "stopped" if ended else "stopped (a model was still working)")
    return 0
