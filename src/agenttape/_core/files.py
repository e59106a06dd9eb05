"""Cassette files on disk: written atomically, read without ever running code.

A write goes to a temporary file that is fsynced and renamed over the old one, so a reader
sees the old file or the new one, never half of either; temporaries a killed writer left
behind are swept once they are old.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from .errors import CassetteFormatError, CassetteNotFoundError, CassetteWriteError
from .models import Interaction
from .wire import codec

STALE_TEMPORARY = 3600.0  # seconds: no write of a cassette takes this long


def write_atomic(path: Path, data: bytes | Iterable[bytes]) -> None:
    """Temporary file, fsync, rename: readers see the old file or the new one, never half.

    ``data`` may come in pieces (``codec.encode_pieces``); an error while producing them
    leaves the file it would replace untouched, as any other failed write does. A path that
    is a symbolic link is written where the link points: the link stays.
    """
    path = Path(os.path.realpath(path))
    directory = path.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = _create_temporary(path)
    except OSError as exc:
        raise CassetteWriteError(f"cannot write cassette {path}: {exc}") from exc
    try:
        # A cassette is a shared artefact: it keeps the mode of the file it replaces; a new
        # one has the mode the process's umask gives any new file as it is written.
        mode = _existing_mode(path)
        if mode is not None:
            os.fchmod(descriptor, mode)
        with os.fdopen(descriptor, "wb", buffering=_WRITE_BUFFER) as handle:
            if isinstance(data, bytes):
                handle.write(data)
            else:
                handle.writelines(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise CassetteWriteError(f"cannot write cassette {path}: {exc}") from exc
        raise
    with contextlib.suppress(OSError):
        directory_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(directory_fd)
        finally:
            os.close(directory_fd)
    _sweep_temporaries(path)


@contextlib.contextmanager
def replacing(temporary: str, path: str | os.PathLike[str]) -> Iterator[None]:
    """Renames ``temporary`` onto ``path`` once the block has written (and closed) it; when
    the block fails, removes ``temporary`` and lets the error through."""
    try:
        yield
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def check_writable(path: Path) -> None:
    """Raises ``CassetteWriteError`` now when ``path`` could not be written at the end: its
    folder cannot be created, or no file can be created in it. A recording checks this when
    it starts, before any live call is made and paid for. Creates the folder, as the write
    would."""
    path = Path(os.path.realpath(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = _create_temporary(path)
    except OSError as exc:
        raise CassetteWriteError(
            f"cannot write cassette {path}: {exc}. Nothing was recorded: choose a path in a "
            "folder this process can write, or make this one writable"
        ) from exc
    os.close(descriptor)
    with contextlib.suppress(OSError):
        os.unlink(temporary)


# Pieces are gathered into writes of this size: few system calls, and a buffer small
# enough for the allocator to reuse rather than map fresh pages for on every save.
_WRITE_BUFFER = 1 << 17


def _existing_mode(path: Path) -> int | None:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None


_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)


@contextlib.contextmanager
def keeping_previous(path: Path, target: Path) -> Iterator[None]:
    """Once the block has replaced the file at ``path``, the file it replaced is at
    ``target``; a block that fails leaves nothing beside it. The old file is linked there,
    not copied, where the file system has hard links."""
    source, target = Path(os.path.realpath(path)), Path(os.path.realpath(target))
    data: bytes | None = None
    try:
        linked: str | None = _temporary_beside(target, lambda name: os.link(source, name))[1]
    except OSError:
        linked, data = None, read_bytes(source)
    try:
        yield
    except BaseException:
        if linked is not None:
            with contextlib.suppress(OSError):
                os.unlink(linked)
        raise
    if linked is None:
        assert data is not None
        write_atomic(target, data)
        return
    try:
        os.replace(linked, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(linked)
        raise CassetteWriteError(f"cannot write cassette {target}: {exc}") from exc


def _create_temporary(path: Path) -> tuple[int, str]:
    """A new, unpredictably named file beside ``path``, created 0666 so the kernel applies
    the umask in force now (reading the umask would change it, for every thread, a moment)."""
    return _temporary_beside(
        path, lambda name: os.open(name, _CREATE | getattr(os, "O_BINARY", 0), 0o666)
    )


_T = TypeVar("_T")


def _temporary_beside(path: Path, make: Callable[[str], _T]) -> tuple[_T, str]:
    """``make`` run on a new, unpredictably named temporary beside ``path`` (which the sweep
    of ``path``'s temporaries finds), until a name is free."""
    for _ in range(100):
        temporary = str(path.parent / f".{path.name}.{os.urandom(6).hex()}.tmp")
        try:
            return make(temporary), temporary
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


def _sweep_temporaries(path: Path) -> None:
    """Deletes temporary files of ``path`` that a writer killed mid-write left behind; only
    old ones, so another process's write in progress is never touched."""
    prefix, cutoff = f".{path.name}.", time.time() - STALE_TEMPORARY
    with contextlib.suppress(OSError), os.scandir(path.parent) as entries:
        for entry in entries:
            if entry.name.startswith(prefix) and entry.name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(entry.path)


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise CassetteNotFoundError(f"cassette {os.fspath(path)} does not exist") from None
    except IsADirectoryError:
        raise CassetteFormatError(f"{os.fspath(path)}: is a directory, not a cassette") from None


def digest(data: bytes) -> bytes:
    import hashlib  # only ``new_episodes`` compares digests: most loads never need OpenSSL

    return hashlib.blake2b(data, digest_size=16).digest()


def read(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[Interaction]]:
    """The cassette at ``path``, every interaction decoded."""
    header, interactions = _read(path, lazy=False)
    assert isinstance(interactions, list)
    return header, interactions


def read_lazily(path: str | os.PathLike[str]) -> tuple[dict[str, Any], Sequence[Interaction]]:
    """The cassette at ``path``; a large one's interactions are decoded when asked for
    (``codec.decode_stream``)."""
    return _read(path, lazy=True)


def _read(
    path: str | os.PathLike[str], *, lazy: bool
) -> tuple[dict[str, Any], Sequence[Interaction]]:
    try:
        with open(path, "rb") as handle:
            streamed = codec.decode_stream(handle, lazy=lazy)
    except (FileNotFoundError, IsADirectoryError):
        streamed = None  # reading the bytes below raises the error that says so
    if streamed is not None:
        return streamed
    return codec.decode(read_bytes(path), path)
