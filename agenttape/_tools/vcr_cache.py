"""vcrpy cassettes read once: what vcrpy's deserializer made of a file is kept as msgpack,
keyed by the file's bytes and the serializer, so the next run skips the YAML parser.

The cache lives in this user's cache folder (``AGENTTAPE_CACHE_DIR``, else
``$XDG_CACHE_HOME/agenttape/vcr``, else ``~/.cache/agenttape/vcr``). An entry is replayed as
if the cassette held it, so the cache is used only where no one else can have written it:
a folder this user owns that others cannot write (made 0700 when it does not exist yet),
and entries of this user's that others cannot write. Anywhere else (a shared CI cache, a
folder of another user's, a platform without POSIX owners) it is neither read nor written,
and the cassette is parsed as before. A file that cannot be read or written there is no
error either. Reading it runs no code (msgpack, never pickle).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import msgpack

from .._core.files import replacing
from .vcr import check_yaml, not_a_cassette

FORMAT = b"agenttape-vcr-cache-1"
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def cache_directory() -> Path:
    given = os.environ.get("AGENTTAPE_CACHE_DIR")
    if given:
        return Path(given) / "vcr"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "agenttape" / "vcr"


def _serializer_name(serializer: Any) -> bytes:
    name = getattr(serializer, "__name__", None) or type(serializer).__qualname__
    module = getattr(serializer, "__module__", None) or ""
    return f"{module}:{name}".encode()


def _private(info: os.stat_result) -> bool:
    """This user's, and no one else's to write."""
    return info.st_uid == os.geteuid() and not info.st_mode & _OTHERS_WRITE


def trusted(directory: Path) -> bool:
    """Whether the cache folder is this user's alone to write, so what it holds was put
    there by this user (False where it does not exist, or owners cannot be told)."""
    if not hasattr(os, "geteuid"):
        return False
    try:
        info = os.stat(directory)
    except (OSError, ValueError):
        return False
    return stat.S_ISDIR(info.st_mode) and _private(info)


def deserialize_cached(content: str, serializer: Any, name: str) -> tuple[Any, ...]:
    """``vcr.serialize.deserialize(content, serializer)`` of the file ``name``, from the
    cache when this content was read before through the same serializer. Unless the
    serializer is vcrpy's JSON one, the text is first held to the bounds ``import-vcr``
    holds YAML to (``check_yaml``), cached or not; what the parser refuses (a nesting past
    its depth) is refused naming the file."""
    import yaml
    from vcr.request import Request
    from vcr.serialize import deserialize
    from vcr.serializers import jsonserializer

    if serializer is not jsonserializer:
        check_yaml(content, name)
    data = content.encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(data + b"\0" + _serializer_name(serializer), digest_size=20)
    directory = cache_directory()
    path = directory / f"{digest.hexdigest()}.msgpack"
    usable = trusted(directory)
    if usable:
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError, msgpack.UnpackException):
            cached = msgpack.unpackb(_read_private(path), raw=False, strict_map_key=False)
            if cached[0] == FORMAT.decode():
                requests = [Request._from_dict(request) for request in cached[1]]
                return (requests, *cached[2:])
    try:
        loaded = deserialize(content, serializer)
    except (yaml.YAMLError, RecursionError) as exc:
        raise not_a_cassette(name, exc) from None
    with contextlib.suppress(OSError, ValueError, TypeError, OverflowError):
        stored = [FORMAT.decode(), [request._to_dict() for request in loaded[0]], *loaded[1:]]
        _write(path, msgpack.packb(stored, use_bin_type=True), usable)
    return tuple(loaded)


def _read_private(path: Path) -> bytes:
    """The entry's bytes, when it is a plain file of this user's that no one else can have
    written (never through a link); else OSError."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(descriptor)
        if not (stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and _private(info)):
            raise PermissionError(f"{path} may have been written by another user")
        return handle.read()


def _write(path: Path, data: bytes, usable: bool) -> None:
    """Atomically, into the cache folder, made private (0700) when it does not exist yet;
    into none that is not this user's alone."""
    directory = path.parent
    if not usable:
        if directory.exists():
            return  # there, but open to others or not this user's: left alone
        directory.mkdir(parents=True, mode=0o700)
        if not trusted(directory):
            return
    descriptor, temporary = tempfile.mkstemp(dir=directory, suffix=".tmp")
    with replacing(temporary, path), os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
