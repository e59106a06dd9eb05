"""WebSockets through the recording proxy: the upgrade request goes through the shared session
seam (``_core/websocket.py``) like a patched library's.

Recording, the proxy relays the bytes of both directions untouched (masking, compression and
fragment boundaries as the two ends chose them) and parses a copy of each to write the
session down frame by frame. Replaying, it answers the client as the recorded server did:
the recorded ``101`` (with ``Sec-WebSocket-Accept`` for this client's key), then the server
frames each client frame is matched to. A client frame the recording does not have closes
the session with ``1008`` and counts as a miss, which ``agenttape run`` reports.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import time
import zlib
from collections.abc import Callable

import h11

from .._adapters.header_tables import decode_headers, decode_text
from .._core.bodies import READ_LIMIT
from .._core.errors import UnmatchedInteractionError
from .._core.models import OPCODES, Direction, Failure, Frame, Headers, Opcode
from .._core.wire.websocket import (
    End,
    SessionRecording,
    SessionReplay,
    Step,
    close_payload,
    encode_frame,
    parse_close,
)
from .upstream import (
    READ_SIZE,
    ClientGone,
    Origin,
    UpstreamError,
    UpstreamPool,
    Waiter,
    reset,
)

_DEFLATE_TAIL = b"\x00\x00\xff\xff"
# A client frame the recording does not have: "policy violation", the reason kept short
# (a close reason holds at most 123 bytes); the whole difference is in the proxy's log.
MISS_CLOSE = 1008
MISS_REASON = "agenttape: no recorded frame matches this one (see the proxy's log)"


class FrameError(Exception):
    """Bytes that are not WebSocket frames."""


class FrameParser:
    """One direction's bytes as frames: the payload unmasked and, when the session
    negotiated permessage-deflate, inflated (a message is compressed when its first frame
    has RSV1 set).

    A message is read up to ``limit`` bytes, inflated or not (the bound the core puts on a
    decoded body): a compressed message of a megabyte may inflate to gigabytes. Past it,
    ``feed`` raises FrameError and reads no more."""

    __slots__ = ("_buffer", "_compressed", "_inflater", "_limit", "_message")

    def __init__(self, deflate: bool, limit: int = READ_LIMIT) -> None:
        self._buffer = bytearray()
        self._inflater = zlib.decompressobj(-zlib.MAX_WBITS) if deflate else None
        self._compressed = False
        self._limit = limit
        self._message = 0

    @property
    def buffered(self) -> int:
        """Bytes of a frame not complete yet."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[tuple[Opcode, bytes, bool]]:
        self._buffer += data
        frames = []
        while (frame := self._next()) is not None:
            frames.append(frame)
        return frames

    def _next(self) -> tuple[Opcode, bytes, bool] | None:
        buffer = self._buffer
        if len(buffer) < 2:
            return None
        first, second = buffer[0], buffer[1]
        size, start = second & 0x7F, 2
        if size == 126:
            if len(buffer) < 4:
                return None
            size, start = int.from_bytes(buffer[2:4], "big"), 4
        elif size == 127:
            if len(buffer) < 10:
                return None
            size, start = int.from_bytes(buffer[2:10], "big"), 10
        if size > self._limit:
            raise FrameError(f"a frame of {size} bytes is over the {self._limit >> 20} MiB bound")
        mask = b""
        if second & 0x80:
            if len(buffer) < start + 4:
                return None
            mask, start = bytes(buffer[start : start + 4]), start + 4
        if len(buffer) < start + size:
            return None
        payload = bytes(buffer[start : start + size])
        del buffer[: start + size]
        if mask:
            payload = _unmask(payload, mask)
        opcode = OPCODES.get(first & 0x0F)
        if opcode is None:
            raise FrameError(f"opcode {first & 0x0F:#x} is not a WebSocket opcode")
        fin = bool(first & 0x80)
        if opcode in ("text", "binary"):
            self._compressed = bool(first & 0x40) and self._inflater is not None
            self._message = 0
        if opcode in ("text", "binary", "continuation"):
            if self._compressed:
                payload = self._inflate(payload + (_DEFLATE_TAIL if fin else b""))
            self._message += len(payload)
            if self._message > self._limit:
                raise FrameError(f"a message is over the {self._limit >> 20} MiB bound")
        return opcode, payload, fin

    def _inflate(self, data: bytes) -> bytes:
        """At most what is left of the message's bound, plus one byte to tell it is over."""
        assert self._inflater is not None
        room = self._limit - self._message
        try:
            out = self._inflater.decompress(data, room + 1)
        except zlib.error as exc:
            raise FrameError(f"a compressed message does not inflate: {exc}") from None
        if len(out) > room or self._inflater.unconsumed_tail:
            raise FrameError(
                f"a compressed message inflates past the {self._limit >> 20} MiB bound"
            )
        return out


def _unmask(payload: bytes, mask: bytes) -> bytes:
    size = len(payload)
    key = (mask * (size // 4 + 1))[:size]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(size, "big")


def negotiated_deflate(headers: Headers) -> bool:
    """Whether the server's ``101`` accepted permessage-deflate."""
    return any(
        name.lower() == "sec-websocket-extensions" and "permessage-deflate" in value.lower()
        for name, value in headers
    )


def head_bytes(status: int, reason: str, headers: Headers) -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}".rstrip(), *(f"{n}: {v}" for n, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


# -- recording ----------------------------------------------------------------------------


def record_session(
    session: SessionRecording,
    client: socket.socket,
    pending: bytes,
    pool: UpstreamPool,
    origin: Origin,
    request_head: bytes,
) -> None:
    """Opens the session upstream, relays it both ways until either end closes, and writes
    every frame down as it passes."""
    upstream = pool.connect(origin)
    try:
        status, reason, headers, body, leftover = _upgrade(upstream.sock, request_head)
        session.opened(status, reason, headers, body)
        client.sendall(head_bytes(status, reason, headers) + (b"" if status == 101 else body))
        if status != 101:
            session.finish()
            return
        _Relay(session, client, upstream.sock, negotiated_deflate(headers)).run(pending, leftover)
    finally:
        upstream.close()


def _upgrade(sock: socket.socket, request_head: bytes) -> tuple[int, str, Headers, bytes, bytes]:
    """Sends the upgrade request as the client wrote it; the answer's status, reason, headers,
    body (of a refusal) and the bytes read past a ``101`` (the server's first frames)."""
    reader = h11.Connection(h11.CLIENT, max_incomplete_event_size=256 * 1024)
    reader.send(
        h11.Request(
            method="GET",
            target="/",
            headers=[
                (b"Host", b"upstream"),
                (b"Connection", b"Upgrade"),
                (b"Upgrade", b"websocket"),
            ],
        )
    )
    reader.send(h11.EndOfMessage())
    try:
        sock.sendall(request_head)
    except OSError as exc:
        raise UpstreamError("write_error", type(exc).__name__, str(exc)) from exc
    waiter = Waiter()
    head: h11.Response | h11.InformationalResponse | None = None
    body = bytearray()
    while True:
        try:
            event = reader.next_event()
        except h11.RemoteProtocolError as exc:
            raise UpstreamError("protocol_error", "RemoteProtocolError", str(exc)) from exc
        if event is h11.NEED_DATA:
            waiter.flush()
            try:
                data = sock.recv(READ_SIZE)
            except OSError as exc:
                raise UpstreamError("read_error", type(exc).__name__, str(exc)) from exc
            reader.receive_data(data)
            continue
        if isinstance(event, h11.InformationalResponse) and event.status_code == 101:
            head = event
            break
        if isinstance(event, h11.Response):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)) or event is h11.PAUSED:
            break
    if head is None:
        raise UpstreamError(
            "protocol_error",
            "RemoteProtocolError",
            "Server disconnected without sending a response.",
        )
    leftover = reader.trailing_data[0] if head.status_code == 101 else b""
    return (
        head.status_code,
        decode_text(head.reason),
        decode_headers(head.headers.raw_items()),
        bytes(body),
        leftover,
    )


class _Relay:
    """Both directions of a live session, passed through in one thread."""

    def __init__(
        self,
        session: SessionRecording,
        client: socket.socket,
        upstream: socket.socket,
        deflate: bool,
    ) -> None:
        self.session = session
        self.client = client
        self.upstream = upstream
        self.parsers = {client: FrameParser(deflate), upstream: FrameParser(deflate)}
        self.unparsed: set[socket.socket] = set()

    def run(self, from_client: bytes, from_upstream: bytes) -> None:
        session = self.session
        try:
            if from_upstream:
                self._pass(self.upstream, from_upstream)
            if from_client:
                self._pass(self.client, from_client)
            while True:
                for sock in _readable([self.client, self.upstream]):
                    try:
                        data = sock.recv(READ_SIZE)
                    except OSError as exc:
                        if sock is self.upstream:
                            session.failed(Failure("read_error", type(exc).__name__, str(exc)))
                            reset(self.client)
                        return
                    if not data:
                        self._closed_by(sock)
                        return
                    self._pass(sock, data)
        finally:
            session.finish()

    def _closed_by(self, sock: socket.socket) -> None:
        """One end closed its connection: so does the proxy, towards the other. A server
        that does so without the closing handshake dropped the session, as a reset would."""
        other = self.upstream if sock is self.client else self.client
        session = self.session
        if sock is self.upstream and session.interaction.closed is None:
            unfinished = self.parsers[sock].buffered
            message = "connection closed abnormally" + (
                f", {unfinished} bytes into a frame" if unfinished else ""
            )
            session.failed(Failure("read_error", "EOFError", message))
            reset(other)
            return
        with contextlib.suppress(OSError):
            other.shutdown(socket.SHUT_RDWR)

    def _pass(self, source: socket.socket, data: bytes) -> None:
        target = self.upstream if source is self.client else self.client
        with contextlib.suppress(OSError):  # the next read of that end sees it gone
            target.sendall(data)
        if source in self.unparsed:
            return
        direction: Direction = "client" if source is self.client else "server"
        try:
            frames = self.parsers[source].feed(data)
        except FrameError:
            # The bytes still pass; what the recording holds ends here, marked cut.
            self.unparsed.add(source)
            self.session.cut = True
            return
        for opcode, payload, fin in frames:
            if direction == "client":
                self.session.sent(opcode, payload, fin)
            else:
                self.session.received(opcode, payload, fin)
            if opcode == "close":
                code, reason = parse_close(payload)
                self.session.closed(code, reason, direction)


def _readable(socks: list[socket.socket]) -> list[socket.socket]:
    pending: list[socket.socket] = [
        s for s in socks if isinstance(s, ssl.SSLSocket) and s.pending()
    ]
    if pending:
        return pending
    try:
        ready, _, _ = select.select(socks, [], [])
    except (OSError, ValueError):
        raise ClientGone() from None
    return ready


# -- replay --------------------------------------------------------------------------------


def replay_session(
    replay: SessionReplay,
    client: socket.socket,
    pending: bytes,
    key: str | None,
    missed: Callable[[UnmatchedInteractionError], None],
) -> None:
    """Answers the client from the recording, each server frame when it is due."""
    response = replay.response
    if response is None:
        error = replay.interaction.error
        assert error is not None
        _fail(error, client)
        return
    client.sendall(replay.handshake(key))
    if not replay.is_session:
        return
    parser = FrameParser(negotiated_deflate(response.headers))
    player = _Player(replay, client)
    try:
        if player.deliver(replay.opening()):
            return
        data = pending
        while True:
            try:
                frames = parser.feed(data)
            except FrameError:
                reset(client)
                return
            for opcode, payload, fin in frames:
                try:
                    step = replay.sent(opcode, payload, fin)
                except UnmatchedInteractionError as miss:
                    missed(miss)
                    player.send(encode_close(MISS_CLOSE, MISS_REASON))
                    return
                if player.deliver(step):
                    return
            try:
                data = client.recv(READ_SIZE)
            except OSError:
                return
            if not data:
                return
    except OSError:
        return  # the client went away


def encode_close(code: int, reason: str) -> bytes:
    return encode_frame(Frame("server", "close", close_payload(code, reason)))


class _Player:
    def __init__(self, replay: SessionReplay, client: socket.socket) -> None:
        self.replay = replay
        self.client = client

    def send(self, data: bytes) -> None:
        self.client.sendall(data)

    def deliver(self, step: Step) -> bool:
        """Sends the step's frames when each is due; True once the session has ended."""
        for frame in step.frames:
            self._wait(frame.offset)
            self.client.sendall(encode_frame(frame))
        end = step.end
        if end is None or end.kind == "held":
            return False
        self._wait(end.due)
        self._end(end)
        return True

    def _wait(self, offset: float) -> None:
        delay = self.replay.due(offset)
        if delay > 0:
            time.sleep(delay)

    def _end(self, end: End) -> None:
        if end.failure is not None and end.action != "close":
            _fail(end.failure, self.client)
        else:
            with contextlib.suppress(OSError):
                self.client.shutdown(socket.SHUT_RDWR)


def _fail(error: Failure, client: socket.socket) -> None:
    """A recorded timeout answers nothing until the client gives up; any other error resets
    (see ``End.action``)."""
    if error.is_timeout:
        with contextlib.suppress(OSError):
            while client.recv(READ_SIZE):
                pass
        return
    reset(client)
