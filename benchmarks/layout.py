"""What the package's layout looks like: its layers, the imports between them (and any that climb),
its largest modules and functions, and the comments that silence the linter or the type checker.

    python benchmarks/layout.py [--output benchmarks/results/layout.json] [--root attnmt]

Every module of ``attnmt`` belongs to one layer (``LAYERS``, lowest first). An import is an edge
from the importing module to the imported one, wherever it stands (at the top of the module or
inside a function, as the commands import lazily); an edge *climbs* when it goes from a lower layer
to a higher one. The same table is the rule ``tests/test_layout.py`` enforces. Modules of an older
tree (before 0.2.0, when most modules stood at the top level) are placed by ``OLD_MODULES``, so the
script also reports the layout before the change.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The layers, lowest first: (name, the modules and packages it holds). A module may import from its
#: own layer and the layers before it, never from a later one.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("runtime", ("attnmt.errors", "attnmt._version", "attnmt.runtime")),
    ("attention", ("attnmt.attention", "attnmt.explore", "attnmt.keras")),
    ("data", ("attnmt.data",)),
    ("models", ("attnmt.models",)),
    ("runs", ("attnmt.runs",)),
    ("decoding", ("attnmt.decoding",)),
    ("evaluation", ("attnmt.evaluation",)),
    ("visual", ("attnmt.visual",)),
    ("training", ("attnmt.training",)),
    ("alignment", ("attnmt.alignment",)),
    ("serve", ("attnmt.serve",)),
    ("interface", ("attnmt.cli", "attnmt.commands", "attnmt.__main__")),
    ("api", ("attnmt", "attnmt.translator", "attnmt.config", "attnmt.notebook", "attnmt.viewing")),
]
# "api": the package itself (the public names) and the module paths of 0.1.0 kept for one version,
# each a deprecated alias of its new home.

#: modules that stand at the top level of the package (beside the layer packages), and why
TOP_LEVEL = {
    "attnmt._version": "the version, read by the build and by checkpoints",
    "attnmt.errors": "the exceptions every layer raises",
    "attnmt.explore": "the demonstrations of what one head computes, beside attention/",
    "attnmt.keras": "the attention layers for Keras 3 (the optional extra attnmt[keras])",
    "attnmt.cli": "the command line",
    "attnmt.__main__": "python -m attnmt",
    "attnmt.translator": "deprecated path (0.1.0)",
    "attnmt.config": "deprecated path (0.1.0)",
    "attnmt.notebook": "deprecated path (0.1.0)",
    "attnmt.viewing": "deprecated path (0.1.0)",
}

#: Where the modules of the tree before 0.2.0 would stand (to report the layout before the change).
OLD_MODULES = {
    "attnmt.files": "runtime", "attnmt.device": "runtime", "attnmt.precision": "runtime", "attnmt.tables": "runtime",
    "attnmt.checks": "runtime", "attnmt.names": "runtime", "attnmt.special_tokens": "data",
    "attnmt.config": "runs", "attnmt.runs": "runs", "attnmt.checkpoint": "runs",
    "attnmt.search": "decoding", "attnmt.translator": "decoding", "attnmt.hf": "decoding",
    "attnmt.evaluation": "evaluation", "attnmt.comparison": "training",
    "attnmt.plotting": "visual", "attnmt.viewing": "visual", "attnmt.notebook": "visual", "attnmt.curves": "visual",
    "attnmt.export": "visual",
}


def layer_of(module: str, old: bool = False) -> str:
    """The layer of a dotted module name (the longest matching prefix of ``LAYERS``)."""
    if old and module in OLD_MODULES:
        return OLD_MODULES[module]
    best, length = "api", 0
    for name, prefixes in LAYERS:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = name, len(prefix)
    return best


RANK = {name: rank for rank, (name, _) in enumerate(LAYERS)}


@dataclass
class Module:
    name: str
    path: Path
    lines: int
    imports: set[str]
    functions: list[tuple[str, int]]  # (qualified name, lines)
    silencers: int  # noqa and type: ignore comments


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
    paths = sorted(root.rglob("*.py"))
    names = {module_name(path, root) for path in paths}
    modules = {}
    for path in paths:
        name = module_name(path, root)
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imports: set[str] = set()
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
                if found is not None and found != name:
                    imports.add(found)
        functions = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        functions.append((f"{name}.{node.name}.{item.name}", item.end_lineno - item.lineno + 1))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.append((f"{name}.{node.name}", node.end_lineno - node.lineno + 1))
        silencers = len(re.findall(r"#\s*(noqa|type:\s*ignore)", text))
        modules[name] = Module(name, path, len(text.splitlines()), imports, functions, silencers)
    return modules


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


def report(root: Path, old: bool = False) -> dict:
    modules = read_modules(root)
    layers = Counter(layer_of(name, old) for name in modules)
    edges = [(name, target) for name, module in modules.items() for target in sorted(module.imports)]
    climbing = [f"{a} ({layer_of(a, old)}) -> {b} ({layer_of(b, old)})" for a, b in edges
                if RANK[layer_of(b, old)] > RANK[layer_of(a, old)]]
    between = Counter(f"{layer_of(a, old)} -> {layer_of(b, old)}" for a, b in edges
                      if layer_of(a, old) != layer_of(b, old))
    functions = sorted(((lines, name) for module in modules.values() for name, lines in module.functions), reverse=True)
    top_level = sorted(name for name in modules if modules[name].path.parent == root
                       and modules[name].path.name != "__init__.py")
    return {
        "modules": len(modules),
        "lines": sum(module.lines for module in modules.values()),
        "top_level_modules": len(top_level),
        "shared_base_names": shared_base_names(modules),
        "modules_per_layer": {name: layers.get(name, 0) for name, _ in LAYERS},
        "edges": len(edges),
        "edges_between_layers": dict(sorted(between.items())),
        "climbing_edges": climbing,
        "largest_modules": [[module.name, module.lines] for module in
                            sorted(modules.values(), key=lambda module: -module.lines)[:10]],
        "largest_functions": [[name, lines] for lines, name in functions[:10]],
        "noqa_and_type_ignore": sum(module.silencers for module in modules.values()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT / "attnmt", help="the package folder (default attnmt/)")
    parser.add_argument("--old", action="store_true", help="place modules of the tree before 0.2.0 by OLD_MODULES")
    parser.add_argument("--output", type=Path, default=None, help="also write the report as JSON here")
    args = parser.parse_args()
    result = report(args.root, args.old)
    print(f"{result['modules']} modules, {result['lines']} lines, {result['top_level_modules']} at the top level, "
          f"{result['edges']} import edges, {len(result['climbing_edges'])} climbing, "
          f"{result['noqa_and_type_ignore']} noqa / type: ignore comments")
    print("one file name, several modules: "
          + ("; ".join(", ".join(group) for group in result["shared_base_names"]) or "none"))
    print("\n| layer | modules |\n|---|---:|")
    for name, count in result["modules_per_layer"].items():
        print(f"| {name} | {count} |")
    print("\nclimbing edges:" + ("".join(f"\n  {edge}" for edge in result["climbing_edges"]) or " none"))
    print("\nlargest modules: " + ", ".join(f"{name} {lines}" for name, lines in result["largest_modules"]))
    print("largest functions: " + ", ".join(f"{name} {lines}" for name, lines in result["largest_functions"]))
    if args.output is not None:
        args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
