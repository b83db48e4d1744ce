"""The local web server of ``attnmt serve``: the standard library's ``ThreadingHTTPServer`` (one
thread per connection, so one slow request never blocks the others), one page from the package's
``static/`` folder, and a JSON API over ``attnmt.serve.views``.

A local tool that behaves like one:

- it answers only requests whose ``Host`` header names the address it serves (``localhost`` or an
  IP address with its port): a page on another site cannot drive it through DNS rebinding;
- a POST must be JSON (``Content-Type: application/json``, which another site's page cannot send
  without a preflight this server never grants) and, when it says where it comes from
  (``Origin``), come from this page;
- a body is at most ``MAX_BODY`` bytes; a request (its line, headers and body) must arrive within
  ``REQUEST_DEADLINE`` seconds in all, however slowly it trickles; every value in it is bounded by
  the views (``RequestError``: a 4xx answer with one line), JSON nested too deep or holding a number
  of thousands of digits included;
- every error answer closes the connection, so a body left unread (a request refused before its
  body was read) can never be taken for the next request on a kept-alive connection;
- the static files are a fixed list: no path of a request is ever read from the disk;
- the page may run only its own scripts and talk only to this server (Content-Security-Policy).

API (JSON in and out; errors as ``{"error": "one line"}`` with a 4xx or 500 status)::

    GET  /api/models                 models, examples, limits
    POST /api/translate              {sentence, beam?, n_best?, models?}
    POST /api/saliency               {sentence, model, method, steps?, samples?, beam?}
    POST /api/prefix                 {sentence, model, prefix}
    POST /api/pin                    {sentence, model, step, source_word}      (RNN)
    POST /api/step                   {sentence, model, step}                   (RNN)
    POST /api/counterfactual         {sentence, model, kind}                   (RNN)
    POST /api/gold                   {sentence, reference, links, models?}
    POST /api/export                 {sentence, beam?, models?} -> .jsonl attention file
"""

from __future__ import annotations

import ipaddress
import json
import select
import socket
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from attnmt.serve.jobs import watching
from attnmt.serve.views import RequestError, Views

__all__ = ["MAX_BODY", "AttnmtServer", "make_server", "serve_in_thread"]

MAX_BODY = 64 * 1024
READ_TIMEOUT = 20  # seconds a client may wait between two reads of a request
REQUEST_DEADLINE = 30  # seconds a client may take to send a whole request

#: the files of the page: request path -> (file in attnmt/serve/static, content type)
STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/app.css": ("app.css", "text/css; charset=utf-8"),
}

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: "
                               "blob:; connect-src 'self'; form-action 'none'; frame-ancestors 'none'; "
                               "base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

POSTS = {"/api/translate": "translate", "/api/saliency": "saliency", "/api/prefix": "prefix", "/api/pin": "pin",
         "/api/step": "step", "/api/gold": "gold", "/api/counterfactual": "counterfactual", "/api/trace": "trace"}


def _static_files() -> dict[str, tuple[bytes, str]]:
    folder = resources.files("attnmt.serve").joinpath("static")
    return {path: (folder.joinpath(name).read_bytes(), kind) for path, (name, kind) in STATIC.items()}


class AttnmtServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that knows its views, its page and the Host headers it answers."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], views: Views, quiet: bool = True):
        super().__init__(address, Handler)
        self.views = views
        self.quiet = quiet
        self.files = _static_files()
        host, port = str(self.server_address[0]), int(self.server_address[1])
        self.url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}/"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (a closed tab, a cut connection) is no fault of the server's: nothing
        is printed. Anything else is one line, not a traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            return
        sys.stderr.write(f"attnmt serve: error: {client_address[0]}: {type(error).__name__}: {error}\n")

    def allows_host(self, header: str | None) -> bool:
        """Whether a request's Host header names this server: ``localhost`` or an IP address, with
        the port served (a domain name could be an attacker's, rebound to this address)."""
        if not header:
            return False
        name, _, port = header.rpartition(":")
        if not name or port != str(self.server_address[1]):
            return False
        name = name.strip("[]")
        if name.lower() == "localhost":
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True


def is_ascii_number(text: str) -> bool:
    """Whether ``text`` is a number in ASCII digits ("²" and other Unicode digits are not)."""
    return text.isascii() and text.isdigit()


class Handler(BaseHTTPRequestHandler):
    server: AttnmtServer
    protocol_version = "HTTP/1.1"
    server_version = "attnmt-serve"
    sys_version = ""
    timeout = READ_TIMEOUT

    # -- answers

    def _send(self, status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in {**SECURITY_HEADERS, "Content-Type": content_type, "Content-Length": str(len(body)),
                            **(extra or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, value: Any) -> None:
        body = json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
        self._send(status, body, "application/json; charset=utf-8")

    def _error(self, status: int, message: str) -> None:
        """A one-line JSON error; the connection closes after it (module docstring)."""
        self.close_connection = True
        body = json.dumps({"error": message}, ensure_ascii=False).encode("utf-8")
        self._send(status, body, "application/json; charset=utf-8", {"Connection": "close"})

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's own refusals (an unknown method, a malformed request line) as the
        same one-line JSON, not its HTML page."""
        try:
            self._error(code, message or HTTPStatus(code).phrase)
        except (ConnectionError, TimeoutError, ValueError):
            self.close_connection = True

    # -- a whole request within REQUEST_DEADLINE

    def handle_one_request(self) -> None:
        self._reading = True
        timer = threading.Timer(REQUEST_DEADLINE, self._too_slow)
        timer.daemon = True
        timer.start()
        try:
            super().handle_one_request()
        finally:
            timer.cancel()

    def _too_slow(self) -> None:
        """The deadline passed while the request was still arriving: the connection is cut."""
        if self._reading:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the standard library's name
        if not self.server.quiet:
            sys.stderr.write(f"attnmt serve: {self.address_string()} {format % args}\n")

    # -- checks

    def _refused(self) -> bool:
        """Answers 421 / 403 and returns True for a request from the wrong place."""
        if not self.server.allows_host(self.headers.get("Host")):
            self._error(HTTPStatus.MISDIRECTED_REQUEST, "this server answers requests to its own address only")
            return True
        origin = self.headers.get("Origin")
        if origin is not None and origin != f"http://{self.headers.get('Host')}":
            self._error(HTTPStatus.FORBIDDEN, "requests from another site's page are refused")
            return True
        return False

    def _body(self) -> dict:
        """The request's JSON object; RequestError for anything else."""
        if self.headers.get("Content-Type", "").split(";")[0].strip().lower() != "application/json":
            raise RequestError(415, "send JSON (Content-Type: application/json)")
        if self.headers.get("Transfer-Encoding") is not None:
            raise RequestError(411, "send the body with a Content-Length, not a Transfer-Encoding")
        length = self.headers.get("Content-Length")
        if length is None or not is_ascii_number(length.strip()):
            raise RequestError(411, "give the Content-Length of the body (ASCII digits)")
        length = length.strip()
        if len(length) > len(str(MAX_BODY)) or int(length) > MAX_BODY:
            raise RequestError(413, f"the body is {length:.20} bytes, more than {MAX_BODY}")
        data = self.rfile.read(int(length))
        self._reading = False
        if len(data) < int(length):
            raise ConnectionError("the client sent less than its Content-Length")
        try:
            payload = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise RequestError(400, f"the body is not JSON ({error})") from None
        except RecursionError:
            raise RequestError(400, "the body's JSON is nested too deep") from None
        except ValueError as error:  # an integer of thousands of digits
            raise RequestError(400, f"the body's JSON holds a value out of range ({str(error)[:80]})") from None
        if not isinstance(payload, dict):
            raise RequestError(400, "the body must be a JSON object")
        return payload

    # -- methods

    def _client_gone(self) -> bool:
        """Whether the client closed its connection while its request waits (it has nothing left to
        send, so a readable socket that reads nothing has been closed)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _request_path(self) -> str:
        """The path asked for, without its query; "" for one the request line wrote otherwise than
        the page does (``//api/models``, which http.server would quietly read as ``/api/models``)."""
        words = self.requestline.split()
        raw = words[1] if len(words) > 1 else ""
        return "" if raw.startswith("//") else self.path.split("?", 1)[0]

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._reading = False
        if self._carries_body():  # unread, it would be taken for the next request: refused, and the connection closed
            self._error(HTTPStatus.BAD_REQUEST, f"a {self.command} request carries no body")
            return
        if self._refused():
            return
        path = self._request_path()
        if path in self.server.files:
            body, kind = self.server.files[path]
            self._send(HTTPStatus.OK, body, kind)
        elif path == "/api/models":
            self._json(HTTPStatus.OK, self.server.views.models_page())
        else:
            self._error(HTTPStatus.NOT_FOUND, "no such page")

    do_HEAD = do_GET

    def _carries_body(self) -> bool:
        """Whether the request says it has a body (a Content-Length other than 0, or a Transfer-Encoding)."""
        length = self.headers.get("Content-Length")
        return self.headers.get("Transfer-Encoding") is not None or (
            length is not None and length.strip() != "0")

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if self._refused():
            return
        path = self._request_path()
        try:
            if path not in POSTS and path != "/api/export":
                self.close_connection = True  # its body is not read
                raise RequestError(404, "no such request")
            payload = self._body()
            with watching(self._client_gone):
                if path == "/api/export":
                    text = self.server.views.export(payload)
                    self._send(HTTPStatus.OK, text.encode("utf-8"), "application/x-ndjson; charset=utf-8",
                               {"Content-Disposition": 'attachment; filename="attnmt-attention.jsonl"'})
                    return
                answer = getattr(self.server.views, POSTS[path])(payload)
            self._json(HTTPStatus.OK, answer)
        except RequestError as error:
            self._error(error.status, str(error))
        except (ConnectionError, TimeoutError):
            self.close_connection = True
        except Exception as error:  # noqa: BLE001 - a fault of attnmt's own: answered, and the server goes on
            sys.stderr.write(f"attnmt serve: error: {self.path}: {type(error).__name__}: {error}\n")
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"internal error ({type(error).__name__}); see the "
                                                           "server's output")

    def _not_allowed(self) -> None:
        self.close_connection = True
        self._error(HTTPStatus.METHOD_NOT_ALLOWED, "only GET and POST")

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed


def make_server(views: Views, host: str = "127.0.0.1", port: int = 8000, quiet: bool = True) -> AttnmtServer:
    """The server, bound (``port`` 0: any free port); call ``serve_forever`` and ``shutdown``."""
    return AttnmtServer((host, port), views, quiet=quiet)


def serve_in_thread(server: AttnmtServer) -> threading.Thread:
    """``server.serve_forever()`` in a daemon thread (tests, benchmarks)."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return thread
