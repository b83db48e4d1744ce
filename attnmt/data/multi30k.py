"""Multi30k task 1 (Elliott et al., 2016): image captions in German, English, French and Czech.

Each file ``<split>.<lang>.gz`` holds one raw (cased, untokenized) sentence a line; line i of every
language of a split translates line i of the others. Where a file is looked for, in this order:

1. ``data_dir`` when given, else ``$ATTNMT_DATA_DIR`` — the file either directly in that folder or in
   its ``multi30k/`` subfolder;
2. the cache ``${ATTNMT_CACHE_DIR:-~/.cache/attnmt}/multi30k/``;
3. downloaded from ``$ATTNMT_MULTI30K_URL`` (default: the dataset's GitHub repository) into the cache.

Every file, wherever it was found, is checked against the SHA-256 sum below before use (hashing
the largest file, ~640 KB, takes about a millisecond). A download is written to a temporary file
in the cache folder and moved into place only once its sum matches, so an interrupted or corrupted
download never leaves a file behind.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import urllib.error
import urllib.request
from pathlib import Path

from tqdm.auto import tqdm

from attnmt.data.corpus import ParallelCorpus, read_parallel
from attnmt.errors import DataError, OutputError
from attnmt.runtime.atomic_files import atomic_writer

logger = logging.getLogger(__name__)

SPLITS: tuple[str, ...] = (
    "train",
    "val",
    "test_2016_flickr",
    "test_2017_flickr",
    "test_2017_mscoco",
    "test_2018_flickr",
)
LANGUAGES: tuple[str, ...] = ("de", "en", "fr", "cs")

DEFAULT_BASE_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
DATA_DIR_ENV = "ATTNMT_DATA_DIR"
CACHE_DIR_ENV = "ATTNMT_CACHE_DIR"
BASE_URL_ENV = "ATTNMT_MULTI30K_URL"
DOWNLOAD_TIMEOUT_SECONDS = 60

# Upstream file name -> SHA-256 of its bytes. Czech has no 2017 test sets upstream.
SHA256: dict[str, str] = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "train.cs.gz": "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    "val.cs.gz": "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "test_2016_flickr.cs.gz": "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2017_flickr.fr.gz": "3ba671ceb2299f3304ffafefea7a833d08632fbaf0ba18546f8a2ec2391af496",
    "test_2017_mscoco.de.gz": "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
    "test_2017_mscoco.en.gz": "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
    "test_2017_mscoco.fr.gz": "754f3072ba9f124569ba5258b32730fc1d214bbf8e0c6dfb2b74401676220db0",
    "test_2018_flickr.de.gz": "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
    "test_2018_flickr.en.gz": "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
    "test_2018_flickr.fr.gz": "fb2b83fcceb937a4f7e3e93c1c51c22aba92f1e342391e6b5ba392b16a920501",
    "test_2018_flickr.cs.gz": "7d0a9db904f94c554a8c58049a9f3a5357c27f46cc3d710d70cb0b4a2585b8c2",
}


def file_name(split: str, lang: str) -> str:
    """Upstream name of a Multi30k file, e.g. ``train.de.gz``; DataError for an unknown one."""
    if split not in SPLITS:
        raise DataError(f"unknown Multi30k split {split!r}; valid splits: {', '.join(SPLITS)}")
    if lang not in LANGUAGES:
        raise DataError(f"unknown Multi30k language {lang!r}; valid languages: {', '.join(LANGUAGES)}")
    name = f"{split}.{lang}.gz"
    if name not in SHA256:
        raise DataError(
            f"Multi30k has no {lang!r} text for split {split!r}; "
            f"languages of {split}: {', '.join(languages_of(split))}"
        )
    return name


def languages_of(split: str) -> list[str]:
    """The languages Multi30k provides for ``split``, in the order of LANGUAGES."""
    return [lang for lang in LANGUAGES if f"{split}.{lang}.gz" in SHA256]


def splits_of(src_lang: str, tgt_lang: str) -> list[str]:
    """The splits that exist in both languages, in the order of SPLITS."""
    return [split for split in SPLITS if src_lang in languages_of(split) and tgt_lang in languages_of(split)]


def cache_dir() -> Path:
    """``${ATTNMT_CACHE_DIR:-~/.cache/attnmt}/multi30k``."""
    root = os.environ.get(CACHE_DIR_ENV)
    return (Path(root).expanduser() if root else Path.home() / ".cache" / "attnmt") / "multi30k"


def sha256_of(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _user_dirs(data_dir: str | Path | None) -> list[Path]:
    """Folders given by the user (argument, else environment), each with its multi30k/ subfolder."""
    root = data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV)
    if not root:
        return []
    root = Path(root).expanduser()
    return [root / "multi30k", root]


def _verify(path: Path, name: str) -> Path:
    found = sha256_of(path)
    expected = SHA256[name]
    if found != expected:
        raise DataError(
            f"{path}: SHA-256 mismatch for Multi30k file {name}: expected {expected}, found {found}. "
            f"The file is corrupt or another version; delete it (it will be downloaded again) "
            f"or replace it with the upstream file."
        )
    return path


def _where_to_put(name: str, data_dir: str | Path | None) -> str:
    """The advice that ends every "file not available" message."""
    user_dirs = _user_dirs(data_dir)
    if user_dirs:
        origin = "the data_dir you gave" if data_dir is not None else f"${DATA_DIR_ENV}"
        user_place = f"into {user_dirs[0] / name} (from {origin})"
    else:
        user_place = f"into <folder>/multi30k/{name} and set {DATA_DIR_ENV}=<folder>"
    return (
        f"Download it elsewhere and put it by hand {user_place}, or into the cache {cache_dir() / name}; "
        f"or set {BASE_URL_ENV} to a reachable mirror."
    )


def _download(url: str, destination: Path, name: str, data_dir: str | Path | None) -> Path:
    """Fetch ``url`` into ``destination`` atomically, verifying the SHA-256 sum on the way."""
    digest = hashlib.sha256()
    try:
        with atomic_writer(destination) as out:
            try:
                with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_SECONDS) as response:
                    total = response.headers.get("Content-Length")
                    with tqdm(
                        total=int(total) if total and total.isdigit() else None,
                        unit="B",
                        unit_scale=True,
                        unit_divisor=1024,
                        desc=f"download {name}",
                        leave=False,
                    ) as progress:
                        for chunk in iter(lambda: response.read(1 << 16), b""):
                            out.write(chunk)
                            digest.update(chunk)
                            progress.update(len(chunk))
            except urllib.error.HTTPError as error:
                error.close()  # an HTTPError holds the open response
                raise DataError(
                    f"download of {url} failed: HTTP {error.code} {error.reason}. "
                    f"{_where_to_put(name, data_dir)}"
                ) from None
            except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
                reason = getattr(error, "reason", None) or error
                raise DataError(
                    f"download of {url} failed: {reason}. {_where_to_put(name, data_dir)}"
                ) from None
            found = digest.hexdigest()
            if found != SHA256[name]:  # leaving the block with an error keeps nothing
                raise DataError(
                    f"download of {url} gave a file with the wrong SHA-256: expected {SHA256[name]}, "
                    f"found {found}; nothing was saved. {_where_to_put(name, data_dir)}"
                )
    except OutputError as error:  # the download's own errors are DataErrors by now: this is the cache
        raise DataError(
            f"cannot write into the Multi30k cache {destination.parent} ({error}); "
            f"set {CACHE_DIR_ENV} to a writable folder. {_where_to_put(name, data_dir)}"
        ) from None
    logger.info("downloaded %s to %s", url, destination)
    return destination


def multi30k_path(
    split: str,
    lang: str,
    data_dir: str | Path | None = None,
    download: bool = True,
    base_url: str | None = None,
) -> Path:
    """Path of the verified file ``<split>.<lang>.gz``, downloading it into the cache if needed.

    data_dir: folder holding the files (directly or in ``multi30k/``); default ``$ATTNMT_DATA_DIR``.
    download: when False, a file found nowhere raises DataError instead of being fetched.
    base_url: where ``<split>.<lang>.gz`` is downloaded from; default ``$ATTNMT_MULTI30K_URL``, else
        the Multi30k GitHub repository.
    """
    name = file_name(split, lang)
    for folder in _user_dirs(data_dir):
        if (folder / name).is_file():
            return _verify(folder / name, name)
    cached = cache_dir() / name
    if cached.is_file():
        return _verify(cached, name)
    if not download:
        looked = [str(folder / name) for folder in _user_dirs(data_dir)] + [str(cached)]
        raise DataError(
            f"Multi30k file {name} not found (looked in {', '.join(looked)}) and download is off. "
            f"{_where_to_put(name, data_dir)}"
        )
    base = base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
    url = f"{base.rstrip('/')}/{name}"
    logger.info("Multi30k file %s not found locally; downloading %s", name, url)
    return _download(url, cached, name, data_dir)


def load_multi30k(
    split: str,
    src_lang: str,
    tgt_lang: str,
    data_dir: str | Path | None = None,
    download: bool = True,
    base_url: str | None = None,
    max_length: int | None = None,
) -> ParallelCorpus:
    """The ``split`` of Multi30k task 1 as ``src_lang`` → ``tgt_lang`` sentence pairs.

    max_length: drop pairs with more whitespace tokens on a side (None, the default, keeps all).
    """
    # Check both names before fetching either, so a bad pair fails before any download.
    file_name(split, src_lang)
    file_name(split, tgt_lang)
    src_path = multi30k_path(split, src_lang, data_dir=data_dir, download=download, base_url=base_url)
    tgt_path = multi30k_path(split, tgt_lang, data_dir=data_dir, download=download, base_url=base_url)
    return read_parallel(src_path, tgt_path, max_length=max_length)
