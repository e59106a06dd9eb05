"""msgpack read within bounded memory: a hostile file cannot make its reader use more than a
small multiple of its own size, nest without end, or run code (no extension type is
interpreted)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import msgpack

# msgpack sizes a list by its declared length before reading its items, and nests up to 1024
# deep: declared lengths are capped so that pre-allocation stays within a few times the file
# size (a larger list is then read item by item), and a file may hold at most one list, map
# or extension value per few bytes, so a hostile file cannot make its reader use more than a
# small multiple of its own size.
NESTING = 1024
_BYTES_PER_CONTAINER = 4
_CONTAINER_SLACK = 1024
_MAX_WALK_DEPTH = 128
_ARRAY_TYPES = frozenset([*range(0x90, 0xA0), 0xDC, 0xDD])
_MAP_TYPES = frozenset([*range(0x80, 0x90), 0xDE, 0xDF])


class Invalid(Exception):
    """Raised inside the decoder; turned into CassetteFormatError with the file name."""


_T = TypeVar("_T")


def budget(size: int) -> Callable[[_T], _T]:
    """A hook for every list, map and extension value read: it hands the value back, and
    stops a file that holds more of them than a cassette of its size can. A closure, since
    it runs for every container of a file and a cell is the cheapest counter to reach."""
    left = size // _BYTES_PER_CONTAINER + _CONTAINER_SLACK

    def count(value: _T) -> _T:
        nonlocal left
        left -= 1
        if left < 0:
            raise Invalid("holds more lists and maps than a cassette of its size can")
        return value

    return count


def extensions(count: Callable[[msgpack.ExtType], msgpack.ExtType]) -> Any:
    return lambda code, data: count(msgpack.ExtType(code, data))


def unpack(data: bytes) -> Any:
    """The msgpack document in ``data``, read within bounded memory (see NESTING)."""
    limit = max(len(data) // NESTING, 16)
    count = budget(len(data))
    try:
        return msgpack.unpackb(
            data,
            raw=False,
            use_list=False,
            strict_map_key=True,
            timestamp=3,
            max_array_len=limit,
            max_map_len=limit,
            list_hook=count,
            object_hook=count,
            ext_hook=extensions(count),
        )
    except ValueError as exc:
        if "exceeds max_" not in str(exc):
            raise
    return walk(data)


def walk(data: bytes) -> Any:
    """Reads lists and maps item by item from their headers, so a declared length costs
    nothing until the items are really there; only scalars go through msgpack whole."""
    count = budget(len(data))
    unpacker = msgpack.Unpacker(
        raw=False,
        timestamp=3,
        max_buffer_size=max(len(data), 1),
        max_array_len=0,
        max_map_len=0,
        ext_hook=extensions(count),
    )
    unpacker.feed(data)

    def value(depth: int) -> Any:
        position = unpacker.tell()
        kind = data[position] if position < len(data) else None
        if kind not in _ARRAY_TYPES and kind not in _MAP_TYPES:
            return unpacker.unpack()
        if depth >= _MAX_WALK_DEPTH:
            raise Invalid(f"values nested deeper than {_MAX_WALK_DEPTH} levels")
        count(None)
        if kind in _ARRAY_TYPES:
            items = []
            for _ in range(unpacker.read_array_header()):
                items.append(value(depth + 1))
            return items
        mapping = {}
        for _ in range(unpacker.read_map_header()):
            key = value(depth + 1)
            if not isinstance(key, (str, bytes)):
                raise Invalid(f"a map key is {type(key).__name__}, expected str")
            mapping[key] = value(depth + 1)
        return mapping

    document = value(0)
    if unpacker.tell() != len(data):
        raise Invalid("unexpected data after the end of the cassette")
    return document


def describe(exc: Exception) -> str:
    if isinstance(exc, msgpack.ExtraData):
        return "unexpected data after the end of the cassette"
    if isinstance(exc, msgpack.OutOfData) or (
        isinstance(exc, ValueError) and "incomplete" in str(exc).lower()
    ):
        return "the file is truncated"
    return f"{type(exc).__name__}: {exc}"
