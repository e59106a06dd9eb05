"""One writer at a time per cassette directory, across processes (pytest-xdist workers,
parallel test runs), so a save can merge what another process appended meanwhile.

POSIX: ``flock`` on the directory itself, which the kernel releases when a holder dies and
which leaves no file behind. Elsewhere, or where the directory cannot be locked (some network
file systems): an exclusive lock file beside the cassette, taken over when a dead holder left
it behind longer than ``STALE_AFTER`` seconds ago.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from .errors import CassetteWriteError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

STALE_AFTER = 60.0
WAIT = 120.0


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Holds the lock that serialises writers of ``path`` for the duration of the block."""
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    if fcntl is not None:
        try:
            descriptor = os.open(directory, os.O_RDONLY)
        except OSError:
            descriptor = -1
        if descriptor >= 0:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX)
            except OSError:
                os.close(descriptor)
            else:
                try:
                    yield
                finally:
                    os.close(descriptor)  # closing releases the lock
                return
    with _lock_file(directory / f".{path.name}.lock"):
        yield


@contextlib.contextmanager
def _lock_file(lock: Path) -> Iterator[None]:
    deadline = time.monotonic() + WAIT
    while True:
        try:
            descriptor = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            with contextlib.suppress(OSError):
                if time.time() - lock.stat().st_mtime > STALE_AFTER:
                    lock.unlink()
                    continue
            if time.monotonic() > deadline:
                raise CassetteWriteError(
                    f"cannot lock {lock}: another process has held it for over {WAIT:.0f} s; "
                    "delete the file if no agenttape process is running"
                ) from None
            time.sleep(0.01)
        except OSError as exc:
            raise CassetteWriteError(f"cannot lock {lock}: {exc}") from exc
        else:
            os.close(descriptor)
            break
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            lock.unlink()
