"""Permissions of files written atomically: a temporary file or directory (``tempfile`` makes them
private, 0600 / 0700) renamed into place should end up as an ``open`` or ``mkdir`` would have made it,
0666 / 0777 less the process's umask (0644 / 0755 with the usual 022), so a group can read a shared model."""

from __future__ import annotations

import os
from pathlib import Path


def current_umask() -> int:
    """The process's umask, read without changing it where Linux shows it (``/proc/self/status``); else
    set and restored at once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def give_usual_mode(path: str | os.PathLike) -> None:
    """chmod ``path`` (a file or a directory) to what a plain ``open`` / ``mkdir`` gives under the umask."""
    base = 0o777 if os.path.isdir(path) else 0o666
    os.chmod(path, base & ~current_umask())
