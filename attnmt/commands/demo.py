"""A five-minute tour: what one attention head can compute, then a German→English translator
trained for a few minutes, its translations, scores, heatmaps and an interactive viewer.

Everything goes into one folder (default demo/). Run it again and training continues where it
stopped (--minutes more), and the demo's own files are replaced; a folder the demo did not make
is never written into. Multi30k is read from $ATTNMT_DATA_DIR, else the cache, else downloaded
once (about 2 MB). The run trains the multi30k_rnn_fast recipe (in bfloat16 where the CPU has
fast bfloat16 arithmetic, else in float32).

Examples:
  attnmt demo
  attnmt demo --out /tmp/tour --minutes 15
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from attnmt.errors import ConfigError

RECIPE = "multi30k_rnn_fast"
#: the file that marks a folder as one the demo made (and may write into again)
MARKER = ".attnmt-demo"
EXAMPLE = "Ein Mann fährt Fahrrad."
MORE_EXAMPLES = ("Zwei Hunde spielen im Schnee.", "Eine Frau mit einem roten Hut singt auf der Straße.")
TEST_SPLIT = "test_2016_flickr"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("demo"), metavar="DIR",
                        help="the folder for everything the demo writes (default demo/)")
    parser.add_argument("--minutes", type=float, default=5.0, metavar="M",
                        help="minutes of training (default 5); again in the same folder, M more")


def _claim(folder: Path) -> None:
    """Make ``folder`` the demo's, or refuse one that holds anything the demo did not write."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--out {folder}: exists and is not a folder")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / MARKER).is_file():
        raise ConfigError(f"--out {folder}: the folder holds files the demo did not write; give another --out")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # a file where a folder should be, a read-only place
        raise ConfigError(f"--out {folder}: cannot make the folder ({error.strerror or error})") from None
    (folder / MARKER).write_text("written by attnmt demo, which may replace the files in this folder\n",
                                 encoding="utf-8")


def _attnmt(*arguments: str) -> None:
    """Run ``attnmt ARGUMENTS`` in a process of its own; stop the demo when it fails."""
    status = subprocess.call([sys.executable, "-m", "attnmt", *arguments])
    if status == 130:
        raise KeyboardInterrupt
    if status != 0:
        raise ConfigError(f"stopped: attnmt {arguments[0]} exited with status {status} (its message is above)")


def _step(title: str, *arguments: str) -> None:
    """Print ``title``, then run ``attnmt ARGUMENTS``."""
    print(f"\n== {title} ==", flush=True)
    _attnmt(*arguments)


def run(args: argparse.Namespace) -> int:
    if not args.minutes > 0:
        raise ConfigError(f"--minutes must be above 0, got {args.minutes}")
    out: Path = args.out
    _claim(out)
    run_dir = out / "rnn-sdp"
    minutes = f"{args.minutes:g}"

    _step("1. What can one attention head compute?", "explore", "all", "--plot", str(out / "explore"))
    title = f"2. Train a German→English RNN translator with scaled dot-product attention ({minutes} min)"
    if (run_dir / "last.pt").is_file():
        _step(title, "train", "--out", str(run_dir), "--resume", "--max-minutes", minutes)
    else:
        _step(title, "train", "--config", RECIPE, "--out", str(run_dir), "--max-minutes", minutes)
    _step("3. Translate", "translate", str(run_dir), EXAMPLE, "--plot", str(out / "fahrrad.png"), "--overwrite")
    _attnmt("translate", str(run_dir), *MORE_EXAMPLES, "--beam", "5")
    _step(f"4. Evaluate on {TEST_SPLIT}, beam 5 (perplexity, BLEU, chrF; heatmaps in {run_dir / 'examples'})",
          "evaluate", str(run_dir), "--split", TEST_SPLIT, "--beam", "5", "-n", "5")
    _step("5. Interactive attention viewer", "view", str(run_dir), "-n", "50", "--out", str(out / "view.html"),
          "--overwrite")
    print(f"open {out / 'view.html'} in a browser")

    from attnmt.runs.folder import eval_json_path  # torch only when the command runs (attnmt --help stays fast)

    report = json.loads(eval_json_path(run_dir, TEST_SPLIT, 5).read_text(encoding="utf-8"))
    print("\n== 6. See it attend, live ==")
    print(f"type your own sentences and watch the model attend: attnmt serve {run_dir}   "
          f"(then open the address it prints)")
    # the last line is the result, so that `make demo | tail -1` shows it
    print(f"\ndemo: {minutes} minutes of training gave {report['bleu']:.1f} BLEU on {TEST_SPLIT} "
          f"(beam 5, cased sacrebleu)")
    return 0
