"""What the benchmarks share.

- Result files name paths the way any machine can read them: relative to the project, or to the
  data folder as ``$ATTNMT_DATA/...``; never the absolute path of the machine that wrote them
  (``portable``).
- The alignment benchmarks' data: where the Hansards data and the gold are, the results file (one
  section per question, the others kept), the published figures, and printing a table of rows. The
  protocol itself (choose on trial, score on test, paired bootstrap, error analysis) is a tested
  module of the library: ``attnmt.alignment.protocol``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from attnmt.alignment.protocol import GoldSplit, read_gold_split
from attnmt.data.corpus import read_parallel
from attnmt.runtime.atomic_files import write_text_atomic
from attnmt.runtime.tables import format_table

PROJECT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("ATTNMT_SHARED_DATA", PROJECT.parent / "shared" / "data")).resolve()
_ABSOLUTE = re.compile(r"(?<![\w.])(/[^\s,;:'\"()]+)")


def _relative(match: re.Match) -> str:
    path = Path(os.path.normpath(match.group(1)))
    roots = ((DATA, "$ATTNMT_DATA"), (PROJECT, None), (Path(tempfile.gettempdir()), "$TMPDIR"), (Path.home(), "~"))
    for root, name in roots:
        try:
            inside = path.relative_to(root)
        except ValueError:
            continue
        return f"{name}/{inside}" if name else str(inside)
    return match.group(1)


def portable(value: Any) -> Any:
    """``value`` (JSON-ready data) with every absolute path inside its strings made relative.

    A path is written relative to the data folder, the project, the temporary folder or the home folder,
    the first that holds it, so that no result file names a folder of the machine it was measured on.
    """
    if isinstance(value, str):
        return _ABSOLUTE.sub(_relative, value)
    if isinstance(value, dict):
        return {key: portable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [portable(item) for item in value]
    return value


# ---- the alignment benchmarks

HANSARDS = DATA / "hansards-en-fr"
GOLD = DATA / "alignment-gold" / "hansards-en-fr"
RESULTS = PROJECT / "benchmarks" / "results" / "alignment" / "alignment.json"

#: AER on this test set, for orientation (see docs/results.md for the sources)
PUBLISHED = {
    "fast_align": "0.105-0.153",
    "static-embedding similarity aligner (SimAlign, fastText)": "0.22",
    "eflomal": "0.081",
}


def require_data() -> None:
    """Exit with a one-line message when the Hansards data or the gold is absent."""
    if not GOLD.is_dir() or not HANSARDS.is_dir():
        print(f"needs {HANSARDS} and {GOLD} (the shared data folder beside the project)", file=sys.stderr)
        raise SystemExit(1)


def gold_splits(lowercase: bool) -> tuple[GoldSplit, GoldSplit]:
    """The 37 trial and the 447 test pairs of the HLT-NAACL 2003 English–French gold."""
    return read_gold_split(GOLD, "trial", lowercase=lowercase), read_gold_split(GOLD, "test", lowercase=lowercase)


def training_words() -> tuple[list[list[str]], list[list[str]]]:
    """The 220k Hansards training pairs as lists of words (split on spaces)."""
    corpus = read_parallel(HANSARDS / "train.en.gz", HANSARDS / "train.fr.gz")
    return [line.split() for line in corpus.src], [line.split() for line in corpus.tgt]


def read_results(out: Path) -> dict:
    """The results file's sections (none when it does not exist yet)."""
    return json.loads(out.read_text(encoding="utf-8")) if out.is_file() else {}


def write_section(out: Path, name: str, section: dict) -> None:
    """Set ``results[name]`` in the JSON file ``out``, keeping its other sections; atomic."""
    results = read_results(out)
    results[name] = portable(section)
    write_text_atomic(out, json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {out}")


def print_rows(title: str, rows: dict[str, dict]) -> None:
    """Rows of ``attnmt.alignment.protocol.scored_row`` as a table: trial AER, test AER with its
    95% interval, precision and recall."""
    print()
    print(title)
    print(format_table(
        ["configuration", "trial", "AER", "95% interval", "precision", "recall"],
        [[name, row["trial_aer"], row["aer"], f"{row['aer_95_interval'][0]:.3f}-{row['aer_95_interval'][1]:.3f}",
          row["precision"], row["recall"]] for name, row in rows.items()], digits=3))


def package_version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def machine(*packages: str) -> str:
    """One line: the machine, Python, NumPy and the given packages' versions."""
    extra = "".join(f" {package} {package_version(package)}" for package in packages)
    return f"{platform.machine()} {platform.python_version()} numpy {np.__version__}{extra}"


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what ``platform`` says."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor()
    return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "")


def recipe_steps_parser(doc: str | None, batches_help: str) -> argparse.ArgumentParser:
    """The options of a script that trains a recipe's step on the first batches of epoch 1: the
    config, --batches, --threads and --json."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?", default="configs/multi30k_rnn_fast.yaml")
    parser.add_argument("--batches", type=int, default=300, help=f"{batches_help} (default 300)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, required=True)
    return parser
