"""The machine's free memory, read without torch (the command line checks sizes before loading it)."""

from __future__ import annotations

__all__ = ["available_ram"]


def available_ram() -> int | None:
    """Bytes of RAM available for new allocations (``MemAvailable`` of /proc/meminfo), or None where
    it cannot be read (not Linux)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
