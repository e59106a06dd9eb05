"""This user's cache folder: what agenttape keeps between runs to skip work done before
(parsed vcrpy cassettes, the footers of run index files).

What it holds is used as if freshly read, so it is read and written only where no one else
can have written it: a folder this user owns that others cannot write (made 0700 when it does
not exist yet), and entries of this user's that others cannot write. Anywhere else (a shared
CI cache, a folder of another user's, a platform without POSIX owners) it is neither read nor
written. The folder is ``AGENTTAPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/agenttape``, else
``~/.cache/agenttape``; one folder below it for each kind of entry.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from .files import replacing

OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def folder(kind: str) -> Path:
    """The folder for one kind of entry."""
    given = os.environ.get("AGENTTAPE_CACHE_DIR")
    if given:
        return Path(given) / kind
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "agenttape" / kind


def private(info: os.stat_result) -> bool:
    """This user's, and no one else's to write."""
    return info.st_uid == os.geteuid() and not info.st_mode & OTHERS_WRITE


def trusted(directory: Path) -> bool:
    """Whether the cache folder is this user's alone to write, so what it holds was put
    there by this user (False where it does not exist, or owners cannot be told)."""
    if not hasattr(os, "geteuid"):
        return False
    try:
        info = os.stat(directory)
    except (OSError, ValueError):
        return False
    return stat.S_ISDIR(info.st_mode) and private(info)


def read_private(path: Path) -> bytes:
    """The entry's bytes, when it is a plain file of this user's that no one else can have
    written (never through a link); else OSError."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(descriptor)
        if not (stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and private(info)):
            raise PermissionError(f"{path} may have been written by another user")
        return handle.read()


def write_private(path: Path, data: bytes, usable: bool) -> bool:
    """Atomically, into the cache folder (``usable``: found trusted), made private (0700)
    when it does not exist yet; into none that is not this user's alone. Whether it was
    written."""
    directory = path.parent
    if not usable:
        if directory.exists():
            return False  # there, but open to others or not this user's: left alone
        directory.mkdir(parents=True, mode=0o700)
        if not trusted(directory):
            return False
    descriptor, temporary = tempfile.mkstemp(dir=directory, suffix=".tmp")
    with replacing(temporary, path), os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
    return True
