"""vcrpy cassettes read once: what vcrpy's deserializer made of a file is kept as msgpack,
keyed by the file's bytes and the serializer, so the next run skips the YAML parser.

The cache lives in this user's cache folder (``user_cache``: ``AGENTTAPE_CACHE_DIR``, else
``$XDG_CACHE_HOME/agenttape``, else ``~/.cache/agenttape``; here its ``vcr`` folder). An entry
is replayed as if the cassette held it, so the cache is used only where no one else can have
written it (``user_cache``'s rules); anywhere else the cassette is parsed as before. A file that cannot be read or written there is no
error either. Reading it runs no code (msgpack, never pickle).
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path
from typing import Any

import msgpack

from .._core import user_cache
from .vcr import check_yaml, not_a_cassette

FORMAT = b"agenttape-vcr-cache-1"


def cache_directory() -> Path:
    return user_cache.folder("vcr")


def _serializer_name(serializer: Any) -> bytes:
    name = getattr(serializer, "__name__", None) or type(serializer).__qualname__
    module = getattr(serializer, "__module__", None) or ""
    return f"{module}:{name}".encode()


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
    usable = user_cache.trusted(directory)
    if usable:
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError, msgpack.UnpackException):
            cached = msgpack.unpackb(user_cache.read_private(path), raw=False, strict_map_key=False)
            if cached[0] == FORMAT.decode():
                requests = [Request._from_dict(request) for request in cached[1]]
                return (requests, *cached[2:])
    try:
        loaded = deserialize(content, serializer)
    except (yaml.YAMLError, RecursionError) as exc:
        raise not_a_cassette(name, exc) from None
    with contextlib.suppress(OSError, ValueError, TypeError, OverflowError):
        stored = [FORMAT.decode(), [request._to_dict() for request in loaded[0]], *loaded[1:]]
        user_cache.write_private(path, msgpack.packb(stored, use_bin_type=True), usable)
    return tuple(loaded)
