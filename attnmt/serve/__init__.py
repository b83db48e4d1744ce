"""``attnmt serve``: a local web page where a user types a sentence and watches several models
translate it and attend, side by side.

- ``models``: the models served, each loaded once (the trust rule of every command applies);
- ``views``: what each request computes, as plain functions from JSON to JSON (tested in-process);
- ``server``: the standard library's ``ThreadingHTTPServer`` with the safety rules of a local tool;
- ``static/``: the page (HTML, CSS, JavaScript) shipped in the package: no network, no build step.
"""

from attnmt.serve.models import ServedModel, load_models
from attnmt.serve.server import make_server
from attnmt.serve.views import RequestError, Views

__all__ = ["RequestError", "ServedModel", "Views", "load_models", "make_server"]
