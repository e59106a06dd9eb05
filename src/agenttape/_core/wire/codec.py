"""The cassette format: one msgpack map, bodies as bin, read without ever running code.

Layout::

    {"agenttape": 2, "header": {...}, "interactions": [{...}, ...]}

Version 2 adds WebSocket sessions (``frames``, ``closed``); a file without one is written as
version 1, which older readers still read, since they would misread a session only.

Every read error becomes ``CassetteFormatError`` naming the file, so a damaged cassette is
reported, never replayed as empty, and never overwritten.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO

import msgpack

from ..._version import __version__
from ..errors import CassetteFormatError
from ..models import (
    Interaction,
)
from .bounded_msgpack import NESTING, Invalid, budget, describe, extensions, unpack
from .checked_read import ARRAYS, decode_interaction, expect
from .fast_read import SharedPairs, decode_plain
from .stored import LAZY_FROM, LAZY_POSSIBLE, StoredInteractions, decoded_size

FORMAT_VERSION = 2
"""The newest format this version reads and writes: files holding WebSocket sessions."""
PLAIN_FORMAT = 1
"""The format of a file without WebSocket sessions, so that older readers still read it."""
MAGIC_KEY = "agenttape"
_READ_SIZE = 1 << 16

_VERSION = re.compile(r"[0-9]+(?:\.[0-9A-Za-z]+)*(?:[+-][0-9A-Za-z.]+)?")


def encode(header: dict[str, Any], interactions: Sequence[Interaction]) -> bytes:
    return b"".join(encode_pieces(header, interactions))


def encode_pieces(header: dict[str, Any], interactions: Sequence[Interaction]) -> Iterator[bytes]:
    """The cassette as consecutive pieces: the map up to the interactions' array header, then
    one piece per interaction. A writer hands them to the file as they come, so saving never
    builds the whole file in memory (for a few MB, building it costs more than writing it)."""
    packer = msgpack.Packer(use_bin_type=True, datetime=True)
    version = (
        FORMAT_VERSION
        if any(interaction.frames is not None for interaction in interactions)
        else PLAIN_FORMAT
    )
    try:
        yield b"".join(
            (
                packer.pack_map_header(3),
                packer.pack(MAGIC_KEY),
                packer.pack(version),
                packer.pack("header"),
                packer.pack(header),
                packer.pack("interactions"),
                packer.pack_array_header(len(interactions)),
            )
        )
        pack = packer.pack
        for interaction in interactions:
            yield pack(_encode_interaction(interaction))
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"cassette content is not msgpack-serialisable: {exc}") from exc


def check_tags(tags: dict[str, Any]) -> None:
    """Tags go into the header: refuse what cannot be written before anything is recorded,
    not at exit when the run is over."""
    try:
        msgpack.packb(tags, use_bin_type=True, datetime=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(
            f"tags must be msgpack-serialisable (str, int, float, bool, None, bytes, "
            f"lists, dicts, timezone-aware datetimes): {exc}"
        ) from None


def _encode_interaction(interaction: Interaction) -> dict[str, Any]:
    request = interaction.request
    encoded: dict[str, Any] = {
        "boundary": interaction.boundary,
        "started_at": interaction.started_at,
        "ttfb": interaction.ttfb,
        "duration": interaction.duration,
        "request": {
            "method": request.method,
            "url": request.url,
            "headers": request.headers,
            "body": request.body,
        },
    }
    if request.chunks:
        encoded["request"]["chunks"] = request.chunks
    response = interaction.response
    if response is not None:
        encoded["response"] = {
            "status": response.status,
            "reason": response.reason,
            "http_version": response.http_version,
            "headers": response.headers,
            "body": response.body,
            "chunks": response.chunks,
            "truncated": response.truncated,
        }
        if response.trailers:
            encoded["response"]["trailers"] = response.trailers
    if interaction.error is not None:
        error = interaction.error
        encoded["error"] = {"kind": error.kind, "type": error.type, "message": error.message}
    if interaction.frames is not None:
        encoded["frames"] = [
            (f.direction, f.opcode, f.payload, f.offset)
            if f.fin
            else (f.direction, f.opcode, f.payload, f.offset, False)
            for f in interaction.frames
        ]
    if interaction.closed is not None:
        closed = interaction.closed
        encoded["closed"] = {"code": closed.code, "reason": closed.reason, "by": closed.by}
    if interaction.injected is not None:
        encoded["injected"] = interaction.injected
    return encoded


def decode(data: bytes, path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[Interaction]]:
    name = os.fspath(path)
    if not data:
        raise CassetteFormatError(
            f"{name}: the file is empty, not a cassette (delete it to record again)"
        )
    if not (0x80 <= data[0] <= 0x8F or data[0] in (0xDE, 0xDF)):  # a cassette is a msgpack map
        raise CassetteFormatError(
            f"{name}: not an agenttape cassette ({_looks_like(data)}); the file was left as it is"
        )
    try:
        document = unpack(data)
    except Invalid as exc:
        raise CassetteFormatError(f"{name}: {exc}; the file was left as it is") from None
    except Exception as exc:
        raise CassetteFormatError(
            f"{name}: not a readable agenttape cassette ({describe(exc)}); "
            "the file was left as it is"
        ) from None
    try:
        return _decode_document(document, name, len(data))
    except Invalid as exc:
        raise CassetteFormatError(f"{name}: {exc}; the file was left as it is") from None


def decode_stream(
    handle: BinaryIO, *, lazy: bool = False
) -> tuple[dict[str, Any], Sequence[Interaction]] | None:
    """A well-formed cassette read straight from its open file, one interaction at a time.

    Memory stays near the size of the bodies (the file is never held whole beside them), and
    each entry as msgpack gives it is dropped as soon as it is decoded, so loading does not
    leave the garbage collector a large young heap to walk. With ``lazy``, a file whose
    interactions would hold ``LAZY_FROM`` bytes or more decoded is checked whole but kept as
    where each interaction stands in it (``StoredInteractions``). Anything unusual returns None: the caller then reads the
    file whole with ``decode``, which names what is wrong.
    """
    try:
        return _stream(handle, lazy)
    except Exception:  # truncated, malformed, over a limit: ``decode`` says which
        return None


def _stream(handle: BinaryIO, lazy: bool) -> tuple[dict[str, Any], Sequence[Interaction]] | None:
    size = os.fstat(handle.fileno()).st_size
    if not size:
        return None
    limit = max(size // NESTING, 16)
    count = budget(size)  # the same bounds as ``_unpack``: see bounded_msgpack

    def reader() -> msgpack.Unpacker:
        """An unpacker from where ``handle`` stands. Its buffer holds one interaction at a
        time, and at most _LARGEST_BUFFERED bytes: it grows to twice what it must hold, so a
        20 MB body read through it would cost 40 MB more at the peak. An interaction that
        does not fit is read by ``_Large``."""
        # Arrays come back as tuples: a header pair or a chunk entry is kept as read.
        return msgpack.Unpacker(
            handle,
            raw=False,
            use_list=False,
            strict_map_key=True,
            timestamp=3,
            max_buffer_size=min(size, _LARGEST_BUFFERED),
            read_size=min(size, _READ_SIZE),
            max_array_len=limit,
            max_map_len=limit,
            list_hook=count,
            object_hook=count,
            ext_hook=extensions(count),
        )

    unpacker = reader()
    if unpacker.read_map_header() != 3 or unpacker.unpack() != MAGIC_KEY:
        return None
    version = unpacker.unpack()
    if type(version) is not int or not PLAIN_FORMAT <= version <= FORMAT_VERSION:
        return None
    if unpacker.unpack() != "header":
        return None
    header = _as_lists(unpacker.unpack())
    if type(header) is not dict or unpacker.unpack() != "interactions":
        return None
    interactions: list[Interaction] = []
    append, unpack = interactions.append, unpacker.unpack
    entries = unpacker.read_array_header()
    stored = (
        StoredInteractions(os.dup(handle.fileno()), handle.name)
        if lazy and LAZY_POSSIBLE and decoded_size(size, entries) >= LAZY_FROM
        else None
    )
    # Decoded only to be checked and let go, a lazy file's pairs are not worth sharing.
    seen = SharedPairs(0 if stored is not None else size)
    base = 0  # where in the file the unpacker started
    for _ in range(entries):
        start = base + unpacker.tell()
        try:
            raw = unpack()
        except (msgpack.BufferFull, ValueError):  # larger than the buffer
            handle.seek(start)
            raw = _Large(handle, size, count, limit).value(0)
            base = handle.tell()
            unpacker = reader()
            unpack = unpacker.unpack
        interaction = decode_plain(raw, seen)
        if interaction is None:
            return None
        if stored is None:
            append(interaction)
        else:
            stored.note(interaction, start, base + unpacker.tell())
    if base + unpacker.tell() != size:
        return None
    return header, interactions if stored is None else stored


class _Unusual(Exception):
    """What ``_Large`` does not read (an extension value, a deep nest, a short file): the
    caller reads the file whole, and says what is wrong with it, if anything."""


_LARGEST_BUFFERED = 1 << 20
_DEEPEST_LARGE = 32
_FIXED = {0xC0: None, 0xC2: False, 0xC3: True}
_SCALARS = {
    0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
    0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
}  # fmt: skip
_LENGTHS = {0xC4: ">B", 0xC5: ">H", 0xC6: ">I", 0xD9: ">B", 0xDA: ">H", 0xDB: ">I"}
_COUNTS = {0xDC: ">H", 0xDD: ">I", 0xDE: ">H", 0xDF: ">I"}


class _Large:
    """One interaction read straight from the file, as msgpack's unpacker would give it
    (arrays as tuples, the same limits), each body read into its own bytes at once: never
    through a buffer of its size beside it."""

    __slots__ = ("count", "end", "handle", "limit")

    def __init__(self, handle: BinaryIO, end: int, count: Callable[[Any], Any], limit: int) -> None:
        self.handle, self.end, self.count, self.limit = handle, end, count, limit

    def read(self, size: int) -> bytes:
        # A length is checked against what the file holds before anything is allocated.
        if size > self.end - self.handle.tell():
            raise _Unusual("the file is truncated")
        return self.handle.read(size)

    def number(self, layout: str) -> Any:
        return struct.unpack(layout, self.read(struct.calcsize(layout)))[0]

    def value(self, depth: int) -> Any:
        kind = self.read(1)[0]
        if kind <= 0x7F:
            return kind
        if kind >= 0xE0:
            return kind - 0x100
        if 0xA0 <= kind <= 0xBF:
            return self.read(kind & 0x1F).decode()
        if kind in _FIXED:
            return _FIXED[kind]
        if kind in _SCALARS:
            return self.number(_SCALARS[kind])
        if kind in _LENGTHS:
            data = self.read(self.number(_LENGTHS[kind]))
            return data if kind <= 0xC6 else data.decode()
        if depth >= _DEEPEST_LARGE:
            raise _Unusual("nested too deep")
        if kind <= 0x9F:
            items = kind & 0x0F
        elif kind in _COUNTS:
            items = self.number(_COUNTS[kind])
        else:
            raise _Unusual(f"type byte {kind:#x}")
        if items > self.limit:
            raise _Unusual("too many items")
        if kind <= 0x8F or kind >= 0xDE:
            mapping = {}
            for _ in range(items):
                key = self.value(depth + 1)
                if type(key) is not str:
                    raise _Unusual("a map key that is no string")
                mapping[key] = self.value(depth + 1)
            return self.count(mapping)
        return self.count(tuple(self.value(depth + 1) for _ in range(items)))


def _as_lists(value: Any) -> Any:
    """The header as ``decode`` gives it: arrays as lists."""
    if type(value) is tuple:
        return [_as_lists(item) for item in value]
    if type(value) is dict:
        return {key: _as_lists(item) for key, item in value.items()}
    return value


def _looks_like(data: bytes) -> str:
    start = data[:512].lstrip()
    if start[:1] in (b"{", b"["):
        return "it holds JSON, such as a HAR file or an export"
    if start and all(byte in b"\t\n\r" or 32 <= byte < 127 for byte in start):
        return "it holds text: a vcrpy YAML cassette? agenttape import-vcr converts those"
    return "it does not begin with a cassette's msgpack map"


def _decode_document(
    document: Any, name: str, size: int
) -> tuple[dict[str, Any], list[Interaction]]:
    if not isinstance(document, dict) or MAGIC_KEY not in document:
        raise Invalid("not an agenttape cassette (no format marker)")
    version = document[MAGIC_KEY]
    if not isinstance(version, int) or isinstance(version, bool):
        raise Invalid(f"format marker is {version!r}, expected a whole number")
    if version > FORMAT_VERSION:
        # Checked before anything else: a newer format may lay out everything differently.
        header = document.get("header")
        writer = header.get("agenttape_version") if isinstance(header, dict) else None
        if isinstance(writer, str) and _VERSION.fullmatch(writer):
            who, command = f"agenttape {writer}", f'pip install -U "agenttape-recorder>={writer}"'
        else:
            who, command = "a newer agenttape", "pip install -U agenttape-recorder"
        raise Invalid(
            f"written in cassette format {version} by {who}; this agenttape {__version__} "
            f"reads format {FORMAT_VERSION}: upgrade with '{command}'"
        )
    header = _as_lists(expect(document.get("header"), dict, "header"))
    if version < 1:
        raise Invalid(f"unknown cassette format {version}")
    raw_interactions = expect(document.get("interactions"), ARRAYS, "interactions")
    interactions = []
    seen = SharedPairs(size)
    for index, raw in enumerate(raw_interactions):
        interaction = decode_plain(raw, seen)
        if interaction is None:
            try:
                interaction = decode_interaction(raw)
            except Invalid as exc:
                raise Invalid(f"interaction {index}: {exc}") from None
        interactions.append(interaction)
    return header, interactions
