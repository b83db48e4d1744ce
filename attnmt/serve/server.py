"""The local web server of ``attnmt serve``: the standard library's ``ThreadingHTTPServer`` (one
thread per connection, so one slow request never blocks the others), one page from the package's
``static/`` folder, and a JSON API over ``attnmt.serve.views``.

A local tool that behaves like one:

- it answers only requests whose ``Host`` header names the address it serves (``localhost`` or an
  IP address with its port): a page on another site cannot drive it through DNS rebinding;
- a POST must be JSON (``Content-Type: application/json``, which another site's page cannot send
  without a preflight this server never grants) and, when it says where it comes from
  (``Origin``), come from this page;
- a body is at most ``MAX_BODY`` bytes, read with a time limit; every value in it is bounded by
  the views (``RequestError``: a 4xx answer with one line);
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
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from attnmt.serve.views import RequestError, Views

__all__ = ["MAX_BODY", "AttnmtServer", "make_server", "serve_in_thread"]

MAX_BODY = 64 * 1024
READ_TIMEOUT = 20  # seconds a client may take to send a request

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
         "/api/step": "step", "/api/gold": "gold", "/api/counterfactual": "counterfactual"}


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
        self._json(status, {"error": message})

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
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            raise RequestError(411, "give the Content-Length of the body")
        if int(length) > MAX_BODY:
            raise RequestError(413, f"the body is {length} bytes, more than {MAX_BODY}")
        data = self.rfile.read(int(length))
        try:
            payload = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise RequestError(400, f"the body is not JSON ({error})") from None
        if not isinstance(payload, dict):
            raise RequestError(400, "the body must be a JSON object")
        return payload

    # -- methods

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self._refused():
            return
        path = self.path.split("?", 1)[0]
        if path in self.server.files:
            body, kind = self.server.files[path]
            self._send(HTTPStatus.OK, body, kind)
        elif path == "/api/models":
            self._json(HTTPStatus.OK, self.server.views.models_page())
        else:
            self._error(HTTPStatus.NOT_FOUND, "no such page")

    do_HEAD = do_GET

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if self._refused():
            return
        path = self.path.split("?", 1)[0]
        try:
            if path not in POSTS and path != "/api/export":
                self.close_connection = True  # its body is not read
                raise RequestError(404, "no such request")
            payload = self._body()
            if path == "/api/export":
                text = self.server.views.export(payload)
                self._send(HTTPStatus.OK, text.encode("utf-8"), "application/x-ndjson; charset=utf-8",
                           {"Content-Disposition": 'attachment; filename="attnmt-attention.jsonl"'})
                return
            self._json(HTTPStatus.OK, getattr(self.server.views, POSTS[path])(payload))
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
