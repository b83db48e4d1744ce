"""Multi30k: where files are looked for, download from a local server, checksums, clear errors.

No test touches the internet or the user's home: every test runs with its own cache folder and
with the download URL pointing at a local server (or at a closed local port).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import shutil
import socket
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from attnmt.data import DataError, load_multi30k, multi30k, multi30k_path

from conftest import shared_data_path


@pytest.fixture(autouse=True)
def isolated_environment(tmp_path, monkeypatch):
    """Own cache, no user data folder, and a download URL that can only fail fast."""
    monkeypatch.setenv("ATTNMT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ATTNMT_DATA_DIR", raising=False)
    monkeypatch.setenv("ATTNMT_MULTI30K_URL", f"http://127.0.0.1:{closed_port()}")


def closed_port() -> int:
    """A local port nothing listens on (bound and released), so a connection is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def tiny_file(folder, name: str, lines: list[str], monkeypatch=None):
    """Write a gzip file; with ``monkeypatch``, record its sum in the table as the upstream one."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(gzip.compress("\n".join(lines).encode("utf-8") + b"\n", mtime=0))
    if monkeypatch is not None:
        monkeypatch.setitem(multi30k.SHA256, name, hashlib.sha256(path.read_bytes()).hexdigest())
    return path


class Server:
    """A ThreadingHTTPServer on 127.0.0.1 serving a folder, counting the requests it gets."""

    def __init__(self, folder):
        self.requests: list[str] = []
        server = self

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_GET(self):
                server.requests.append(self.path)
                super().do_GET()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(folder)))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/task1/raw"
        # a short poll interval makes shutdown() return quickly
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def server(tmp_path):
    served = tmp_path / "served"
    (served / "task1" / "raw").mkdir(parents=True)
    running = Server(served)
    running.folder = served / "task1" / "raw"
    yield running
    running.close()


def cache_files(tmp_path):
    cache = tmp_path / "cache" / "multi30k"
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


# ---- names --------------------------------------------------------------------------------------


def test_table_has_all_22_upstream_files():
    assert len(multi30k.SHA256) == 22
    assert all(len(s) == 64 and int(s, 16) >= 0 for s in multi30k.SHA256.values())
    assert multi30k.languages_of("test_2017_mscoco") == ["de", "en", "fr"]
    assert multi30k.languages_of("train") == ["de", "en", "fr", "cs"]
    assert multi30k.splits_of("de", "cs") == ["train", "val", "test_2016_flickr", "test_2018_flickr"]


@pytest.mark.parametrize(
    "split, lang, expected",
    [
        ("dev", "de", "valid splits: train, val, test_2016_flickr"),
        ("train", "es", "valid languages: de, en, fr, cs"),
        ("test_2017_mscoco", "cs", "languages of test_2017_mscoco: de, en, fr"),
    ],
)
def test_unknown_names_list_the_valid_ones(split, lang, expected):
    with pytest.raises(DataError) as error:
        multi30k_path(split, lang)
    assert expected in str(error.value)


def test_bad_language_pair_fails_before_any_download(server, monkeypatch):
    tiny_file(server.folder, "test_2017_mscoco.de.gz", ["x"], monkeypatch)
    with pytest.raises(DataError, match="no 'cs' text"):
        load_multi30k("test_2017_mscoco", "de", "cs", base_url=server.url)
    assert server.requests == []


# ---- lookup order -------------------------------------------------------------------------------


def test_lookup_order_data_dir_then_env_then_cache(tmp_path, monkeypatch):
    name = "val.de.gz"
    explicit = tiny_file(tmp_path / "explicit", name, ["Hallo"], monkeypatch)
    # The same bytes everywhere, so one recorded sum verifies them all.
    env_copy = tmp_path / "env" / "multi30k" / name
    cache_copy = tmp_path / "cache" / "multi30k" / name
    for copy in (env_copy, cache_copy):
        copy.parent.mkdir(parents=True)
        shutil.copyfile(explicit, copy)
    monkeypatch.setenv("ATTNMT_DATA_DIR", str(tmp_path / "env"))

    assert multi30k_path("val", "de", data_dir=tmp_path / "explicit") == explicit
    assert multi30k_path("val", "de") == env_copy
    # a data_dir without the file falls through to the cache, not to the environment variable
    assert multi30k_path("val", "de", data_dir=tmp_path / "empty") == cache_copy
    monkeypatch.delenv("ATTNMT_DATA_DIR")
    assert multi30k_path("val", "de") == cache_copy


def test_user_file_with_a_wrong_sum_is_refused(tmp_path, monkeypatch):
    path = tiny_file(tmp_path / "data" / "multi30k", "val.en.gz", ["Hello"])
    found = hashlib.sha256(path.read_bytes()).hexdigest()
    monkeypatch.setenv("ATTNMT_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(DataError) as error:
        multi30k_path("val", "en")
    message = str(error.value)
    assert str(path) in message and multi30k.SHA256["val.en.gz"] in message and found in message


def test_no_download_reports_where_it_looked(tmp_path):
    with pytest.raises(DataError) as error:
        multi30k_path("val", "fr", data_dir=tmp_path / "mine", download=False)
    message = str(error.value)
    assert "download is off" in message and str(tmp_path / "mine" / "multi30k" / "val.fr.gz") in message


# ---- download -----------------------------------------------------------------------------------


def test_download_into_cache_then_reuse(tmp_path, server, monkeypatch):
    tiny_file(server.folder, "val.de.gz", ["Ein Hund.", "Eine Katze."], monkeypatch)
    tiny_file(server.folder, "val.en.gz", ["A dog.", "A cat."], monkeypatch)
    monkeypatch.setenv("ATTNMT_MULTI30K_URL", server.url)  # the environment variable route

    corpus = load_multi30k("val", "de", "en")
    assert corpus.src == ["Ein Hund.", "Eine Katze."] and corpus.tgt == ["A dog.", "A cat."]
    assert cache_files(tmp_path) == ["val.de.gz", "val.en.gz"]  # no temporary files left
    assert len(server.requests) == 2

    load_multi30k("val", "de", "en")
    assert len(server.requests) == 2  # served from the cache the second time


def test_corrupted_download_names_both_sums_and_leaves_nothing(tmp_path, server, monkeypatch):
    served = tiny_file(server.folder, "val.de.gz", ["Ein Hund."], monkeypatch)
    expected = multi30k.SHA256["val.de.gz"]
    served.write_bytes(gzip.compress(b"Ein Hunt.\n", mtime=0))  # the server now has other bytes
    found = hashlib.sha256(served.read_bytes()).hexdigest()
    with pytest.raises(DataError) as error:
        multi30k_path("val", "de", base_url=server.url)
    message = str(error.value)
    assert expected in message and found in message and "val.de.gz" in message
    assert cache_files(tmp_path) == []


def test_http_error_names_url_and_where_to_put_the_file(tmp_path, server):
    with pytest.raises(DataError) as error:
        multi30k_path("val", "de", base_url=server.url)
    message = str(error.value)
    assert f"{server.url}/val.de.gz" in message and "HTTP 404" in message
    assert "ATTNMT_DATA_DIR" in message and str(tmp_path / "cache" / "multi30k" / "val.de.gz") in message
    assert cache_files(tmp_path) == []


def test_server_down_names_url_and_where_to_put_the_file(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/raw"
    with pytest.raises(DataError) as error:
        multi30k_path("train", "en", data_dir=tmp_path / "mine", base_url=url)
    message = str(error.value)
    assert f"{url}/train.en.gz" in message and "failed" in message
    assert str(tmp_path / "mine" / "multi30k" / "train.en.gz") in message
    assert cache_files(tmp_path) == []


# ---- the real files -----------------------------------------------------------------------------


@pytest.mark.shared_data
def test_download_of_real_files_from_local_server(tmp_path, server):
    for lang in ("de", "en"):
        shutil.copyfile(shared_data_path("multi30k", f"val.{lang}.gz"), server.folder / f"val.{lang}.gz")
    corpus = load_multi30k("val", "de", "en", base_url=server.url)
    assert len(corpus) == 1014
    assert cache_files(tmp_path) == ["val.de.gz", "val.en.gz"]


@pytest.mark.shared_data
def test_multi30k_train_from_shared_data(monkeypatch):
    shared = shared_data_path()
    shared_data_path("multi30k", "train.de.gz")
    monkeypatch.setenv("ATTNMT_DATA_DIR", str(shared))
    corpus = load_multi30k("train", "de", "en")
    assert len(corpus) == 29_000
    assert corpus.dropped_empty == 0
    assert corpus.src[0] == "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche."
    assert corpus.src_path == shared / "multi30k" / "train.de.gz"
