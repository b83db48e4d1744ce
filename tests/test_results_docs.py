"""Every figure in README.md and docs/*.md is the value of one key of a results file.

The results pages (docs/results.md, docs/experiments.md) are written by scripts/render_docs.py
from docs/templates/ and the result files: each committed page must be what it writes, and a
template may not type a decimal figure. Elsewhere (README.md, docs/mechanisms.md, ...) a table or
a paragraph with figures is preceded by a comment that names, in order, the key of each
figure in it (the lines after the comment, up to a blank line)::

    <!-- figures from alignment/alignment.json:students_plustest_120
    rows/{both, agreement >= 0.4}/aer  rows/{both, agreement >= 0.4}/aer_95_interval/{0|1}  =
    -->

- ``FILE[:BASE]``: a file of ``benchmarks/results/``, and the path inside it the keys start from.
- A key is a path of JSON keys and list indices joined by ``/`` (from the file's root when it
  starts with ``/``; ``OTHER.json:/path`` reads another file); a ``/`` inside a JSON key is written
  ``~1`` and a ``~`` ``~0``, as in a JSON pointer. Keys are split on whitespace, so a key with
  spaces is quoted. ``{a|b|c}`` stands for several keys, one after the other;
  ``x/{a|b}/{c|d}`` is x/a/c, x/a/d, x/b/c, x/b/d: a table's cells row by row.
- ``=`` marks a number that is not measured here: a setting or a count given beforehand (37 trial
  pairs, τ = 0.4), a target, or a published figure.

Figures, in reading order: in a table every number of a cell after the first column (the row's
label) and of a column of settings (a "method", "configuration" or "shapes"), but for targets in
parentheses, row by row; in a paragraph every number but for code spans (commands, settings,
signatures), integers below 10 ("2 cores", "beam 5") and years. A figure printed
with d decimals must equal its key's value rounded to d places (a tie may round either way), as a
percentage when followed by %, in millions with M, in microseconds with µs. Result files name no
absolute path of the machine that wrote them.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import shlex
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
RESULTS = PROJECT / "benchmarks" / "results"
_SPEC = importlib.util.spec_from_file_location("render_docs", PROJECT / "scripts" / "render_docs.py")
assert _SPEC is not None and _SPEC.loader is not None
render_docs = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(render_docs)
DOCS = [PROJECT / "README.md", *sorted((PROJECT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!-- figures from (\S+)(.*?)-->", re.DOTALL)
FIGURE = re.compile(r"(?<![\w.])(?<!\d,)([-+−]?)(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(M|%| µs)?(?!\w|[.,]\d)")
SETTING_COLUMNS = ("method", "configuration", "shapes")  # a table's columns of settings, not figures
UNITS = {"": 1.0, "M": 1e-6, "%": 100.0, " µs": 1e6}  # how a stored value is scaled to print with the unit
SETTING = "="


def _expand(token: str) -> list[str]:
    """``x/{a|b}/y`` -> [x/a/y, x/b/y]; several braces multiply, the first varying slowest."""
    parts = re.split(r"\{([^{}]*)\}", token)
    choices = [[part] if index % 2 == 0 else part.split("|") for index, part in enumerate(parts)]
    return ["".join(combination) for combination in itertools.product(*choices)]


# the result files as the page writer reads them (render_docs caches them)
_results = render_docs._results
_lookup = render_docs.lookup


def _strip_code(text: str) -> str:
    return re.sub(r"`[^`]*`", "", text)


def _figures(lines: list[str]) -> list[tuple[str, str, str]]:
    """(sign, number, unit) of every figure of a block, in reading order (module docstring)."""
    if lines[0].startswith("|"):
        header = [cell.strip().lower() for cell in lines[0].strip().strip("|").split("|")]
        found = []
        for row in lines[2:]:
            cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
            for name, cell in list(zip(header, cells))[1:]:
                if not any(word in name for word in SETTING_COLUMNS):
                    found += FIGURE.findall(re.sub(r"\([^)]*\)", "", _strip_code(cell)))
        return found
    return [(sign, number, unit) for sign, number, unit in FIGURE.findall(_strip_code(" ".join(lines)))
            if "." in number or unit or (float(number.replace(",", "")) >= 10 and not _year(number))]


def _year(number: str) -> bool:
    """A year, as in a citation (Zenkel et al., 2020): not a figure."""
    return number.isdigit() and 1950 <= int(number) < 2050


def _blocks():
    """(doc, line number, file, base, keys, block lines) of every marked block of the docs."""
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for match in MARKER.finditer(text):
            file, _, base = match.group(1).partition(":")
            keys = [key for token in shlex.split(match.group(2)) for key in _expand(token)]
            following = text[match.end():].split("\n")[1:]
            block = list(itertools.takewhile(str.strip, following))
            yield doc, text[:match.start()].count("\n") + 1, file, base, keys, block


BLOCKS = list(_blocks())


def _check(figure: tuple[str, str, str], key: str, file: str, base: str) -> str | None:
    """None when the figure prints the key's value, else what is wrong."""
    if key == SETTING:
        return None
    named = re.fullmatch(r"(.+?\.json):(.*)", key)  # a key of another file; a key itself may hold ":"
    name, path = (named.group(1), named.group(2)) if named else (file, key)
    path = path if path.startswith("/") else f"{base}/{path}"
    try:
        value = _lookup(name, path)
    except (KeyError, IndexError, ValueError, TypeError):
        return f"{name}:{path} is not in the file"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{name}:{path} is {value!r}, not a number"
    sign, number, unit = figure
    decimals = len(number.split(".")[1]) if "." in number else 0
    printed = float(number.replace(",", "")) * (-1 if sign in "-−" and sign else 1)
    if abs(value * UNITS[unit] - printed) > 0.5 * 10 ** -decimals + 1e-9:
        return f"{sign}{number}{unit} is not {name}:{path} = {value}"
    return None


@pytest.mark.parametrize("doc, line, file, base, keys, block", BLOCKS,
                         ids=[f"{doc.name}:{line}" for doc, line, *_ in BLOCKS])
def test_every_figure_is_the_value_of_its_key(doc, line, file, base, keys, block):
    figures = _figures(block)
    printed = [sign + number + unit for sign, number, unit in figures]
    assert len(figures) == len(keys), f"{len(figures)} figures {printed} but {len(keys)} keys"
    problems = [problem for figure, key in zip(figures, keys) if (problem := _check(figure, key, file, base))]
    assert not problems, problems


PAGES = render_docs.pages()


@pytest.mark.parametrize("template, page", PAGES, ids=[page.name for _, page in PAGES])
def test_each_results_page_is_what_its_template_and_the_files_write(template, page):
    assert page.read_text(encoding="utf-8") == render_docs.render(template), (
        f"{page.name} differs from what python scripts/render_docs.py writes")


def test_the_results_page_is_one_page():
    assert (PROJECT / "docs" / "results.md").read_text(encoding="utf-8").count("\n") <= 450


def test_a_figure_nudged_in_a_page_or_in_its_file_fails(monkeypatch):
    template, page = next((t, p) for t, p in PAGES if p.name == "results.md")
    text = page.read_text(encoding="utf-8")
    figure = re.search(r"\b(\d+)\.(\d{4})\b", text)  # the first figure printed with 4 decimals
    nudged = f"{figure.group(1)}.{int(figure.group(2)) + 1:04d}"
    assert text.replace(figure.group(0), nudged, 1) != render_docs.render(template)
    name, pointer = "alignment/alignment.json", "/students_plustest_120/rows/both, agreement >= 0.4/aer"
    data = json.loads((RESULTS / name).read_text(encoding="utf-8"))
    data["students_plustest_120"]["rows"]["both, agreement >= 0.4"]["aer"] += 0.0001
    monkeypatch.setattr(render_docs, "_results", lambda file: data if file == name else _results(file))
    assert render_docs.lookup(name, pointer) == pytest.approx(0.0485, abs=5e-5)
    assert render_docs.render(template) != text


def test_a_template_may_not_type_a_figure(tmp_path):
    template = tmp_path / "page.md"
    for typed in ("BLEU 41.48 with beam 5", "better in 99% of the redraws"):
        template.write_text(f"# A page\n\n{typed}\n", encoding="utf-8")
        with pytest.raises(render_docs.TemplateError, match="is typed"):
            render_docs.render(template)
    template.write_text("`--alpha 1.2`, τ = {=0.4} and {{search/beam_sizes.json#/results/1/bleu|.2f}}\n",
                        encoding="utf-8")
    assert render_docs.render(template).endswith("`--alpha 1.2`, τ = 0.4 and 41.48\n")
    template.write_text("{{search/beam_sizes.json#/results/9/bleu|.2f}}\n", encoding="utf-8")
    with pytest.raises(render_docs.TemplateError, match="is not in benchmarks/results/"):
        render_docs.render(template)


def test_placeholders_print_units_and_signs():
    assert render_docs.format_figure(0.4567, "%.1f") == "45.7%"
    assert render_docs.format_figure(4410000, "M.2f") == "4.41M"
    assert render_docs.format_figure(4.5e-5, "µs.0f") == "45 µs"
    assert render_docs.format_figure(-0.0039, ".4f") == "−0.0039"
    assert render_docs.format_figure(12345.0, ",.0f") == "12,345"


def test_the_check_tells_a_near_figure_from_the_right_one():
    """One key, not any number of the file: 0.0484 is students_plustest_120's AER, 0.0485 is not."""
    key = "rows/both, agreement >= 0.4/aer"
    assert _check(("", "0.0484", ""), key, "alignment/alignment.json", "students_plustest_120") is None
    assert _check(("", "0.0485", ""), key, "alignment/alignment.json", "students_plustest_120") is not None
    assert _check(("", "0.0484", ""), "rows/both, agreement >= 0.5/aer", "alignment/alignment.json",
                  "students_plustest_120") is None  # τ = 0.5 gives the same on test, as the docs say
    assert _expand("a/{b|c}/{d|e}") == ["a/b/d", "a/b/e", "a/c/d", "a/c/e"]


def test_result_files_hold_no_absolute_paths_of_this_machine():
    for path in sorted(RESULTS.rglob("*.json")):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"(?<![\w.])/(work|root|home|tmp)/", text), path.name


def test_the_changelog_has_the_usual_form_and_no_figures():
    """An Unreleased section first, then a section per version (its date optional), its entries
    under Added / Changed / Deprecated / Removed / Fixed / Security, and no measured figure: those
    live on the results pages."""
    text = (PROJECT / "CHANGELOG.md").read_text(encoding="utf-8")
    versions = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert versions[0] == "Unreleased", versions[0]
    released = [v for v in versions[1:] if not re.fullmatch(r"\d+\.\d+\.\d+( \(\d{4}-\d{2}-\d{2}\))?", v)]
    assert released == [], released
    kinds = set(re.findall(r"^### (.+)$", text, flags=re.MULTILINE))
    assert kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, kinds
    prose = re.sub(r"`[^`]*`", "", text)
    figures = [m.group(0) for m in re.finditer(r"(?<![\w.§])\d+\.\d+(?![\w.])|\d+(?:\.\d+)?(?:%|×)", prose)
               if not re.fullmatch(r"0\.\d|2\.3", m.group(0))]  # versions: "until 0.3", "torch 2.3"
    assert figures == [], figures


def test_the_top_of_benchmarks_holds_one_script_per_lasting_question_each_in_its_readme():
    """At most 15 scripts beside the shared module, each named in benchmarks/README.md; answered
    questions go to benchmarks/experiments/ and are named in its README."""
    top = sorted(path.name for path in (PROJECT / "benchmarks").glob("*.py") if path.name != "common.py")
    assert len(top) <= 15, top
    readme = (PROJECT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    assert [name for name in top if f"`{name}`" not in readme] == []
    answered = (PROJECT / "benchmarks" / "experiments" / "README.md").read_text(encoding="utf-8")
    scripts = sorted(path.name for path in (PROJECT / "benchmarks" / "experiments").glob("*.py"))
    assert [name for name in scripts if f"`{name}`" not in answered] == []


def test_the_readme_stays_short_and_its_links_lead_to_pages_that_exist():
    """README.md is for a new user (at most 250 lines); the reference lives in docs/, linked."""
    text = (PROJECT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    links = re.findall(r"\]\(((?:docs|examples)/[^)#]+)", text)
    assert {"docs/hardware.md", "docs/reading.md", "docs/layout.md"} <= set(links)
    assert [link for link in links if not (PROJECT / link).exists()] == []
