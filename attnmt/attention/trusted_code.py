"""The code of user mechanisms this user has trained with on this machine: a list of SHA-256s kept
outside every run folder, so that a run trained here loads again without ``--trust-run-code``,
while a run from anyone else (or one edited to name other code) does not.

A run keeps its mechanism's source (``attnmt.attention.provenance.CodeRecord``). When ``attnmt train``
starts a new run with a mechanism the user named, the SHA-256 of that source is added here; when a
run is loaded, its kept source runs without asking only if its own SHA-256 (computed from the text,
never read from the record) is listed. Editing a run cannot add a line to this file, which is the
whole point: it plays the part of Jupyter's notebook signatures.

The file is ``$ATTNMT_TRUSTED_CODE`` when that is set, else
``$XDG_DATA_HOME/attnmt/trusted-code.txt`` (``~/.local/share/attnmt/trusted-code.txt``). Each line
is ``<sha256>  <spec>``, as ``sha256sum`` writes it; delete a line (or the file) to withdraw trust.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["TRUST_FILE_VARIABLE", "is_trusted", "remember", "trust_file"]

#: the environment variable that moves the list (tests point it into a temporary folder)
TRUST_FILE_VARIABLE = "ATTNMT_TRUSTED_CODE"
_LINE = re.compile(r"^([0-9a-f]{64})\s")


def trust_file() -> Path:
    """Where the list lives (see the module docstring)."""
    named = os.environ.get(TRUST_FILE_VARIABLE)
    if named:
        return Path(named).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "attnmt" / "trusted-code.txt"


def _listed() -> set[str]:
    try:
        text = trust_file().read_text(encoding="utf-8", errors="replace")
    except OSError:  # no list yet, or one this process cannot read: nothing is trusted
        return set()
    return {match.group(1) for match in map(_LINE.match, text.splitlines()) if match}


def is_trusted(sha256: str) -> bool:
    """Whether code with this SHA-256 was trained with by this user on this machine."""
    return sha256 in _listed()


def remember(sha256: str, spec: str) -> str | None:
    """List ``sha256`` (the code of ``spec``) as trusted; None when done, else why it could not be
    (a read-only home, say): the run then loads with ``--trust-run-code`` only."""
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise ValueError(f"remember: not a SHA-256: {sha256!r}")
    if is_trusted(sha256):
        return None
    path = trust_file()
    line = f"{sha256}  {' '.join(spec.split())}\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:  # one short append: whole even beside another
            handle.write(line)
    except OSError as error:
        return f"cannot add the code of {spec!r} to {path} ({error.strerror or error})"
    return None
