"""What many tests share, in one place: a made-up translation task, tiny configs for it, the runs
trained on it, a simulated full disk, and a headless browser.

- The task: every German word of ``LEXICON`` has one English word, and the order is kept, so a
  tiny model learns it in seconds and word i of a source aligns with word i of its target.
- ``tiny_run_config`` (a whole run config), ``tiny_rnn_config`` (a ``model:`` section) and
  ``tiny_transformer_config`` (a ``TransformerConfig``); ``TINY_MODELS`` for runs of each kind.
- ``BigramToy``: a model with fixed bigram tables, for search.
- ``run_trainer`` trains a config into a folder; ``comparable`` drops the timings of its records.
- ``tolerance``: how closely two float32 paths to one result agree where the test runs.
- ``FullDisk``: the writes into a folder fail with ENOSPC once a byte budget is spent.
- ``Browser``: headless Chromium driven over the DevTools protocol on a pipe (file descriptors 3
  and 4, JSON ended by NUL bytes): only the standard library, nothing downloaded.

Session fixtures built from these (``tiny_run``, ``browser``) are in ``conftest.py``.
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

import torch
import yaml
from torch import nn

from attnmt.data.toy import LEXICON, make_pairs, toy_run_config, write_corpus  # noqa: F401 (the tests' names)
from attnmt.models.transformer import TransformerConfig
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


# comparable: attnmt.runs.folder.machine_free (metric records without the machine's fields)
comparable = machine_free


# a full disk: attnmt.runtime.full_disk (FullDisk, disk_full)


# ---------------------------------------------------------------------------- a headless browser

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

    KEYS = {"Tab": ("Tab", 9), "ArrowRight": ("ArrowRight", 39), "ArrowLeft": ("ArrowLeft", 37),
            "ArrowDown": ("ArrowDown", 40), "ArrowUp": ("ArrowUp", 38), "Enter": ("Enter", 13)}

    def press(self, key: str) -> None:
        """A real key press (down, then up) of one of ``KEYS``, sent to whatever has the focus."""
        code, virtual = self.KEYS[key]
        for kind in ("rawKeyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", session=True, type=kind, key=key, code=code,
                      windowsVirtualKeyCode=virtual, nativeVirtualKeyCode=virtual)

    def type_text(self, text: str) -> None:
        """Text typed into the element that has the focus, as a keyboard's input would insert it."""
        self.call("Input.insertText", session=True, text=text)

    def click(self, selector: str) -> None:
        """A real left click in the middle of the element (scrolled into view)."""
        x, y = self.hover(selector)
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", session=True, type=kind, x=x, y=y, button="left", clickCount=1)

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
