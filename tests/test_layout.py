"""The layout keeps its rules (benchmarks/layout.py reads them off the code): no module imports from
a layer above its own, the top level holds only what ``TOP_LEVEL`` says, no two modules share a
file name, the README names every layer, and the command line stays light."""

from __future__ import annotations

import re
import runpy
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import attnmt

PROJECT = Path(__file__).resolve().parents[1]


layout = SimpleNamespace(**runpy.run_path(str(PROJECT / "benchmarks" / "layout.py"), run_name="attnmt_layout"))
REPORT = layout.report(PROJECT / "attnmt")
MODULES = layout.read_modules(PROJECT / "attnmt")


def test_no_module_imports_from_a_higher_layer():
    assert REPORT["climbing_edges"] == []


def test_the_rule_would_see_an_import_that_climbs(tmp_path):
    package = tmp_path / "attnmt"
    (package / "decoding").mkdir(parents=True)
    (package / "visual").mkdir()
    for folder in (package, package / "decoding", package / "visual"):
        (folder / "__init__.py").write_text("")
    (package / "visual" / "viewer.py").write_text("X = 1\n")
    (package / "decoding" / "translator.py").write_text("def f():\n    from attnmt.visual.viewer import X\n")
    assert layout.report(package)["climbing_edges"] == [
        "attnmt.decoding.translator (decoding) -> attnmt.visual.viewer (visual)"]


def test_every_module_has_a_layer_and_the_top_level_only_what_is_listed():
    top_level = {name for name, module in MODULES.items()
                 if module.path.parent == PROJECT / "attnmt" and module.path.name != "__init__.py"}
    assert top_level <= set(layout.TOP_LEVEL), top_level - set(layout.TOP_LEVEL)
    layers = {layout.layer_of(name) for name in MODULES}
    assert layers == {name for name, _ in layout.LAYERS}


def test_no_two_modules_share_a_file_name():
    assert REPORT["shared_base_names"] == []


def test_every_package_says_what_its_layer_holds():
    for name, module in MODULES.items():
        if module.path.name == "__init__.py" and name != "attnmt.commands":
            assert module.path.read_text(encoding="utf-8").lstrip().startswith('"""'), name


def test_the_readme_names_every_layer_in_order():
    readme = (PROJECT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Layout"):]
    section = section[: section.index("\n## ", 1)]
    positions = [section.index(f"attnmt/{name}/") for name in
                 ("runtime", "attention", "data", "models", "runs", "decoding", "evaluation", "visual", "training",
                  "alignment")]
    assert positions == sorted(positions)
    assert re.search(r"never from a later one", section)


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
