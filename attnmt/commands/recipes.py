"""The run configs that ship with attnmt ("recipes"): list them, or print one.

Every command that takes --config takes a recipe's name as well as a file's path. To change a
recipe, print it into a file of your own and edit that.

Examples:
  attnmt recipes                                   # each recipe's name and what it is for
  attnmt recipes multi30k_rnn_fast                 # the recipe's YAML, comments included
  attnmt recipes multi30k_rnn_fast > mine.yaml     # then: attnmt train --config mine.yaml
"""

from __future__ import annotations

import argparse
import shutil
import textwrap

from attnmt.errors import ConfigError
from attnmt.runs.recipes import RECIPES_DIR, recipe_names, recipe_summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", metavar="NAME", help="print this recipe's YAML instead of the list")


def run(args: argparse.Namespace) -> int:
    names = recipe_names()
    if args.name is not None:
        name = args.name.removesuffix(".yaml")
        if name not in names:
            raise ConfigError(f"{args.name}: no recipe of that name; the recipes are {', '.join(names)}")
        print((RECIPES_DIR / f"{name}.yaml").read_text(encoding="utf-8"), end="")
        return 0
    width = max(len(name) for name in names)
    columns = max(60, shutil.get_terminal_size((100, 24)).columns)
    for name in names:
        lines = textwrap.wrap(recipe_summary(name), width=columns - width - 2) or [""]
        print(f"{name:<{width}}  {lines[0]}")
        for line in lines[1:]:
            print(f"{'':<{width}}  {line}")
    print(f"\nattnmt train --config NAME uses one; attnmt recipes NAME prints it ({len(names)} recipes)")
    return 0
