"""The package's layers, and the rules the layout keeps: no module imports from a layer above its
own, matplotlib only from ``visual`` up, the top level holds only what ``TOP_LEVEL`` says, no two
modules share a file name, docs/layout.md draws the same layers, and the command line stays light.

This file is the rule: ``LAYERS`` lists the layers lowest first; a module may import from its own
layer and the layers before it. An import counts wherever it stands (at the top of a module or
inside a function, as the commands import lazily).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import attnmt

PROJECT = Path(__file__).resolve().parents[1]

#: The layers, lowest first: (name, the modules and packages it holds).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("runtime", ("attnmt.errors", "attnmt._version", "attnmt.runtime")),
    ("attention", ("attnmt.attention", "attnmt.keras")),
    ("data", ("attnmt.data",)),
    ("models", ("attnmt.models",)),
    ("attribution", ("attnmt.attribution",)),
    ("runs", ("attnmt.runs",)),
    ("decoding", ("attnmt.decoding",)),
    ("evaluation", ("attnmt.evaluation",)),
    ("training", ("attnmt.training",)),
    ("alignment", ("attnmt.alignment",)),
    ("visual", ("attnmt.visual", "attnmt.explore")),
    ("serve", ("attnmt.serve",)),
    ("workflows", ("attnmt.workflows",)),
    ("course", ("attnmt.course",)),
    ("interface", ("attnmt.cli", "attnmt.commands", "attnmt.__main__")),
    ("api", ("attnmt",)),
]
# "api": the package itself (the public names).
RANK = {name: rank for rank, (name, _) in enumerate(LAYERS)}
#: the lowest layer that may draw with matplotlib
DRAWING_FROM = "visual"

#: modules that stand at the top level of the package (beside the layer packages), and why
TOP_LEVEL = {
    "attnmt._version": "the version, read by the build and by checkpoints",
    "attnmt.errors": "the exceptions every layer raises",
    "attnmt.keras": "the attention layers for Keras 3 (the optional extra attnmt[keras])",
    "attnmt.workflows": "training and comparing with the pictures wired in (attnmt.train, attnmt compare)",
    "attnmt.cli": "the command line",
    "attnmt.__main__": "python -m attnmt",
}


def layer_of(module: str) -> str:
    """The layer of a dotted module name (the longest matching prefix of ``LAYERS``)."""
    best, length = "api", 0
    for name, prefixes in LAYERS:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = name, len(prefix)
    return best


@dataclass
class Module:
    name: str
    path: Path
    imports: set[str]  # the package's modules it imports
    libraries: set[str]  # the top-level names of everything else it imports


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def resolve(name: str, known: set[str]) -> str | None:
    """The known module that ``name`` (a module, or a name inside one) refers to."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def read_modules(root: Path) -> dict[str, Module]:
    """Every module under ``root`` with what it imports."""
    paths = sorted(root.rglob("*.py"))
    names = {module_name(path, root) for path in paths}
    modules = {}
    for path in paths:
        name = module_name(path, root)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imports: set[str] = set()
        libraries: set[str] = set()
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                # ``from package import module`` imports the module; ``from module import name`` the module
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in names else base for alias in node.names]
            for target in targets:
                found = resolve(target, names)
                if found is None:
                    libraries.add(target.split(".")[0])
                elif found != name:
                    imports.add(found)
        modules[name] = Module(name, path, imports, libraries)
    return modules


def climbing_edges(modules: dict[str, Module]) -> list[str]:
    """The imports that go from a layer to a later one."""
    return [f"{name} ({layer_of(name)}) -> {target} ({layer_of(target)})"
            for name, module in modules.items() for target in sorted(module.imports)
            if RANK[layer_of(target)] > RANK[layer_of(name)]]


def shared_base_names(modules: dict[str, Module]) -> list[list[str]]:
    """Groups of modules with one file name: none should be. ``__init__`` aside, a command beside the
    module it is the command line of (``commands/curves.py``, ``visual/curves.py``), and a deprecated
    path beside its new home (``translator.py``, ``decoding/translator.py``)."""
    by_name: dict[str, list[str]] = {}
    deprecated = {name for name, why in TOP_LEVEL.items() if why.startswith("deprecated")}
    for name, module in modules.items():
        if module.path.name != "__init__.py" and not name.startswith("attnmt.commands.") and name not in deprecated:
            by_name.setdefault(module.path.stem, []).append(name)
    return [sorted(names) for names in by_name.values() if len(names) > 1]


MODULES = read_modules(PROJECT / "attnmt")


def test_no_module_imports_from_a_higher_layer():
    assert climbing_edges(MODULES) == []


def import_cycles(modules: dict[str, Module]) -> list[list[str]]:
    """The groups of modules (packages' ``__init__`` aside) that reach each other through their
    imports, those made for type checking only included: each should be one module, or the two
    should share a third that both import."""
    graph = {name: sorted(target for target in module.imports if modules[target].path.name != "__init__.py")
             for name, module in modules.items() if module.path.name != "__init__.py"}

    def reach(start: str) -> set[str]:
        seen, todo = set(), list(graph[start])
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(graph.get(name, ()))
        return seen

    reached = {name: reach(name) for name in graph}
    groups = {tuple(sorted({name} | {other for other in reached[name] if name in reached[other]}))
              for name in graph if name in reached[name]}
    return sorted(list(group) for group in groups)


def test_no_modules_import_each_other():
    assert import_cycles(MODULES) == []


def test_the_cycle_rule_would_see_two_modules_that_import_each_other(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import B\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n")
    assert import_cycles(read_modules(package)) == [["pkg.a", "pkg.b"]]


def drawing_below_visual(modules: dict[str, Module]) -> list[str]:
    """The modules below ``DRAWING_FROM`` that import matplotlib."""
    return sorted(name for name, module in modules.items()
                  if "matplotlib" in module.libraries and RANK[layer_of(name)] < RANK[DRAWING_FROM])


def test_only_visual_and_the_layers_above_it_draw():
    assert drawing_below_visual(MODULES) == []


def test_the_rule_would_see_an_import_that_climbs(tmp_path):
    package = tmp_path / "attnmt"
    (package / "decoding").mkdir(parents=True)
    (package / "visual").mkdir()
    for folder in (package, package / "decoding", package / "visual"):
        (folder / "__init__.py").write_text("")
    (package / "visual" / "viewer.py").write_text("X = 1\n")
    (package / "decoding" / "translator.py").write_text("def f():\n    from attnmt.visual.viewer import X\n")
    assert climbing_edges(read_modules(package)) == [
        "attnmt.decoding.translator (decoding) -> attnmt.visual.viewer (visual)"]
    (package / "decoding" / "search.py").write_text("def f():\n    from matplotlib.figure import Figure\n")
    assert drawing_below_visual(read_modules(package)) == ["attnmt.decoding.search"]


def test_every_module_has_a_layer_and_the_top_level_only_what_is_listed():
    top_level = {name for name, module in MODULES.items()
                 if module.path.parent == PROJECT / "attnmt" and module.path.name != "__init__.py"}
    assert top_level <= set(TOP_LEVEL), top_level - set(TOP_LEVEL)
    layers = {layer_of(name) for name in MODULES}
    assert layers == {name for name, _ in LAYERS}


def test_no_two_modules_share_a_file_name():
    assert shared_base_names(MODULES) == []


def test_every_package_says_what_its_layer_holds():
    for name, module in MODULES.items():
        if module.path.name == "__init__.py" and name != "attnmt.commands":
            assert module.path.read_text(encoding="utf-8").lstrip().startswith('"""'), name


def test_the_layout_page_names_every_layer_in_order_and_every_module():
    page = (PROJECT / "docs" / "layout.md").read_text(encoding="utf-8")
    section = page[page.index("## Layers"):]
    positions = [section.index(f"attnmt/{name}/") for name in
                 ("runtime", "attention", "data", "models", "attribution", "runs", "decoding", "evaluation",
                  "training", "alignment", "visual", "serve", "course")]
    assert positions == sorted(positions)
    assert re.search(r"never from a later one", section)
    for package in ("attention", "models", "evaluation"):  # the layers whose modules the page lists one by one
        named = {path.stem for path in (PROJECT / "attnmt" / package).glob("*.py")} - {"__init__", "user"}
        assert [name for name in sorted(named) if f"{name}.py" not in section] == [], package


@pytest.mark.parametrize("code", ["import attnmt", "import attnmt.cli; attnmt.cli.build_parser()",
                                  "import attnmt.runtime.choices, attnmt.alignment"])
def test_the_package_and_the_command_line_load_without_torch(code):
    done = subprocess.run([sys.executable, "-c", f"{code}; import sys; print('torch' in sys.modules)"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_dir_of_the_package_lists_its_public_names():
    names = dir(attnmt)
    for name in ("Translator", "train", "load_config", "build_attention", "load_attention", "save_attention",
                 "attention_records", "show", "AttnmtError", "__version__"):
        assert name in names and name in attnmt.__all__
