"""The HTML attention viewer in a real browser: headless Chromium driven over the DevTools protocol.

Chromium is started with ``--remote-debugging-pipe``: it reads protocol commands (JSON, each
ended by a NUL byte) on file descriptor 3 and writes replies and events on descriptor 4. That
needs only the standard library — no selenium, no chromedriver, nothing downloaded. The tests
skip with a reason when Chromium is not installed (Debian package ``chromium``).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import skip_or_fail_in_ci

from attnmt.visual.viewer import write_attention_viewer

BROWSER_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
STEP_TIMEOUT = 15.0  # seconds for one protocol reply; the whole module takes a few seconds


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
    """A headless Chromium with one page, spoken to through the DevTools protocol on a pipe."""

    def __init__(self, executable: str, width: int = 1280, height: int = 900):
        self.profile = tempfile.TemporaryDirectory(prefix="attnmt-chromium-")
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()

        def wire_descriptors() -> None:  # runs in the child: the protocol wants exactly fds 3 and 4
            # Copy both ends above 10 first, so putting one on 3 cannot overwrite the other.
            read_end = fcntl.fcntl(to_browser_read, fcntl.F_DUPFD, 10)
            write_end = fcntl.fcntl(from_browser_write, fcntl.F_DUPFD, 10)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        self.process = subprocess.Popen(
            [
                executable, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--no-default-browser-check", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-extensions",
                "--disable-dev-shm-usage", "--mute-audio", "--hide-scrollbars",
                f"--user-data-dir={self.profile.name}", f"--window-size={width},{height}",
                "--remote-debugging-pipe", "about:blank",
            ],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=wire_descriptors, pass_fds=(3, 4),
        )
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True,
                  width=width, height=height, deviceScaleFactor=1, mobile=False)

    # -- protocol

    def _send(self, message: dict) -> None:
        data = json.dumps(message).encode() + b"\0"
        while data:
            written = os.write(self._to_browser, data)
            data = data[written:]

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], remaining)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise ConnectionError(f"Chromium closed the pipe (exit code {self.process.poll()})")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: bool = False, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        self._send(message)
        deadline = time.monotonic() + STEP_TIMEOUT
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method} failed: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for_event(self, method: str) -> dict:
        deadline = time.monotonic() + STEP_TIMEOUT
        for index, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(index)
        while True:
            event = self._receive(deadline)
            if event.get("method") == method:
                return event
            self.events.append(event)

    # -- page

    def open(self, url: str) -> None:
        self.events.clear()
        self.call("Page.navigate", session=True, url=url)
        self.wait_for_event("Page.loadEventFired")

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", session=True, expression=expression,
                           returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def hover(self, selector: str, scroll: str = "center") -> tuple[float, float]:
        """Move the real mouse pointer to the middle of the element; return the point.

        The element is scrolled into view first: to the middle of the window, or with
        ``scroll="nearest"`` only as far as needed (not at all when it is already visible).
        """
        box = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            f" e.scrollIntoView({{block: {json.dumps(scroll)}, inline: {json.dumps(scroll)}}});"
            " const r = e.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        self.call("Input.dispatchMouseEvent", session=True, type="mouseMoved", x=box[0], y=box[1])
        return box[0], box[1]

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and browser log errors (e.g. CSP violations) so far."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(json.dumps(params.get("exceptionDetails", {}))[:500])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(" ".join(str(arg.get("value", arg.get("description"))) for arg in params["args"]))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(params["entry"].get("text", ""))
        return found

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (OSError, RuntimeError, TimeoutError, ConnectionError):
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        self.profile.cleanup()


@pytest.fixture(scope="module")
def browser():
    executable = find_browser()
    if executable is None:
        skip_or_fail_in_ci("needs Chromium for the browser test (Debian: apt-get install chromium); it is not installed")
    instance = Browser(executable)
    try:
        yield instance
    finally:
        instance.close()


def softmax_rows(scores: np.ndarray) -> np.ndarray:
    shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def make_examples(count: int = 3) -> list[dict]:
    rng = np.random.default_rng(7)
    examples = []
    for index in range(count):
        src = ["ein", "<script>alert(1)</script>", "Hund", "läuft", f"w{index}", "</s>"]
        out = ["a", "dog", "</script><b>x</b>", "runs", "</s>"]
        layers = {f"layer {layer} / head {head}": softmax_rows(rng.normal(size=(len(out), len(src))) * 2)
                  for layer in (1, 2) for head in (1, 2)}
        layers["average"] = np.mean(list(layers.values()), axis=0)
        example = {
            "source": " ".join(src), "output": " ".join(out), "reference": "a dog is running",
            "src_tokens": src, "out_tokens": out, "meta": {"bleu": 12.5 + index, "index": index},
        }
        if index % 2:
            example["weights"] = layers["average"]
        else:
            example["heads"] = layers
        examples.append(example)
    # A long sentence: its readout wraps over several lines and its heatmap is taller than the window.
    src = [f"lang{i}" for i in range(45)]
    out = [f"long{i}" for i in range(40)]
    examples.append({"source": " ".join(src), "output": " ".join(out), "reference": None,
                     "src_tokens": src, "out_tokens": out,
                     "weights": softmax_rows(rng.normal(size=(len(out), len(src))) * 3)})
    return examples


@pytest.fixture(scope="module")
def viewer_page(browser, tmp_path_factory):
    examples = make_examples()
    path = write_attention_viewer(examples, tmp_path_factory.mktemp("viewer") / "viewer.html",
                                  title="<b>browser</b> test")
    browser.open(path.resolve().as_uri())
    assert browser.evaluate("document.documentElement.dataset.ready") == "true"
    return examples, path


def test_page_loads_without_console_errors_or_injected_markup(browser, viewer_page):
    assert browser.errors() == []
    assert browser.evaluate("document.title") == "<b>browser</b> test"
    # The '<script>' and '<b>' tokens are text, never elements.
    assert browser.evaluate("document.querySelectorAll('b').length") == 0
    assert browser.evaluate("document.querySelectorAll('script').length") == 2
    labels = browser.evaluate(
        "Array.from(document.querySelectorAll('#example-1 th.col-label')).map(e => e.textContent)")
    assert labels[1] == "<script>alert(1)</script>"


def test_heatmap_has_one_cell_per_output_and_source_token(browser, viewer_page):
    examples, _ = viewer_page
    first = examples[0]
    count = browser.evaluate("document.querySelectorAll('#example-1 td.cell').length")
    assert count == len(first["src_tokens"]) * len(first["out_tokens"])
    # Examples build their heatmap when opened, and then have their own full grid too.
    browser.evaluate("document.getElementById('expand-all').click()")
    for number, example in enumerate(examples, start=1):
        cells = browser.evaluate(f"document.querySelectorAll('#example-{number} td.cell').length")
        assert cells == len(example["src_tokens"]) * len(example["out_tokens"])
    assert browser.errors() == []


def test_hovering_a_cell_shows_its_weight(browser, viewer_page):
    examples, _ = viewer_page
    average = examples[0]["heads"]["average"]
    row, col = 2, 3
    browser.hover(f"#example-1 td.cell[data-row='{row}'][data-col='{col}']")
    shown = browser.evaluate("document.querySelector('#example-1 .readout-weight').textContent")
    stored = browser.evaluate(f"document.querySelector(\"#example-1 td.cell[data-row='{row}'][data-col='{col}']\").dataset.weight")
    assert float(stored) == pytest.approx(average[row, col], abs=1e-4)  # "average" is shown first
    assert shown == f"{float(stored):.3f}"
    title = browser.evaluate("document.querySelector('#example-1 .readout-title').textContent")
    assert examples[0]["out_tokens"][row] in title and examples[0]["src_tokens"][col] in title


def test_hovering_an_output_word_shades_the_source_words_by_weight(browser, viewer_page):
    examples, _ = viewer_page
    average = examples[0]["heads"]["average"]
    row = 1
    browser.hover(f"#example-1 th.row-label[data-row='{row}']")
    numbers = browser.evaluate(
        "Array.from(document.querySelectorAll('#example-1 .src-token .src-weight')).map(e => e.textContent)")
    assert numbers == [f"{value:.3f}" for value in average[row]]
    opacities = browser.evaluate(
        "Array.from(document.querySelectorAll('#example-1 .src-token'))"
        ".map(e => getComputedStyle(e).backgroundColor)")
    alphas = [float(colour.rsplit(",", 1)[1].rstrip(") ")) if colour.startswith("rgba") else 1.0
              for colour in opacities]
    np.testing.assert_allclose(alphas, average[row], atol=2e-3)
    active = browser.evaluate("document.querySelector('#example-1 th.row-label.active').dataset.row")
    assert active == str(row)


def test_choosing_a_head_repaints_the_heatmap(browser, viewer_page):
    examples, _ = viewer_page
    heads = examples[0]["heads"]
    names = browser.evaluate("Array.from(document.querySelectorAll('#example-1 select option')).map(o => o.textContent)")
    assert names == list(heads)
    chosen = names.index("layer 2 / head 1")
    browser.evaluate(
        "(() => { const s = document.querySelector('#example-1 select');"
        f" s.value = '{chosen}'; s.dispatchEvent(new Event('change')); }})()")
    weights = browser.evaluate(
        "Array.from(document.querySelectorAll('#example-1 td.cell')).map(c => Number(c.dataset.weight))")
    np.testing.assert_allclose(np.reshape(weights, heads["layer 2 / head 1"].shape), heads["layer 2 / head 1"], atol=1e-4)
    browser.hover("#example-1 td.cell[data-row='0'][data-col='0']")
    shown = browser.evaluate("document.querySelector('#example-1 .readout-weight').textContent")
    assert shown == f"{heads['layer 2 / head 1'][0, 0]:.3f}"
    assert browser.errors() == []


def test_filter_box_hides_examples_that_do_not_match(browser, viewer_page):
    browser.evaluate(
        "(() => { const f = document.getElementById('filter'); f.value = 'w1';"
        " f.dispatchEvent(new Event('input')); })()")
    hidden = browser.evaluate("Array.from(document.querySelectorAll('details.example')).map(d => d.hidden)")
    assert hidden == [True, False, True, True]
    assert browser.evaluate("document.getElementById('count').textContent") == "1 of 4 examples"
    browser.evaluate(
        "(() => { const f = document.getElementById('filter'); f.value = '';"
        " f.dispatchEvent(new Event('input')); })()")
    assert browser.evaluate("Array.from(document.querySelectorAll('details.example')).filter(d => d.hidden).length") == 0


def test_pointing_in_a_long_example_does_not_move_the_heatmap_under_the_pointer(browser, viewer_page):
    examples, _ = viewer_page
    long_example = examples[-1]
    number = len(examples)
    browser.evaluate(f"document.getElementById('example-{number}').open = true")
    cells = browser.evaluate(f"document.querySelectorAll('#example-{number} td.cell').length")
    assert cells == len(long_example["src_tokens"]) * len(long_example["out_tokens"])
    # The example's top in view, readout above the heatmap: the first hover fills in the readout's
    # numbers, and the cell under the pointer must stay the same cell.
    browser.evaluate(f"document.getElementById('example-{number}').scrollIntoView({{block: 'start'}})")
    for row, col in ((2, 20), (5, 44), (30, 20), (39, 0)):
        selector = f"#example-{number} td.cell[data-row='{row}'][data-col='{col}']"
        position = f"document.querySelector({json.dumps(selector)}).getBoundingClientRect().top + window.scrollY"
        browser.evaluate(f"document.querySelector({json.dumps(selector)}).scrollIntoView({{block: 'nearest'}})")
        before = browser.evaluate(position)
        x, y = browser.hover(selector, scroll="nearest")
        assert browser.evaluate(position) == pytest.approx(before, abs=0.5), "the heatmap moved"
        under_pointer = browser.evaluate(f"(() => {{ const e = document.elementFromPoint({x}, {y});"
                                         " return [e.dataset.row, e.dataset.col]; })()")
        assert under_pointer == [str(row), str(col)]
        active = browser.evaluate(f"document.querySelector('#example-{number} th.row-label.active').dataset.row")
        assert active == str(row)
        shown = browser.evaluate(f"document.querySelector('#example-{number} .readout-weight').textContent")
        assert shown == f"{long_example['weights'][row, col]:.3f}"
    browser.hover(f"#example-{number} th.row-label[data-row='12']")
    assert browser.evaluate(f"document.querySelector('#example-{number} th.row-label.active').dataset.row") == "12"
    assert browser.errors() == []


def test_screenshot_of_the_viewer_is_a_png(browser, viewer_page, tmp_path):
    browser.hover("#example-1 td.cell[data-row='1'][data-col='2']")
    shot = browser.screenshot(tmp_path / "viewer.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert browser.errors() == []


def test_the_error_check_sees_console_errors_and_blocked_scripts(browser, viewer_page):
    """The checks above would notice a broken page: console errors and refused scripts are seen."""
    seen_before = len(browser.events)
    browser.evaluate("console.error('deliberate test error')")
    # The page's Content-Security-Policy refuses a script that was not in the written file.
    browser.evaluate("(() => { const s = document.createElement('script');"
                     " s.textContent = 'window.injected = true'; document.body.appendChild(s); })()")
    browser.evaluate("1")  # one more round trip, so the browser's log messages have arrived
    errors = browser.errors()
    assert any("deliberate test error" in error for error in errors)
    assert any("Content Security Policy" in error for error in errors)
    assert browser.evaluate("window.injected === undefined")
    del browser.events[seen_before:]  # these errors were made on purpose
