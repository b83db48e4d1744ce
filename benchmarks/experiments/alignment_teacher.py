"""How well does eflomal, the guided translators' teacher, align the Hansards test set?

eflomal (``attnmt align --eflomal``) aligns the 220k training pairs, the 37 trial and the 447 test
pairs together in both directions, as statistical aligners are used; every symmetrisation is
scored, and the one with the lowest trial AER is the teacher's figure (``attnmt.alignment.protocol``).
Which eflomal settings make a better teacher is ``alignment_teacher_settings.py``'s question.

Prints a table and writes the ``teacher`` section of ``benchmarks/results/alignment/alignment.json`` (the
other sections are kept), with the chosen configuration's test links, so that students are paired
with their teacher on the same bootstrap redraws.

    PYTHONPATH=benchmarks python benchmarks/experiments/alignment_teacher.py          # needs attnmt[align] (eflomal)
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

from attnmt.alignment.eflomal import EFLOMAL_METHODS, directional_links, eflomal_directions
from attnmt.alignment.protocol import chosen_on_trial, scored_row
from attnmt.data.link_files import format_pharaoh

from common import (
    RESULTS,
    gold_splits,
    package_version,
    print_rows,
    require_data,
    training_words,
    write_section,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    require_data()
    started = time.perf_counter()
    trial, test = gold_splits(lowercase=False)
    training = training_words()
    forward, backward = eflomal_directions(trial.src + test.src, trial.tgt + test.tgt, also=training, quiet=False)
    seconds = time.perf_counter() - started
    cut = len(trial)
    rows, test_links = {}, {}
    for method in EFLOMAL_METHODS:
        links = [directional_links(f, b, method) for f, b in zip(forward, backward)]
        rows[method] = scored_row(links[:cut], links[cut:], trial, test)
        test_links[method] = links[cut:]
    best = chosen_on_trial(rows)
    print_rows(f"eflomal on the Hansards test set ({len(test)} pairs), aligned with the {len(training[0])} "
               "training and the trial pairs", rows)
    print(f"chosen on trial: {best}, test AER {rows[best]['aer']:.4f}")
    write_section(args.out, "teacher", {
        "question": "AER of eflomal, the guided translators' teacher (`attnmt align --eflomal`)",
        "aligner": "eflomal (Östling & Tiedemann, 2016), default settings, both directions",
        "aligned_together": {"training_pairs": len(training[0]), "trial_pairs": cut, "test_pairs": len(test)},
        "words": "split on spaces and lower-cased",
        "methods": rows,
        "chosen_on_trial": best,
        "test_aer": rows[best]["aer"],
        "configurations_scored_on_test": len(rows),
        "note": "eflomal samples without a seed: a second run differs slightly",
        "chosen_test_links": [format_pharaoh(links) for links in test_links[best]],
        "seconds": round(seconds, 1),
        "machine": f"{platform.machine()} {platform.python_version()} eflomal {package_version('eflomal')}",
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
