"""Does eflomal make a better teacher when it samples otherwise, or when several runs vote?

Every combination of ``--eflomal-samplers``, ``--eflomal-iterations`` and ``--eflomal-prefix``
(``attnmt.alignment.eflomal.EflomalSettings``) runs eflomal over the training, trial and test
pairs together, and every symmetrisation of each run is scored on the 37 trial pairs. Only the
trial's choice and eflomal's defaults (rerun here as the baseline, since eflomal is unseeded) are
scored on test, and paired on the same bootstrap redraws (``attnmt.alignment.protocol``).

``--eflomal-vote`` adds the links those runs agree on (``voted_directions``: a link of each
direction kept when at least V of the runs found it, at every V, every symmetrisation) to the
trial's choices; the best single setting is then also scored on test and paired with the choice.

Prints a table and writes the ``teacher_settings`` section of ``benchmarks/results/alignment/alignment.json``
(or the one ``--section`` names; the other sections are kept).

    PYTHONPATH=benchmarks python benchmarks/experiments/alignment_teacher_settings.py --eflomal-samplers 3 8 --eflomal-prefix 0 5 [--eflomal-vote]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

from attnmt.alignment.eflomal import (
    EFLOMAL_METHODS,
    EflomalSettings,
    directional_links,
    eflomal_directions,
    voted_directions,
)
from attnmt.alignment.protocol import chosen_on_trial, paired, score_links, scored_row
from attnmt.data.link_files import format_pharaoh
from attnmt.errors import ConfigError
from attnmt.runtime.tables import format_table

from common import RESULTS, gold_splits, package_version, require_data, training_words, write_section


def rows_of(rows: dict[str, dict], settings: EflomalSettings) -> dict[str, dict]:
    """The rows of one EflomalSettings (every symmetrisation; vote rows belong to no one setting)."""
    return {name: row for name, row in rows.items()
            if (row.get("samplers"), row.get("iterations"), row.get("prefix")) == (settings.samplers,
                                                                                   settings.iterations,
                                                                                   settings.prefix)}


def settings_grid(args) -> list[EflomalSettings]:
    """eflomal's defaults first, then every other combination of the settings given."""
    default = EflomalSettings()
    grid = [EflomalSettings(samplers=samplers, iterations=iterations, prefix=prefix)
            for samplers in args.eflomal_samplers or [default.samplers]
            for iterations in args.eflomal_iterations or [default.iterations]
            for prefix in args.eflomal_prefix or [default.prefix]]
    return [default] + [settings for settings in dict.fromkeys(grid) if settings != default]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--eflomal-samplers", nargs="+", type=int, default=None, metavar="N",
                        help="eflomal's numbers of samplers to try")
    parser.add_argument("--eflomal-iterations", nargs="+", type=float, default=None, metavar="X",
                        help="factors on eflomal's numbers of iterations to try")
    parser.add_argument("--eflomal-prefix", nargs="+", type=int, default=None, metavar="K",
                        help="prefix lengths to try (0 = whole words)")
    parser.add_argument("--eflomal-vote", action="store_true",
                        help="also the links the grid's runs agree on, at every number of votes (voted_directions); "
                        "the best single setting is then scored on test too")
    parser.add_argument("--section", default="teacher_settings", help="the JSON section to write")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.eflomal_samplers is None and args.eflomal_iterations is None and args.eflomal_prefix is None:
        parser.error("give the settings to try: --eflomal-samplers, --eflomal-iterations and/or --eflomal-prefix")
    require_data()
    started = time.perf_counter()
    try:  # out-of-range settings fail before the corpus is read
        grid = settings_grid(args)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    default = grid[0]
    trial, test = gold_splits(lowercase=False)
    training = training_words()
    cut = len(trial)
    rows: dict[str, dict] = {}
    all_links: dict[str, list] = {}
    seconds, runs = {}, []

    def add_rows(forward, backward, prefix_name: str, **fields) -> None:
        for method in EFLOMAL_METHODS:
            links = [directional_links(f, b, method) for f, b in zip(forward, backward)]
            trial_aer = score_links(links[:cut], trial)["aer"]
            rows[f"{prefix_name}, {method}"] = {**fields, "method": method, "trial_aer": round(trial_aer, 4)}
            all_links[f"{prefix_name}, {method}"] = links

    for number, settings in enumerate(grid, 1):
        began = time.perf_counter()
        forward, backward = eflomal_directions(trial.src + test.src, trial.tgt + test.tgt, also=training,
                                               settings=settings)
        seconds[settings.describe()] = round(time.perf_counter() - began, 1)
        runs.append((forward, backward))
        add_rows(forward, backward, settings.describe(), samplers=settings.samplers, iterations=settings.iterations,
                 prefix=settings.prefix)
        best_here = chosen_on_trial(rows_of(rows, settings))
        print(f"[{number}/{len(grid)}] {settings.describe()}: {seconds[settings.describe()]:.0f} s, best on trial "
              f"{rows[best_here]['method']} {rows[best_here]['trial_aer']:.4f}", flush=True)
    single = chosen_on_trial(rows)
    if args.eflomal_vote:
        for votes in range(1, len(grid) + 1):
            add_rows(*voted_directions(runs, votes), f"vote of the {len(grid)} runs, links >= {votes} of them found",
                     runs=[settings.describe() for settings in grid], votes=votes)
    best = chosen_on_trial(rows)
    baseline = chosen_on_trial(rows_of(rows, default))
    tested = list(dict.fromkeys([best, baseline, *([single] if args.eflomal_vote else [])]))
    for name in tested:  # the only rows scored on test
        rows[name] = {**rows[name], **scored_row(all_links[name][:cut], all_links[name][cut:], trial, test)}
    test_links = {name: links[cut:] for name, links in all_links.items()}
    print()
    print(f"eflomal's settings, every symmetrisation on the {cut} trial pairs; test only for the trial's choice, "
          f"eflomal's defaults{' and the best single setting' if args.eflomal_vote else ''}")
    print(format_table(["configuration", "trial", "test AER", "precision", "recall"],
                       [[name, f"{row['trial_aer']:.4f}", *((f"{row['aer']:.4f}", f"{row['precision']:.3f}",
                                                             f"{row['recall']:.3f}") if "aer" in row else ("",) * 3)]
                        for name, row in rows.items()]))

    def paired_with(other: str) -> dict | None:
        if best == other:
            return None
        result = paired(test_links[best], test_links[other], test)
        print(f"chosen on trial: {best}, test AER {rows[best]['aer']:.4f}; against {other} {rows[other]['aer']:.4f}: "
              f"paired difference {result['difference']:+.4f} (95% interval {result['low']:+.4f} to "
              f"{result['high']:+.4f}), the choice better in {result['a_better']:.1%} of redraws")
        return result

    print(f"chosen on trial: {best}, test AER {rows[best]['aer']:.4f}")
    paired_baseline = paired_with(baseline)
    vote_fields = {}
    if args.eflomal_vote:
        vote_fields = {"best_single_setting": single, "best_single_setting_test_aer": rows[single]["aer"],
                       "paired_with_best_single_setting": paired_with(single)}
    write_section(args.out, args.section, {
        "question": ("Do the links that several eflomal runs agree on (a vote over the settings' runs) make a "
                     "better teacher than any one run?" if args.eflomal_vote else
                     "Does eflomal, the students' teacher, align better when it samples otherwise (more samplers, "
                     "more iterations, words cut to a prefix)?"),
        "aligner": "eflomal (Östling & Tiedemann, 2016), both directions, EflomalSettings per row"
                   + ("; vote rows: attnmt.alignment.eflomal.voted_directions over the runs" if args.eflomal_vote
                      else ""),
        "aligned_together": {"training_pairs": len(training[0]), "trial_pairs": cut, "test_pairs": len(test)},
        "words": "split on spaces and lower-cased",
        "rows": rows,
        "chosen_on_trial": best,
        "baseline": baseline,
        "test_aer": rows[best]["aer"],
        "baseline_test_aer": rows[baseline]["aer"],
        "paired_with_baseline": paired_baseline,
        **vote_fields,
        "configurations_scored_on_test": len(tested),
        "note": "eflomal samples without a seed: a second run of the same settings gives other links and "
                "other trial AERs, so compare settings within one run",
        "chosen_test_links": [format_pharaoh(links) for links in test_links[best]],
        "seconds_per_setting": seconds,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": f"{platform.machine()} {platform.python_version()} eflomal {package_version('eflomal')}",
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
