"""The memory this process may still take, read without torch (the command line checks sizes before
loading it): the least of the machine's available RAM, the room left under the process's address
space limit (``ulimit -v``, RLIMIT_AS) and the room left in its container's cgroup (``memory.max``
of cgroup v2, ``memory.limit_in_bytes`` of v1). A check against the machine's RAM alone passes a
model that a container or ``ulimit -v`` then refuses with an allocation traceback, or kills."""

from __future__ import annotations

import os
from pathlib import Path

try:
    import resource
except ImportError:  # not a Unix: no RLIMIT_AS
    resource = None  # type: ignore[assignment]

__all__ = ["available_ram", "address_space_room", "cgroup_room"]

#: a cgroup limit at or above this is "no limit" (v1 writes 2**63 rounded down to a page)
_NO_LIMIT = 1 << 60
_CGROUP = Path("/sys/fs/cgroup")
_PROC_CGROUP = Path("/proc/self/cgroup")


def available_ram() -> int | None:
    """Bytes this process can still allocate: the least of ``MemAvailable`` (/proc/meminfo), the
    room under RLIMIT_AS and the room in its cgroup; None where none of them can be read (not Linux)."""
    known = [room for room in (_mem_available(), address_space_room(), cgroup_room()) if room is not None]
    return min(known) if known else None


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def address_space_room() -> int | None:
    """Bytes of address space left under the soft RLIMIT_AS (its limit less the process's virtual
    size, /proc/self/statm), or None where there is no limit or it cannot be read."""
    if resource is None:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            virtual = int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
    return max(soft - virtual, 0)


def cgroup_room() -> int | None:
    """Bytes left in this process's memory cgroup: its limit less what it uses, the reclaimable
    page cache (inactive files) counted as free; the tightest of the cgroup and its parents. None
    where no limit is set or none can be read."""
    rooms = []
    for folder, limit_name, usage_name, inactive_name in _cgroup_folders():
        limit = _read_int(folder / limit_name)
        usage = _read_int(folder / usage_name)
        if limit is None or usage is None or limit >= _NO_LIMIT:
            continue
        inactive = _stat_value(folder / "memory.stat", inactive_name) or 0
        rooms.append(max(limit - usage + min(inactive, usage), 0))
    return min(rooms) if rooms else None


def _cgroup_folders() -> list[tuple[Path, str, str, str]]:
    """The memory cgroup folders of this process, itself and its parents: (folder, limit file,
    usage file, the memory.stat key of the inactive page cache)."""
    folders = []
    try:
        lines = _PROC_CGROUP.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    for line in lines:
        number, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if number == "0" and controllers == "":  # cgroup v2: one hierarchy
            base, names = _CGROUP, ("memory.max", "memory.current", "inactive_file")
        elif "memory" in controllers.split(","):  # cgroup v1: the memory hierarchy
            base, names = _CGROUP / "memory", ("memory.limit_in_bytes", "memory.usage_in_bytes",
                                               "total_inactive_file")
        else:
            continue
        relative = Path(path.lstrip("/"))
        candidates = [base / relative, *(base / parent for parent in relative.parents), base]
        for folder in dict.fromkeys(candidates):  # inside a container only the root may exist
            if (folder / names[0]).is_file():
                folders.append((folder, *names))
    return folders


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if text == "max":
        return _NO_LIMIT
    return int(text) if text.isdigit() else None


def _stat_value(path: Path, key: str) -> int | None:
    try:
        for line in path.read_text(encoding="ascii").splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    except (OSError, UnicodeDecodeError):
        pass
    return None
