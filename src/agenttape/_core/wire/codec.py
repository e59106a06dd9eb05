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
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, cast

import msgpack

from ..._version import __version__
from ..errors import CassetteFormatError
from ..models import (
    OPCODE_NUMBERS,
    Closed,
    Direction,
    Failure,
    FailureKind,
    Frame,
    Headers,
    Interaction,
    Opcode,
    Request,
    Response,
)
from .bounded_msgpack import NESTING, Invalid, budget, describe, extensions, unpack

FORMAT_VERSION = 2
"""The newest format this version reads and writes: files holding WebSocket sessions."""
PLAIN_FORMAT = 1
"""The format of a file without WebSocket sessions, so that older readers still read it."""
_DIRECTIONS: frozenset[str] = frozenset(("client", "server"))
MAGIC_KEY = "agenttape"
_READ_SIZE = 1 << 16

_BYTES_PER_SHARED_PAIR = 64
_EARLIEST, _LATEST = -62135596800.0, 253402300799.0  # 0001-01-01 and 9999-12-31, UTC
LONGEST_WAIT = 7 * 24 * 3600.0
"""The longest a recorded time (first byte, total, a chunk's offset) may be: realtime replay
waits for these, and a file must not make it wait for ever (1e9 s) or fail (1e300 s)."""
STATUSES = range(100, 1000)
"""A status line holds three digits; anything else is no status a library can be handed."""
_VERSION = re.compile(r"[0-9]+(?:\.[0-9A-Za-z]+)*(?:[+-][0-9A-Za-z.]+)?")


def encode(header: dict[str, Any], interactions: list[Interaction]) -> bytes:
    return b"".join(encode_pieces(header, interactions))


def encode_pieces(header: dict[str, Any], interactions: list[Interaction]) -> Iterator[bytes]:
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


def decode_stream(handle: BinaryIO) -> tuple[dict[str, Any], list[Interaction]] | None:
    """A well-formed cassette read straight from its open file, one interaction at a time.

    Memory stays near the size of the bodies (the file is never held whole beside them), and
    each entry as msgpack gives it is dropped as soon as it is decoded, so loading does not
    leave the garbage collector a large young heap to walk. Anything unusual returns None:
    the caller then reads the file whole with ``decode``, which names what is wrong.
    """
    try:
        return _stream(handle)
    except Exception:  # truncated, malformed, over a limit: ``decode`` says which
        return None


def _stream(handle: BinaryIO) -> tuple[dict[str, Any], list[Interaction]] | None:
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
    seen = _SharedPairs(size)
    base = 0  # where in the file the unpacker started
    for _ in range(unpacker.read_array_header()):
        start = base + unpacker.tell()
        try:
            raw = unpack()
        except (msgpack.BufferFull, ValueError):  # larger than the buffer
            handle.seek(start)
            raw = _Large(handle, size, count, limit).value(0)
            base = handle.tell()
            unpacker = reader()
            unpack = unpacker.unpack
        interaction = _decode_plain(raw, seen)
        if interaction is None:
            return None
        append(interaction)
    if base + unpacker.tell() != size:
        return None
    return header, interactions


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
    header = _as_lists(_expect(document.get("header"), dict, "header"))
    if version < 1:
        raise Invalid(f"unknown cassette format {version}")
    raw_interactions = _expect(document.get("interactions"), _ARRAYS, "interactions")
    interactions = []
    seen = _SharedPairs(size)
    for index, raw in enumerate(raw_interactions):
        interaction = _decode_plain(raw, seen)
        if interaction is None:
            try:
                interaction = _decode_interaction(raw)
            except Invalid as exc:
                raise Invalid(f"interaction {index}: {exc}") from None
        interactions.append(interaction)
    return header, interactions


_NUMBERS = (int, float)
_ARRAYS = (list, tuple)
Header = tuple[str, str]


class _SharedPairs(dict[Header | str, Header | str]):
    """The header pairs and short words (methods, reasons, versions, boundaries) met so far
    in a file, each to be kept once. Most repeat from one entry to the next; the copies freed
    at once leave less memory held, fewer objects and pages to the allocator and the garbage
    collector. At most one is kept per _BYTES_PER_SHARED_PAIR bytes of the file, so a file of
    all-different ones cannot make the table break the memory bound."""

    __slots__ = ("room",)

    def __init__(self, size: int) -> None:
        super().__init__()
        self.room = size // _BYTES_PER_SHARED_PAIR


def _shared(seen: _SharedPairs, text: str) -> str:
    """``text``, or the equal string met before in the same file."""
    known = seen.get(text)
    if known is not None:
        return cast(str, known)
    if seen.room:
        seen.room -= 1
        seen[text] = text
    return text


def _plain_headers(value: Any, seen: _SharedPairs) -> Headers | None:
    """Header pairs with the checks inlined; None sends the caller to the checks that name
    what is wrong. A pair read as a tuple (the streaming reader) is replaced by the equal
    pair in ``seen``, if any; pairs read as lists (the whole-file reader) become tuples."""
    kind = type(value)
    if kind is tuple:
        # Sized exactly (a list grown from an iterator keeps spare room): one per interaction.
        pairs: list[Any] = list(value)
        try:
            pairs[:] = map(seen.get, value)
        except TypeError:  # an item that cannot be hashed is no header pair
            return None
        if None in pairs:
            for index, known in enumerate(pairs):
                if known is None:
                    pair = value[index]
                    if type(pair) is not tuple or len(pair) != 2:
                        return None
                    name, text = pair
                    if type(name) is not str or type(text) is not str:
                        return None
                    if not (name.isascii() and text.isascii()) and not (
                        _latin1(name) and _latin1(text)
                    ):
                        return None
                    if seen.room:
                        seen.room -= 1
                        seen[pair] = pair
                    pairs[index] = pair
        return pairs
    if kind is not list:
        return None
    for pair in value:
        if type(pair) is not list or len(pair) != 2:
            return None
        name, text = pair
        if type(name) is not str or type(text) is not str:
            return None
        if not (_latin1(name) and _latin1(text)):
            return None
    return [(name, text) for name, text in value]


def _latin1(text: str) -> bool:
    """True when each character is one byte, as on the wire: headers, reason phrases and
    versions are read as Latin-1, and a library is handed them encoded so."""
    return text.isascii() or max(text) <= "\xff"


def _plain_seconds(value: Any) -> float | None:
    """What ``_duration`` accepts, as a float; None for anything else."""
    if type(value) not in _NUMBERS:
        return None
    number = float(value)
    return number if 0 <= number <= LONGEST_WAIT else None


def _plain_chunks(value: Any, body_size: int) -> list[tuple[int, float]] | None:
    """(size, offset) pairs whose sizes add up to no more than the body; pairs read as
    tuples that already hold a float offset are kept as they are."""
    if type(value) not in _ARRAYS:
        return None
    chunks = []
    total = 0
    for chunk in value:
        if type(chunk) not in _ARRAYS or len(chunk) != 2:
            return None
        size, offset = chunk
        if type(size) is not int or size < 0:
            return None
        if type(offset) is float and type(chunk) is tuple and 0 <= offset <= LONGEST_WAIT:
            chunks.append(chunk)
        else:
            seconds = _plain_seconds(offset)
            if seconds is None:
                return None
            chunks.append((size, seconds))
        total += size
    return chunks if total <= body_size else None


def _decode_plain(raw: Any, seen: _SharedPairs) -> Interaction | None:
    """The common, well-formed interaction decoded with the fewest checks that still accept
    exactly what ``_decode_interaction`` accepts, and build the same result; anything unusual
    returns None and goes through ``_decode_interaction``, which says what is wrong."""
    if type(raw) is not dict:
        return None
    req = raw.get("request")
    if type(req) is not dict:
        return None
    method, url, body = req.get("method"), req.get("url"), req.get("body")
    request_headers = _plain_headers(req.get("headers"), seen)
    if (
        type(method) is not str
        or type(url) is not str
        or type(body) is not bytes
        or request_headers is None
    ):
        return None
    request = Request(_shared(seen, method), url, request_headers, body)
    raw_sent = req.get("chunks")
    if raw_sent is not None:
        sent = _plain_chunks(raw_sent, len(body))
        if sent is None:
            return None
        request.chunks = sent
    response = None
    res = raw.get("response")
    if res is not None:
        if type(res) is not dict:
            return None
        status = res.get("status")
        reason = res.get("reason", "")
        http_version = res.get("http_version", "HTTP/1.1")
        response_body = res.get("body")
        response_headers = _plain_headers(res.get("headers"), seen)
        if (
            type(status) is not int
            or status not in STATUSES
            or type(reason) is not str
            or type(http_version) is not str
            or not (_latin1(reason) and _latin1(http_version))
            or type(response_body) is not bytes
            or response_headers is None
        ):
            return None
        raw_chunks = res.get("chunks", ())
        # The common body, read in one piece, without a call: the same checks as below.
        if type(raw_chunks) is tuple and len(raw_chunks) == 1:
            (only,) = raw_chunks
            if (
                type(only) is tuple
                and len(only) == 2
                and type(only[0]) is int
                and type(only[1]) is float
                and 0 <= only[0] <= len(response_body)
                and 0 <= only[1] <= LONGEST_WAIT
            ):
                chunks: list[tuple[int, float]] | None = [only]
            else:
                chunks = _plain_chunks(raw_chunks, len(response_body))
        else:
            chunks = _plain_chunks(raw_chunks, len(response_body))
        if chunks is None:
            return None
        trailers = res.get("trailers")
        if trailers is not None:
            trailers = _plain_headers(trailers, seen)
            if trailers is None:
                return None
        response = Response(
            status,
            _shared(seen, reason),
            _shared(seen, http_version),
            response_headers,
            response_body,
            chunks,
            bool(res.get("truncated", False)),
            () if trailers is None else trailers,
        )
    error = None
    err = raw.get("error")
    if err is not None:
        if type(err) is not dict:
            return None
        kind, type_name, message = err.get("kind"), err.get("type"), err.get("message", "")
        if type(kind) is not str or type(type_name) is not str or type(message) is not str:
            return None
        # A kind this version does not know replays as the library's generic transport error.
        error = Failure(kind=cast(FailureKind, kind), type=type_name, message=message)
    boundary = raw.get("boundary", "http")
    started, ttfb, duration = raw.get("started_at"), raw.get("ttfb"), raw.get("duration")
    started_at = 0.0 if started is None else float(started) if type(started) in _NUMBERS else None
    ttfb_seconds = ttfb if type(ttfb) is float and 0 <= ttfb <= LONGEST_WAIT else None
    if ttfb_seconds is None and ttfb is not None:
        ttfb_seconds = _plain_seconds(ttfb)
    duration_seconds = (
        duration if type(duration) is float and 0 <= duration <= LONGEST_WAIT else None
    )
    if duration_seconds is None and duration is not None:
        duration_seconds = _plain_seconds(duration)
    frames = closed = None
    if "frames" in raw or "closed" in raw:
        try:
            frames, closed = _session(raw)
        except Invalid:
            return None
    injected = raw.get("injected")
    if (
        (response is None and error is None)
        or (injected is not None and type(injected) is not str)
        or type(boundary) is not str
        or started_at is None
        or not _EARLIEST <= started_at <= _LATEST
        or (ttfb is not None and ttfb_seconds is None)
        or (duration is not None and duration_seconds is None)
    ):
        return None
    return Interaction(
        request,
        response,
        error,
        _shared(seen, boundary),
        started_at,
        ttfb_seconds,
        duration_seconds,
        frames,
        closed,
        injected,
    )


def _expect(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        if kind == _ARRAYS:
            expected = "array"
        elif isinstance(kind, type):
            expected = kind.__name__
        else:
            expected = "/".join(k.__name__ for k in kind)
        raise Invalid(f"{what} is {type(value).__name__}, expected {expected}")
    return value


def _optional_number(value: Any, what: str) -> float | None:
    if value is None:
        return None
    return _duration(_expect(value, (int, float), what), what)


def _duration(value: int | float, what: str) -> float:
    """Seconds that replay may wait for: a finite, non-negative number."""
    number = float(value)
    if not 0 <= number <= LONGEST_WAIT:
        raise Invalid(
            f"{what} is {number!r}, expected a number of seconds from 0 to {LONGEST_WAIT:.0f} "
            "(a week)"
        )
    return number


def _moment(value: Any) -> float:
    """A Unix time that converts to a datetime (years 1 to 9999)."""
    if value is None:
        return 0.0
    number = float(_expect(value, (int, float), "started_at"))
    if not _EARLIEST <= number <= _LATEST:
        raise Invalid(f"started_at is {number!r}, not a time")
    return number


def _headers(value: Any, what: str) -> Headers:
    headers = []
    for pair in _expect(value, _ARRAYS, what):
        if (
            not isinstance(pair, _ARRAYS)
            or len(pair) != 2
            or not isinstance(pair[0], str)
            or not isinstance(pair[1], str)
        ):
            raise Invalid(f"{what} holds {pair!r}, expected [name, value] strings")
        for text in pair:
            if not _latin1(text):
                raise Invalid(
                    f"{what} holds {pair!r}: {_outside_latin1(text)}, which no header carries "
                    "(headers are bytes, read as Latin-1)"
                )
        headers.append((pair[0], pair[1]))
    return headers


def _outside_latin1(text: str) -> str:
    character = next(c for c in text if c > "\xff")
    return f"U+{ord(character):04X} is outside Latin-1"


def _wire_text(value: Any, what: str) -> str:
    """A reason phrase or HTTP version: a string of one-byte characters."""
    text: str = _expect(value, str, what)
    if not _latin1(text):
        raise Invalid(f"{what} is {text!r}: {_outside_latin1(text)}")
    return text


def _chunks(value: Any, body: bytes, side: str) -> list[tuple[int, float]]:
    """A body's ``[size, offset]`` pieces, adding up to no more than the body."""
    chunks = []
    total = 0
    for chunk in _expect(value, _ARRAYS, f"{side}.chunks"):
        if (
            not isinstance(chunk, _ARRAYS)
            or len(chunk) != 2
            or not isinstance(chunk[0], int)
            or not isinstance(chunk[1], (int, float))
            or chunk[0] < 0
        ):
            raise Invalid(f"{side}.chunks holds {chunk!r}, expected [size, offset]")
        total += chunk[0]
        chunks.append((chunk[0], _duration(chunk[1], f"{side}.chunks offset")))
    if total > len(body):
        raise Invalid(f"{side}.chunks add up to {total} bytes but the body has {len(body)}")
    return chunks


def _decode_interaction(raw: Any) -> Interaction:
    raw = _expect(raw, dict, "interaction")
    req = _expect(raw.get("request"), dict, "request")
    request_body = _expect(req.get("body"), bytes, "request.body")
    sent = req.get("chunks")
    request = Request(
        method=_expect(req.get("method"), str, "request.method"),
        url=_expect(req.get("url"), str, "request.url"),
        headers=_headers(req.get("headers"), "request.headers"),
        body=request_body,
        chunks=() if sent is None else _chunks(sent, request_body, "request"),
    )
    response = None
    if raw.get("response") is not None:
        res = _expect(raw["response"], dict, "response")
        body = _expect(res.get("body"), bytes, "response.body")
        chunks = _chunks(res.get("chunks", []), body, "response")
        status = _expect(res.get("status"), int, "response.status")
        if status not in STATUSES:
            raise Invalid(f"response.status is {status}, expected three digits (100 to 999)")
        response = Response(
            status=status,
            reason=_wire_text(res.get("reason", ""), "response.reason"),
            http_version=_wire_text(res.get("http_version", "HTTP/1.1"), "response.http_version"),
            headers=_headers(res.get("headers"), "response.headers"),
            body=body,
            chunks=chunks,
            truncated=bool(res.get("truncated", False)),
            trailers=(
                _headers(res["trailers"], "response.trailers")
                if res.get("trailers") is not None
                else ()
            ),
        )
    error = None
    if raw.get("error") is not None:
        err = _expect(raw["error"], dict, "error")
        error = Failure(
            kind=cast(FailureKind, _expect(err.get("kind"), str, "error.kind")),
            type=_expect(err.get("type"), str, "error.type"),
            message=_expect(err.get("message", ""), str, "error.message"),
        )
    if response is None and error is None:
        raise Invalid("has neither a response nor an error")
    frames, closed = _session(raw)
    return Interaction(
        request=request,
        response=response,
        error=error,
        boundary=_expect(raw.get("boundary", "http"), str, "boundary"),
        started_at=_moment(raw.get("started_at")),
        ttfb=_optional_number(raw.get("ttfb"), "ttfb"),
        duration=_optional_number(raw.get("duration"), "duration"),
        frames=frames,
        closed=closed,
        injected=(
            _expect(raw["injected"], str, "injected") if raw.get("injected") is not None else None
        ),
    )


def _session(raw: dict[str, Any]) -> tuple[list[Frame] | None, Closed | None]:
    """A WebSocket session's frames and ending; (None, None) for any other interaction."""
    frames = None
    if raw.get("frames") is not None:
        frames = []
        for index, item in enumerate(_expect(raw["frames"], _ARRAYS, "frames")):
            frames.append(_frame(item, index))
    closed = None
    if raw.get("closed") is not None:
        end = _expect(raw["closed"], dict, "closed")
        code = end.get("code")
        if code is not None and (type(code) is not int or not 0 <= code <= 0xFFFF):
            raise Invalid(f"closed.code is {code!r}, expected a close code (0 to 65535) or nil")
        by = end.get("by", "server")
        if by not in _DIRECTIONS:
            raise Invalid(f"closed.by is {by!r}, expected 'client' or 'server'")
        closed = Closed(code, _expect(end.get("reason", ""), str, "closed.reason"), by)
    return frames, closed


def _frame(item: Any, index: int) -> Frame:
    what = f"frames[{index}]"
    if type(item) not in _ARRAYS or len(item) not in (4, 5):
        raise Invalid(f"{what} is {item!r}, expected [direction, opcode, payload, offset]")
    direction, opcode, payload, offset = item[:4]
    fin = item[4] if len(item) == 5 else True
    if direction not in _DIRECTIONS:
        raise Invalid(f"{what} direction is {direction!r}, expected 'client' or 'server'")
    if opcode not in OPCODE_NUMBERS:
        raise Invalid(f"{what} opcode is {opcode!r}, expected one of {', '.join(OPCODE_NUMBERS)}")
    if type(payload) is not bytes:
        raise Invalid(f"{what} payload is {type(payload).__name__}, expected bin")
    if type(fin) is not bool:
        raise Invalid(f"{what} fin is {fin!r}, expected a bool")
    seconds = _duration(_expect(offset, (int, float), f"{what} offset"), f"{what} offset")
    return Frame(cast(Direction, direction), cast(Opcode, opcode), payload, seconds, fin)
