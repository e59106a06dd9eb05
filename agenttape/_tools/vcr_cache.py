"""vcrpy cassettes read once: what vcrpy's deserializer made of a file is kept as msgpack,
keyed by the file's bytes and the serializer, so the next run skips the YAML parser.

The cache lives in this user's cache folder (``AGENTTAPE_CACHE_DIR``, else
``$XDG_CACHE_HOME/agenttape/vcr``, else ``~/.cache/agenttape/vcr``), private to the user. A
file that cannot be read or written there is no error: the cassette is parsed as before.
Reading it runs no code (msgpack, never pickle).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

import msgpack

from .._core.files import replacing

FORMAT = b"agenttape-vcr-cache-1"


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


def deserialize_cached(content: str, serializer: Any) -> tuple[Any, ...]:
    """``vcr.serialize.deserialize(content, serializer)``, from the cache when this content
    was read before through the same serializer."""
    from vcr.request import Request
    from vcr.serialize import deserialize

    data = content.encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(data + b"\0" + _serializer_name(serializer), digest_size=20)
    path = cache_directory() / f"{digest.hexdigest()}.msgpack"
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError, msgpack.UnpackException):
        cached = msgpack.unpackb(path.read_bytes(), raw=False, strict_map_key=False)
        if cached[0] == FORMAT.decode():
            requests = [Request._from_dict(request) for request in cached[1]]
            return (requests, *cached[2:])
    loaded = deserialize(content, serializer)
    with contextlib.suppress(OSError, ValueError, TypeError, OverflowError):
        stored = [FORMAT.decode(), [request._to_dict() for request in loaded[0]], *loaded[1:]]
        _write(path, msgpack.packb(stored, use_bin_type=True))
    return tuple(loaded)


def _write(path: Path, data: bytes) -> None:
    """Atomically, into a folder of this user's alone."""
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    descriptor, temporary = tempfile.mkstemp(dir=directory, suffix=".tmp")
    with replacing(temporary, path), os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
