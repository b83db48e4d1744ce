"""What many tests share, in one place: a made-up translation task, tiny configs for it, the runs
trained on it, a simulated full disk, and a headless browser.

- The task: every German word of ``LEXICON`` has one English word, and the order is kept, so a
  tiny model learns it in seconds and word i of a source aligns with word i of its target.
- ``tiny_run_config`` (a whole run config), ``tiny_rnn_config`` (a ``model:`` section) and
  ``tiny_transformer_config`` (a ``TransformerConfig``); ``TINY_MODELS`` for runs of each kind.
- ``BigramToy``: a model with fixed bigram tables, for search.
- ``run_trainer`` trains a config into a folder; ``comparable`` drops the timings of its records;
  ``train_stopped_and_unbroken`` trains one twice, stopped and resumed, and without a stop.
- ``tolerance``: how closely two float32 paths to one result agree where the test runs.
- ``FullDisk``: the writes into a folder fail with ENOSPC once a byte budget is spent.
- ``Browser``: one page of the installed headless Chromium, driven by Playwright (typing, clicks and
  pointer moves with its actionability checks); nothing is downloaded.

Session fixtures built from these (``tiny_run``, ``browser``) are in ``conftest.py``.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
import torch
import yaml
from playwright.sync_api import ConsoleMessage, sync_playwright
from playwright.sync_api import Error as PlaywrightError
from torch import nn

from attnmt.data.toy import LEXICON, make_pairs, toy_run_config, write_corpus  # noqa: F401 (the tests' names)
from attnmt.models.transformer import TransformerConfig
from attnmt.runs.checkpoint import load_checkpoint
from attnmt.runs.folder import MACHINE_FIELDS, machine_free  # noqa: F401 (the tests' names)
from attnmt.runs.run_config import load_config
from attnmt.runtime.full_disk import FullDisk, disk_full  # noqa: F401 (the tests' names)
from attnmt.training import Trainer
from attnmt.workflows import FIGURES

# ---------------------------------------------------------------------------- float noise

TF32_TOLERANCE = 2e-3


def tolerance(atol: float, device: torch.device | str) -> float:
    """The absolute tolerance between two float32 computations of one result that take different
    paths (a batch or one pair alone, a search or a read-out): ``atol`` on a CPU. On CUDA attnmt
    multiplies float32 matrices in TF32, whose 10-bit mantissa rounds each product to about 5e-4 of
    its size, so two paths there agree to ``TF32_TOLERANCE``, not to float32's 1e-6. Run on a GPU
    (device ``auto``), the suite checks the same equalities at that looser bound."""
    device = torch.device(device)
    if device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32:
        return max(atol, TF32_TOLERANCE)
    return atol


# ---------------------------------------------------------------------------- the made-up task
# attnmt.data.toy: LEXICON, make_pairs, write_corpus; tiny_run_config is its toy_run_config

tiny_run_config = toy_run_config


def tiny_rnn_config(**overrides) -> dict:
    """The ``model:`` section of a tiny RNN (scaled dot-product attention with a key/query size of 6)."""
    config = dict(type="rnn", embed_dim=8, hidden_dim=12, dropout=0.1, attention="scaled_dot")
    config["attention_options"] = {"kq_dim": 6}
    config.update(overrides)
    if config["attention"] != "scaled_dot" and "attention_options" not in overrides:
        config["attention_options"] = {"num_heads": 3} if config["attention"] == "multihead" else {}
    return config


def tiny_transformer_config(**overrides) -> TransformerConfig:
    """A tiny Transformer's config (no dropout, so its outputs are deterministic)."""
    values = dict(
        d_model=32, num_heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2,
        dropout=0.0, attention_dropout=0.0, max_positions=64,
    )
    values.update(overrides)
    return TransformerConfig(**values)


#: tiny models of each kind the viewer shows differently: one head, two heads, two layers of two heads
TINY_MODELS = {
    "sdp": {"type": "rnn", "embed_dim": 16, "hidden_dim": 32, "dropout": 0.1, "attention": "scaled_dot"},
    "multihead": {"type": "rnn", "embed_dim": 16, "hidden_dim": 32, "dropout": 0.1, "attention": "multihead",
                  "attention_options": {"num_heads": 2}},
    "transformer": {"type": "transformer", "d_model": 16, "num_heads": 2, "ffn_dim": 32, "encoder_layers": 1,
                    "decoder_layers": 2, "dropout": 0.1},
}


# ---------------------------------------------------------------------------- a toy for search


class Rows:
    """Encoder output / state of the toy: a tensor of per-row values with index_select."""

    def __init__(self, *tensors):
        self.tensors = tensors

    def index_select(self, index):
        return Rows(*(t.index_select(0, index) for t in self.tensors))


class BigramToy(nn.Module):
    """A toy for search: P(next | prev) from a fixed table over the tokens PAD, UNK, BOS, EOS, A, B
    (ids 0 to 5) and uniform attention; greedy follows A (0.5) then A (0.4)… while B, EOS has 0.36.

    state = the number of steps taken (to check that search passes ``step`` and reorders states).
    """

    def __init__(self):
        super().__init__()
        table = torch.zeros(6, 6, dtype=torch.float64)
        table[2, [3, 4, 5]] = torch.tensor([0.1, 0.5, 0.4], dtype=torch.float64)
        table[4, [3, 4, 5]] = torch.tensor([0.3, 0.4, 0.3], dtype=torch.float64)
        table[5, [3, 4, 5]] = torch.tensor([0.9, 0.05, 0.05], dtype=torch.float64)
        self.register_buffer("log_table", table.log())

    def encode(self, src, src_mask):
        return Rows(src_mask)

    def init_decoder_state(self, encoded):
        return Rows(torch.zeros(encoded.tensors[0].shape[0], dtype=torch.long))

    def decode_step(self, prev_tokens, state, encoded, step):
        (steps,) = state.tensors
        assert (steps == step).all(), "state and step disagree: search reordered states wrongly"
        mask = encoded.tensors[0]
        attention = mask.double() / mask.sum(1, keepdim=True)
        return self.log_table[prev_tokens].clone(), attention, Rows(steps + 1)


# ---------------------------------------------------------------------------- runs


def save_yaml(folder: Path, config: dict, name: str = "config.yaml") -> Path:
    """``config`` written as ``folder/name``."""
    path = folder / name
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    return path


def run_trainer(folder: Path, config: dict, out: str = "run", resume: bool = False):
    """Train ``config`` (saved as ``folder/config.yaml``) into ``folder/out`` without progress output."""
    cfg = load_config(save_yaml(folder, config))
    return Trainer(cfg, folder / out, resume=resume, show_progress=False, verbose=False,
                   on_validation=FIGURES.on_validation).run()


def train_stopped_and_unbroken(folder: Path, config: dict, first_epochs: int):
    """Train ``config`` into ``folder/resumed`` for ``first_epochs`` epochs, then resume it to its
    ``max_epochs``, and train it into ``folder/unbroken`` in one go. Returns both results and both
    last checkpoints (with their training state), after checking their weights are equal."""
    run_trainer(folder, {**config, "training": {**config["training"], "max_epochs": first_epochs}}, out="resumed")
    resumed = run_trainer(folder, config, out="resumed", resume=True)
    unbroken = run_trainer(folder, config, out="unbroken")
    assert resumed.step == unbroken.step
    a = load_checkpoint(folder / "resumed" / "last.pt", require_training_state=True)
    b = load_checkpoint(folder / "unbroken" / "last.pt", require_training_state=True)
    for name, tensor in b["model"].items():
        assert torch.equal(a["model"][name], tensor), name
    return resumed, unbroken, a, b


def resumed_inside_an_epoch(folder: Path, config: dict, unbroken_step: int, epochs: int):
    """Train ``config`` into ``folder/resumed`` until two steps into its second epoch, then resume it
    to the end, and check it against ``folder/unbroken`` (the same config trained before in one go:
    ``unbroken_step`` steps over ``epochs`` epochs): the same step, weights and epoch records.
    Returns both last checkpoints (resumed, unbroken)."""
    stopped = {**config, "training": {**config["training"], "max_steps": unbroken_step // epochs + 2}}
    run_trainer(folder, stopped, out="resumed")
    run_trainer(folder, config, out="resumed", resume=True)
    a = load_checkpoint(folder / "resumed" / "last.pt")
    b = load_checkpoint(folder / "unbroken" / "last.pt")
    assert a["progress"]["step"] == b["progress"]["step"] == unbroken_step
    for name, tensor in b["model"].items():
        assert torch.equal(a["model"][name], tensor), name
    assert comparable([r for r in a["history"] if r["type"] == "epoch"]) == comparable(
        [r for r in b["history"] if r["type"] == "epoch"])
    return a, b


# comparable: attnmt.runs.folder.machine_free (metric records without the machine's fields)
comparable = machine_free


# a full disk: attnmt.runtime.full_disk (FullDisk, disk_full)


# ---------------------------------------------------------------------------- a headless browser

BROWSER_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
STEP_TIMEOUT = 15.0  # seconds Playwright waits for one action (an element to become actionable)


def find_browser() -> str | None:
    explicit = os.environ.get("ATTNMT_CHROMIUM")
    if explicit:
        return explicit if shutil.which(explicit) else None
    for name in BROWSER_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """One page of a headless Chromium, driven by Playwright as a person drives it: real pointer
    moves, clicks and key presses, each after Playwright's actionability checks (the element is
    attached, visible, stable and receives the event). The installed Chromium is used
    (``executable_path``), so nothing is downloaded."""

    def __init__(self, executable: str, width: int = 1280, height: int = 900):
        self._playwright = sync_playwright().start()
        try:
            self._browser = self._playwright.chromium.launch(
                executable_path=executable, headless=True,
                args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        except PlaywrightError:
            self._playwright.stop()
            raise
        self.page = self._browser.new_page(viewport={"width": width, "height": height})
        self.page.set_default_timeout(STEP_TIMEOUT * 1000)
        self.events: list[str] = []  # console errors and uncaught exceptions, in the order seen
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda error: self.events.append(f"uncaught: {error}"))

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "assert"):
            self.events.append(message.text)

    # -- looking

    def open(self, url: str) -> None:
        self.page.goto(url, wait_until="load")

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        return self.page.evaluate(expression)

    def wait_for(self, expression: str, seconds: float = 30.0) -> None:
        """Wait until the JavaScript ``expression`` is true in the page (what the page shows), or
        fail after ``seconds``. Polled from here: the pages' Content-Security-Policy forbids the
        eval that Playwright's own wait_for_function needs."""
        deadline = time.monotonic() + seconds
        while not self.page.evaluate(expression):
            if time.monotonic() > deadline:
                raise AssertionError(f"after {seconds:g} s the page still does not show {expression}")
            self.page.wait_for_timeout(50)

    def screenshot(self, path: Path) -> Path:
        self.page.screenshot(path=str(path))
        return path

    def errors(self) -> list[str]:
        """Console errors (CSP violations included) and uncaught exceptions so far."""
        return list(self.events)

    # -- acting as a person does

    def hover(self, selector: str, scroll: str = "center") -> tuple[float, float]:
        """Move the pointer to the middle of the element; return the point.

        The element is scrolled to the middle of the window first, or with ``scroll="nearest"``
        only as far as Playwright needs (not at all when it is already in view).
        """
        element = self.page.locator(selector).first
        if scroll == "center":
            element.evaluate("e => e.scrollIntoView({block: 'center', inline: 'center'})")
        element.hover()
        box = element.bounding_box()
        assert box is not None, f"{selector} has no box"
        return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2

    def click(self, selector: str) -> None:
        self.page.locator(selector).first.click()

    def click_button(self, name: str, within: str = "body") -> None:
        """Click the button whose accessible name is exactly ``name`` inside ``within``."""
        self.page.locator(within).first.get_by_role("button", name=name, exact=True).click()

    def type_into(self, selector: str, text: str) -> None:
        """Click the field, select what it holds, delete it and type ``text`` key by key."""
        self.click(selector)
        self.page.keyboard.press("ControlOrMeta+A")
        self.page.keyboard.press("Backspace")
        self.page.keyboard.type(text)

    def choose(self, selector: str, value: str) -> None:
        """Pick the option ``value`` of a <select>, as a person picks it (the page sees change)."""
        self.page.locator(selector).first.select_option(value)

    def press(self, key: str) -> None:
        """A real key press (down, then up), sent to whatever has the focus."""
        self.page.keyboard.press(key)

    def type_text(self, text: str) -> None:
        """``text`` typed key by key into whatever has the focus."""
        self.page.keyboard.type(text)

    def close(self) -> None:
        try:
            self._browser.close()
        finally:
            self._playwright.stop()


# -- the course handout's planted submissions (tests/test_handout.py, tests/test_grade.py) ---------

SUBMISSIONS = Path(__file__).resolve().parent / "data" / "submissions"
HANDOUT_CLASS = "SingleQueryScaledDotProductAttention"

#: each planted mistake: the edits that make it from the correct submission (tests/data/submissions/correct.py)
PLANTED = {
    "no_scale": [(" / math.sqrt(self.kq_dim)", "")],
    "softmax_over_batch": [("torch.softmax(scores, dim=1)", "torch.softmax(scores, dim=0)")],
    "projected_values": [("self.kq_dim = kq_dim\n",
                          "self.kq_dim = kq_dim\n        self.W_v = nn.Linear(2 * enc_hid_dim, 2 * enc_hid_dim)\n"),
                         ("* encoder_outputs).sum(0)", "* self.W_v(encoder_outputs)).sum(0)")],
    "alpha_time_first": [("return attended_val, alpha", "return attended_val, alpha.t()")],
}


def submission(name: str, folder: Path | None = None) -> str:
    """The spec of a planted submission: a file of tests/data/submissions, or one of ``PLANTED``
    written into ``folder``."""
    if name not in PLANTED:
        return f"{SUBMISSIONS / name}.py:{HANDOUT_CLASS}"
    assert folder is not None
    text = (SUBMISSIONS / "correct.py").read_text()
    for old, new in PLANTED[name]:
        assert old in text, (name, old)
        text = text.replace(old, new)
    (folder / f"{name}.py").write_text(text)
    return f"{folder / name}.py:{HANDOUT_CLASS}"


def execute_notebook(path: Path, folder: Path, monkeypatch, prefix: str, settings: dict) -> list:
    """Run the notebook ``path`` in a real Jupyter kernel whose working folder is ``folder``, with
    each of ``settings`` as the variable ``PREFIX_NAME``; returns its code cells with their outputs.
    Skips without nbformat/nbclient; a failing cell raises CellExecutionError with its traceback."""
    nbformat = pytest.importorskip("nbformat", reason="needs nbformat (in attnmt[dev])")
    nbclient = pytest.importorskip("nbclient", reason="needs nbclient and ipykernel (in attnmt[dev])")
    for name, value in settings.items():
        monkeypatch.setenv(f"{prefix}_{name}", str(value))
    notebook = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}}).execute()
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def streamed_text(cell) -> str:
    """What a notebook cell printed (its stream outputs), joined."""
    return "".join(output.get("text", "") for output in cell.outputs if output.output_type == "stream")

