"""The one model every adapter speaks, so the cassette and the matcher never know the library.

Header names and values are ``str`` decoded as latin-1: every byte maps to one character, so
odd bytes survive the round trip and adapters re-encode with latin-1 to get the exact bytes.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from .llm import LLMCall, summarize

Headers = Sequence[tuple[str, str]]

FAULT_HEADER = "agenttape-fault"
"""The header on an error answer a fault made: which fault, on which request. The SDK builds
its exception from the answer after the exchange, so the patch on that exception reads it
there to add the note (PEP 678) the agent sees on the exception it catches."""

FailureKind = Literal[
    "connect_error",
    "connect_timeout",
    "read_timeout",
    "write_timeout",
    "pool_timeout",
    "read_error",
    "write_error",
    "protocol_error",
    "proxy_error",
    "unsupported_protocol",
    "transport_error",
    "raised",
]
"""What went wrong instead of (or in the middle of) a response, in words every library shares:
an error recorded through one library replays as the matching exception of another.
``raised`` is a function boundary's exception."""


TIMEOUT_KINDS: frozenset[FailureKind] = frozenset(
    ("connect_timeout", "read_timeout", "write_timeout", "pool_timeout")
)


def first_header(headers: Headers, name: str) -> str | None:
    """First value of a header, names compared case-insensitively."""
    lowered = name.lower()
    for key, value in headers:
        if key.lower() == lowered:
            return value
    return None


@dataclass(slots=True)
class Request:
    """A request as it was sent. ``chunks`` holds ``(size, offset)`` per piece of a body
    sent while the exchange ran (a streamed gRPC request's messages), ``offset`` being
    seconds since the request started, so replay can answer each piece when it comes;
    empty for a body sent at once."""

    method: str
    url: str
    headers: Headers = field(default_factory=list)
    body: bytes = b""
    chunks: Sequence[tuple[int, float]] = ()

    def header(self, name: str) -> str | None:
        return first_header(self.headers, name)


@dataclass(slots=True)
class Response:
    """A response as it crossed the wire: the body undecoded, with its chunk boundaries and,
    when the server sent any, its trailers.

    ``chunks`` holds ``(size, offset)`` per chunk, ``offset`` being seconds since the request
    started, so replay can hand the caller the same pieces at the same moments.
    """

    status: int
    reason: str = ""
    http_version: str = "HTTP/1.1"
    headers: Headers = field(default_factory=list)
    body: bytes = b""
    chunks: Sequence[tuple[int, float]] = field(default_factory=list)
    truncated: bool = False
    trailers: Headers = ()
    """Header fields sent after the body (HTTP/2 trailers: gRPC's status and trailing
    metadata); empty for almost every response."""

    def header(self, name: str) -> str | None:
        return first_header(self.headers, name)

    def pieces(self) -> list[bytes]:
        """``iter_chunks`` as a list, without a generator for the common body of one piece
        (every replayed response is cut so)."""
        chunks, body = self.chunks, self.body
        if not chunks:
            return [body] if body else []
        if len(chunks) == 1 and chunks[0][0] == len(body):
            return [body]
        return list(self.iter_chunks())

    def iter_chunks(self) -> Iterator[bytes]:
        """The body cut at the recorded boundaries; one chunk when none were recorded."""
        if not self.chunks:
            if self.body:
                yield self.body
            return
        if len(self.chunks) == 1 and self.chunks[0][0] == len(self.body):
            yield self.body  # the whole body in one piece: no copy
            return
        view = memoryview(self.body)
        start = 0
        for size, _offset in self.chunks:
            yield bytes(view[start : start + size])
            start += size
        if start < len(self.body):
            yield bytes(view[start:])


@dataclass(slots=True)
class Failure:
    """A transport error in place of (or in the middle of) a response.

    ``kind`` is library-neutral (``connect_error``, ``read_timeout``, …) so an error recorded
    through one library replays as the matching exception of another; ``type`` keeps the
    original class name so the same library gets back exactly the same class.
    """

    kind: FailureKind
    type: str
    message: str = ""

    @property
    def is_timeout(self) -> bool:
        """Whether the peer never answered in time (no bytes, no reset): replayed by holding
        the client until its own timeout fires."""
        return self.kind in TIMEOUT_KINDS


Direction = Literal["client", "server"]
"""Who sent a WebSocket frame."""

Opcode = Literal["continuation", "text", "binary", "close", "ping", "pong"]
"""A WebSocket frame's kind, by the name RFC 6455 gives it."""

OPCODES: dict[int, Opcode] = {
    0x0: "continuation",
    0x1: "text",
    0x2: "binary",
    0x8: "close",
    0x9: "ping",
    0xA: "pong",
}
"""Wire opcode to name; ``OPCODE_NUMBERS`` goes the other way."""
OPCODE_NUMBERS: dict[Opcode, int] = {name: number for number, name in OPCODES.items()}


@dataclass(slots=True)
class Frame:
    """One WebSocket frame as its reader saw it: the payload unmasked and, under
    permessage-deflate, inflated; ``offset`` is seconds since the upgrade request started.
    ``fin`` is False only for a fragment that more of the same message follows."""

    direction: Direction
    opcode: Opcode
    payload: bytes = b""
    offset: float = 0.0
    fin: bool = True


@dataclass(slots=True)
class Closed:
    """How a WebSocket session ended with a closing handshake: the close code (None for a
    close frame without one), its reason, and which side sent the first close frame."""

    code: int | None
    reason: str = ""
    by: Direction = "server"


@dataclass(slots=True, weakref_slot=True)
class Interaction:
    """One exchange. A WebSocket session is one too: the upgrade request, the ``101``
    response, then ``frames`` both ways in order (None for anything but a session) and how it
    ended: ``closed``, or ``error`` for a transport failure, or neither with
    ``response.truncated`` when recording stopped while it was still open. ``injected`` names
    the fault that made it, for one a fault made rather than the network (SPEC §18)."""

    request: Request
    response: Response | None = None
    error: Failure | None = None
    boundary: str = "http"
    started_at: float = 0.0
    ttfb: float | None = None
    duration: float | None = None
    frames: list[Frame] | None = None
    closed: Closed | None = None
    injected: str | None = None
    """The fault that made this interaction (its ``describe()``), None for one that happened:
    an injected failure is never mistaken for a real one."""

    @property
    def started(self) -> _dt.datetime:
        return _dt.datetime.fromtimestamp(self.started_at, tz=_dt.UTC)

    @property
    def llm(self) -> LLMCall | None:
        """Model and sampling parameters when this is a call to a known LLM API, else None."""
        if self.boundary != "http":
            return None
        return summarize(self.request.url, self.request.body)
