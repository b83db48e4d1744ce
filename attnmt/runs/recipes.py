"""The run configs that ship with attnmt ("recipes"), and how ``--config`` finds one.

The recipes are YAML files inside the package (``attnmt/recipes/``; a clone also shows them as
``configs/``), so an installed wheel carries them. ``--config`` takes either a file's path or a
recipe's name::

    attnmt train --config multi30k_rnn_fast --out runs/fast       # a recipe, by name
    attnmt train --config my_config.yaml --out runs/mine          # a file of your own

A path that names an existing file wins over a recipe of the same name. Relative data paths in
a file of your own resolve against that file's folder; in a recipe, whose folder is inside the
installed package, against the current folder (and ``$ATTNMT_DATA_DIR/...`` against the data
folder, ``attnmt.data.data_config``).
"""

from __future__ import annotations

from pathlib import Path

from attnmt.errors import ConfigError

__all__ = ["RECIPES_DIR", "config_path", "is_recipe", "recipe_names", "recipe_summary"]

#: the folder of the shipped recipes
RECIPES_DIR = Path(__file__).resolve().parents[1] / "recipes"
SUFFIX = ".yaml"


def recipe_names() -> list[str]:
    """The shipped recipes' names (file names without ``.yaml``), sorted."""
    return sorted(path.name[: -len(SUFFIX)] for path in RECIPES_DIR.glob(f"*{SUFFIX}"))


def is_recipe(path: str | Path) -> bool:
    """Whether ``path`` is one of the shipped recipes (through any link to their folder)."""
    return Path(path).resolve().parent == RECIPES_DIR


def config_path(value: str | Path) -> Path:
    """The config file ``--config value`` means: ``value`` itself when it is a file, else the recipe
    of that name (with or without ``.yaml``). ConfigError lists the recipes when it is neither."""
    path = Path(value)
    if path.exists():  # a folder or a special file: load_config says it cannot be read
        return path
    name = path.name[: -len(SUFFIX)] if path.name.endswith(SUFFIX) else path.name
    names = recipe_names()
    if name in names and (path.parent == Path(".") or path.parent.name == "configs"):
        # "configs/NAME.yaml" is how a clone's documentation has always named a recipe
        return RECIPES_DIR / f"{name}{SUFFIX}"
    raise ConfigError(f"{value}: no such config file, and no recipe of that name; the recipes are "
                      f"{', '.join(names)} (attnmt recipes describes them)")


def recipe_summary(name: str, limit: int = 150) -> str:
    """The first sentence of a recipe's opening comment (what it is for), cut to ``limit`` characters."""
    lines = []
    for line in (RECIPES_DIR / f"{name}{SUFFIX}").read_text(encoding="utf-8").splitlines():
        if not line.startswith("#") or not line.lstrip("#").strip():
            break
        lines.append(line.lstrip("#").strip())
    summary = " ".join(lines)
    end = summary.find(". ")
    summary = summary if end < 0 else summary[: end + 1]
    if len(summary) > limit:
        summary = summary[: summary.rfind(" ", 0, limit)].rstrip(",;:") + " …"
    return summary
