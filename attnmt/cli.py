"""``attnmt <command>``: parses the command line and calls the library.

Each command lives in ``attnmt/commands/<name>.py`` with two functions:
``add_arguments(parser)`` declares its options and ``run(args) -> int`` does the work (importing
heavy libraries such as torch only there, so ``attnmt --help`` stays fast). Errors a user can
cause (``attnmt.errors.AttnmtError``) are printed as one line, without a traceback, exit code 2.
The library's messages name Python parameters (``batch_size=4``, ``overwrite=True``); printed
here they name the command's options instead (``--batch-size 4``, ``--overwrite``).
"""

from __future__ import annotations

import argparse
import errno
import functools
import importlib
import os
import re
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

from attnmt._version import __version__
from attnmt.errors import AttnmtError
from attnmt.runtime.allocator import keep_freed_memory, preload_fast_allocator
from attnmt.runtime.atomic_files import release_claims
from attnmt.runtime.kernel_cache import enlarge_kernel_cache

# command name -> (module under attnmt.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("demo", "a five-minute tour: explore attention, train a translator, translate, evaluate, view"),
    "recipes": ("recipes", "list the run configs that ship with attnmt, or print one"),
    "explore": ("explore", "numeric demonstrations of what one attention head can compute, and what two fix"),
    "train": ("train", "train a translator from a YAML config"),
    "evaluate": ("evaluate", "perplexity, BLEU and chrF of a trained run on a test split"),
    "translate": ("translate", "translate sentences with a trained run"),
    "average": ("average", "average a run's kept checkpoints into RUN/averaged.pt"),
    "compare": ("compare", "train and evaluate several mechanisms over several seeds"),
    "check": ("check", "check that an attention mechanism, your own or built-in, has the properties every one must"),
    "homework": ("homework", "Part 2 of the course handout with your class: train, compare, diagrams, beams, a report"),
    "grade": ("grade", "grade a course's attention homework: each submission checked in a contained process"),
    "view": ("view", "write a self-contained HTML page of interactive attention heatmaps"),
    "explain": ("explain", "is the attention an explanation? faithfulness of attention and attributions, per sentence"),
    "heads": ("heads", "which heads carry the translation: each head switched off in turn, its importance and role"),
    "prune": ("prune", "write a run whose Transformer no longer holds the heads you name"),
    "trace": ("trace", "causal tracing: which hidden states decide one output word"),
    "curves": ("curves", "draw training loss, validation perplexity and BLEU of runs against steps and minutes"),
    "embed": ("embed", "build English and French word vectors in one space from a parallel corpus"),
    "align-words": ("align_words", "align the words of one sentence pair with vector attention"),
    "align": ("align", "word-align whole files with vector or translator attention"),
    "serve": ("serve", "a local web page: type a sentence and watch several models attend, side by side"),
}


#: commands whose process keeps freed memory in glibc (attnmt.runtime.allocator): those that run a
#: model over a corpus (docs/experiments.md, "A training step's speed"); train and compare get it from the
#: Trainer, as do attnmt.train and notebooks
KEEP_FREED_MEMORY = {"evaluate", "translate", "align", "view", "serve", "explain", "heads", "trace"}
#: commands that train, and so start again with tcmalloc or jemalloc preloaded where the machine has one
#: (attnmt.runtime.allocator: glibc's speed in less memory)
PRELOAD_ALLOCATOR = {"train", "compare", "homework"}

#: what writing the output can fail with: a full disk or quota, an I/O error
STDOUT_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG)

#: library parameters whose command-line option has another name
PARAMETER_OPTIONS = {"set_options": "--set", "num_threads": "--threads"}


def in_command_words(message: str, parser: argparse.ArgumentParser) -> str:
    """``message`` with each ``parameter=True`` the command has an option for written as
    ``--option``, and each ``parameter=value`` as ``--option value``."""
    options = {}
    for action in parser._actions:
        long = [option for option in action.option_strings if option.startswith("--")]
        if long:
            options[action.dest] = long[0]
    options.update({parameter: option for parameter, option in PARAMETER_OPTIONS.items()
                    if option in options.values()})
    if not options:
        return message
    names = "|".join(sorted(map(re.escape, options), key=len, reverse=True))

    def as_option(match: re.Match) -> str:
        option = options[match.group(1)]
        return option if match.group(2) else f"{option} "

    return re.sub(rf"(?<![\w.-])({names})=(True\b)?", as_option, message)


def show_warnings_in_one_line(command: str) -> None:
    """Python warnings (an option's old name, ...) as one line each on stderr, like the errors."""
    def show(message, category, filename, lineno, file=None, line=None) -> None:
        print(f"attnmt {command}: warning: {message}", file=sys.stderr if file is None else file)

    warnings.showwarning = show


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a mistake on the command line is one line that points to --help, not the
    whole usage block (commands' own parsers are of this class too)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)

    def _print_message(self, message: str, file: Any = None) -> None:
        """As argparse's, but a failed write (--help or --version onto a full disk) is not swallowed:
        ``main`` says it in one line instead of ending with status 0 and no output."""
        if message:
            (file or sys.stderr).write(message)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _unsafe_to_interrupt(frame) -> bool:
    """Whether a KeyboardInterrupt raised in ``frame`` would do harm: inside an import a library's
    initialisation (torch's C part) cannot be interrupted (the process aborted, status -6); inside a
    weakref callback or a ``__del__`` Python prints it as "Exception ignored" and drops the stop."""
    while frame is not None:
        code = frame.f_code
        if (code.co_filename.startswith("<frozen importlib") or code.co_name == "__del__"
                or code.co_filename.endswith(("weakref.py", "_weakrefset.py"))):
            return True
        frame = frame.f_back
    return False


def _ask_again(signal_number: int) -> None:
    """Send the stop to this process again in 50 ms, when the main thread is somewhere else."""
    retry = threading.Timer(0.05, os.kill, (os.getpid(), signal_number))
    retry.daemon = True
    retry.start()


_last_stop: int | None = None  # the signal of the last KeyboardInterrupt _interrupt raised


def _interrupt(signal_number: int, frame) -> None:
    if _unsafe_to_interrupt(frame):  # ask again in 50 ms, until the main thread is somewhere safe
        _ask_again(signal_number)
        return
    global _last_stop
    _last_stop = signal_number
    raise KeyboardInterrupt


def _stop_lost_in_a_callback(unraisable, previous_hook) -> None:
    """``sys.unraisablehook`` while stops are caught. A weakref callback defined in a library (one of
    matplotlib's, say) shows no sign of being one to ``_unsafe_to_interrupt``: a stop raised there
    reaches Python as an exception it cannot raise, which it prints with a traceback ("Exception
    ignored in ...") and drops. That stop is asked again, silently; anything else goes to the
    previous hook."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _last_stop is not None:
        _ask_again(_last_stop)
        return
    previous_hook(unraisable)


def stop_on_signals() -> Callable[[], None]:
    """SIGINT (Ctrl-C) and SIGTERM (``kill``, a job scheduler's stop) stop a command the same way:
    files being written are finished or removed, temporary files and folders cleaned up, exit
    status 130. A stop that comes where raising is unsafe (``_unsafe_to_interrupt``), or one that
    Python drops in a callback, is asked again 50 ms later. Returns what puts the caller's
    handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    handlers = {number: signal.signal(number, _interrupt) for number in STOP_SIGNALS}
    previous_hook = sys.unraisablehook
    sys.unraisablehook = functools.partial(_stop_lost_in_a_callback, previous_hook=previous_hook)

    def restore() -> None:
        for number, handler in handlers.items():
            signal.signal(number, handler)
        sys.unraisablehook = previous_hook

    return restore


def finish_without_stops() -> None:
    """Once a command has ended, its files are whole: a SIGTERM or Ctrl-C in the second Python and
    torch take to shut down would only turn exit status 0 into 143 (Python restores the default
    handlers before that teardown). Called only when attnmt is the process, never for main([...])."""
    if threading.current_thread() is threading.main_thread():
        for number in STOP_SIGNALS:
            signal.signal(number, signal.SIG_IGN)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="attnmt",
        description="Attention in sequence-to-sequence models: mechanisms, translators, "
        "alignments and pictures of what attention does.",
    )
    parser.add_argument("--version", action="version", version=f"attnmt {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(f"attnmt.commands.{module_name}")  # a broken command is an error
        sub = subparsers.add_parser(
            name, help=help_text, description=module.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        module.add_arguments(sub)
        sub.set_defaults(run=module.run, command_parser=sub)
    return parser


def _undecodable_argument(arguments: list[str]) -> str | None:
    """One line naming the first argument that is not valid UTF-8 (Python keeps its bytes as lone
    surrogates, which fail later, far from the cause), or None."""
    for number, argument in enumerate(arguments, start=1):
        try:
            argument.encode("utf-8")
        except UnicodeEncodeError:
            bad = next(index for index, character in enumerate(argument) if 0xDC80 <= ord(character) <= 0xDCFF)
            byte = ord(argument[bad]) - 0xDC00  # the byte surrogateescape kept
            return f"argument {number} is not valid UTF-8 (byte {byte:#04x} at character {bad + 1}); give text in UTF-8"
    return None


def _stdout_failed(command: str | None, error: OSError) -> int:
    """The output could not be written (a full disk, ``> /dev/full``, an I/O error): one line, exit 2;
    stdout is pointed at /dev/null so that Python's own flush at exit does not fail again."""
    print(f"attnmt{' ' + command if command else ''}: error: cannot write the output ({error.strerror or error})",
          file=sys.stderr)
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 2


def _flushed(command: str | None) -> int:
    """0 once standard output is flushed, or the status of ``_stdout_failed`` where it cannot be."""
    try:
        sys.stdout.flush()
    except OSError as error:
        if error.errno not in STDOUT_ERRORS:
            raise
        return _stdout_failed(command, error)
    return 0


def _parsed(parser: argparse.ArgumentParser, argv: list[str] | None) -> tuple[Any, int]:
    """``(parse_known_args(argv), 0)``, or ``(None, status)`` when --help or --version could not be
    written (a full disk): argparse prints them and exits inside the parsing."""
    try:
        return parser.parse_known_args(argv), 0
    except OSError as error:
        if argv is not None or error.errno not in STDOUT_ERRORS:
            raise
        return None, _stdout_failed(None, error)
    except SystemExit:
        status = 0 if argv is not None else _flushed(None)
        if status:
            return None, status
        raise


def _help(parser: argparse.ArgumentParser, argv: list[str] | None) -> int:
    """``attnmt`` alone: the help, or one line where it cannot be written."""
    try:
        parser.print_help()
    except OSError as error:
        if argv is not None or error.errno not in STDOUT_ERRORS:
            raise
        return _stdout_failed(None, error)
    return _flushed(None) if argv is None else 0


def _closed_standard_streams() -> list[str]:
    """The standard streams ("input", "output", "error") that were closed when attnmt started
    (``>&-``): each gets /dev/null, so that no file attnmt opens later takes its number and
    receives what is printed. Returns their names."""
    closed = []
    for number, name in ((0, "input"), (1, "output"), (2, "error")):
        try:
            os.fstat(number)
        except OSError:
            closed.append(name)
    for _ in closed:
        os.open(os.devnull, os.O_WRONLY)  # the lowest free numbers: the closed streams
    if "error" in closed or sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (for the life of the process)
    return closed


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        if "output" in _closed_standard_streams() or sys.stdout is None:
            command = next((item for item in sys.argv[1:] if not item.startswith("-")), None)
            print(f"attnmt{f' {command}' if command else ''}: error: standard output is closed; send it to "
                  "a file or to /dev/null (> /dev/null) instead", file=sys.stderr)
            return 2
        undecodable = _undecodable_argument(sys.argv[1:])
        if undecodable is not None:
            print(f"attnmt: error: {undecodable}", file=sys.stderr)
            return 2
    parser = build_parser()
    # Options may come before, between or after a command's list of sentences or runs (``attnmt
    # translate RUN --beam 5 "Ein Hund."``): argparse leaves the items after an option over, and
    # they join the rest.
    parsed, failed = _parsed(parser, argv)
    if parsed is None:
        return failed
    args, extra = parsed
    if extra:
        trailing = next((name for name in ("sentences", "runs") if isinstance(getattr(args, name, None), list)), None)
        if trailing is None or any(item.startswith("-") for item in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        getattr(args, trailing).extend(extra)
    if getattr(args, "run", None) is None:
        return _help(parser, argv)
    show_warnings_in_one_line(args.command)
    if argv is None:  # attnmt is the process
        if args.command in PRELOAD_ALLOCATOR:
            preload_fast_allocator()  # returns only when there is none to preload, or when it runs already
        enlarge_kernel_cache()  # before the command's first kernel (attnmt.runtime.kernel_cache)
        if args.command in KEEP_FREED_MEMORY:
            keep_freed_memory()
    return _run_command(args, argv)


def _run_command(args: argparse.Namespace, argv: list[str] | None) -> int:
    """Run the parsed command: its errors as one line with exit 2, a stop as 130, a reader that left
    as 141, a full disk on the output as one line."""
    restore_stops = stop_on_signals()
    try:
        status = int(args.run(args) or 0)
        if argv is None:
            sys.stdout.flush()  # here, where a full disk is one line, not at the interpreter's exit
        return status
    except AttnmtError as error:
        print(f"attnmt {args.command}: error: {in_command_words(str(error), args.command_parser)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"attnmt {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of the output left (``attnmt recipes | head``): no more to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's own flush at exit would fail again
        return 141
    except OSError as error:
        if error.errno not in STDOUT_ERRORS:
            raise
        return _stdout_failed(args.command, error)
    finally:
        release_claims()  # the new outputs this command claimed (attnmt.runtime.atomic_files)
        if argv is None:  # attnmt is the process (the console script, python -m attnmt)
            finish_without_stops()
        else:  # a caller's process (tests, notebooks): its own handlers again
            restore_stops()


if __name__ == "__main__":
    sys.exit(main())
