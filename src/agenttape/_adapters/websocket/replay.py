"""Replay of a recorded WebSocket session to a library that reads from a transport or a
socket: the server side every adapter shares, so delivery, pacing (``SessionReplay.due``) and
endings behave the same whichever library is replayed.

``ReplayTransport`` is an asyncio transport for libraries built on asyncio protocols;
``ReplayPeer`` serves one end of a local socket pair for libraries that read a socket. Both
answer the upgrade request the client writes with the recorded response (its
``Sec-WebSocket-Accept`` computed for the key in that request), then deliver the opening
frames and each ``Step`` an adapter hands to ``schedule`` after checking a client frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import socket
import threading

from ..._core.models import Frame
from ..._core.wire.websocket import End, SessionReplay, Step, encode_frame
from ..memory_transport import MemoryTransport
from ..wire import header, parse_head


def key_of(request: bytes) -> str | None:
    """The ``Sec-WebSocket-Key`` of an upgrade request as the client wrote it."""
    head = request.partition(b"\r\n\r\n")[0]
    return header(parse_head(head)[3], "sec-websocket-key")


class ReplayTransport(MemoryTransport):
    """An asyncio transport with a recorded server behind it: the first write (the upgrade
    request) is answered with the recorded response and opening frames; every later step
    comes from the frames the client sends. Delivery is in order, paced with ``realtime``,
    and stops while the client pauses reading."""

    def __init__(
        self, connection: asyncio.Protocol, replay: SessionReplay, peer: tuple[str, int]
    ) -> None:
        super().__init__(asyncio.get_running_loop(), peer)
        self._connection = connection
        self._replay = replay
        self._request = b""
        self._queue: list[bytes | Frame | End] = []
        self._timer: asyncio.Handle | None = None
        self._answered = False
        self._lost = False

    # What the protocol's taps and the library call.

    def schedule(self, step: Step) -> None:
        self._queue.extend(step.frames)
        if step.end is not None:
            self._queue.append(step.end)
        self._kick()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._answered or self._closing:
            return
        self._request += bytes(data)
        if b"\r\n\r\n" not in self._request:
            return
        self._answered = True
        replay = self._replay
        self._queue.append(replay.handshake(key_of(self._request)))
        self.schedule(replay.opening())

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._loop.call_soon(self._lose, None)

    def _deliver_again(self) -> None:
        self._kick()

    # Delivery.

    def _kick(self) -> None:
        if self._timer is None and self._queue and not self._lost:
            self._timer = self._loop.call_soon(self._pump)

    def _pump(self) -> None:
        self._timer = None
        out: list[bytes] = []
        queue = self._queue
        while queue and not self._paused and not self._lost:
            item = queue[0]
            if not isinstance(item, bytes):
                due = self._replay.due(item.offset if isinstance(item, Frame) else item.due)
                if due > 0:
                    self._flush(out)
                    self._timer = self._loop.call_later(due, self._pump)
                    return
            del queue[0]
            if isinstance(item, bytes):
                out.append(item)
            elif isinstance(item, Frame):
                out.append(encode_frame(item))
            else:
                self._flush(out)
                out = []
                self._finish(item)
        self._flush(out)

    def _flush(self, out: list[bytes]) -> None:
        if out and not self._lost:
            self._connection.data_received(b"".join(out))

    def _finish(self, end: End) -> None:
        action = end.action
        if action == "hold":
            return
        if action == "reset":
            self._lose(ConnectionResetError(end.failure.message if end.failure else ""))
            return
        self._connection.eof_received()
        self._closing = True
        self._loop.call_soon(self._lose, None)

    def _lose(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        self._closing = True
        self._queue.clear()
        self._connection.connection_lost(exc)


class ReplayPeer:
    """A local socket pair whose server end a thread serves from a recording: it drops what
    the client writes (its frames were checked as they were sent), answers the upgrade, and
    writes each step's frames when due. It stops when the client closes ``client``, or after
    the recorded end: a close, or a reset (the client's next read fails as it did live)."""

    def __init__(self, replay: SessionReplay) -> None:
        self.client, self._sock = socket.socketpair()
        self._replay = replay
        self._request = b""
        self._lock = threading.Lock()
        self._queue: list[bytes | Frame | End] = []
        self._end_after_read: End | None = None
        self._ended: End | None = None
        self._thread = threading.Thread(
            target=self._serve, name="agenttape-websocket-replay", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def schedule(self, step: Step) -> None:
        """Called from the client's thread just before it writes the frame that led to
        ``step``; those bytes wake the peer. The end waits for them: closing with them
        unread would reset the client, which live only a recorded reset does."""
        with self._lock:
            self._queue.extend(step.frames)
            if step.end is not None:
                self._end_after_read = step.end

    def _serve(self) -> None:
        sock = self._sock
        sock.setblocking(False)
        selector = selectors.DefaultSelector()
        selector.register(sock, selectors.EVENT_READ)
        out = bytearray()
        answered = False
        try:
            while True:
                wait = self._ready(out)
                end = self._end_reached()
                if end == "reset":
                    out.clear()
                    # A socket closed with bytes unread resets its peer.
                    with contextlib.suppress(OSError):
                        self.client.send(b"\0")
                closing = end in ("close", "reset")
                if closing and not out:
                    if end == "close":
                        _drain(sock)
                    return
                if out:
                    selector.modify(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
                else:
                    selector.modify(sock, selectors.EVENT_READ)
                for _key, events in selector.select(wait):
                    if events & selectors.EVENT_READ:
                        try:
                            data = sock.recv(1 << 16)
                        except (BlockingIOError, InterruptedError):
                            continue
                        except OSError:
                            return
                        if not data:
                            return  # the client closed its end
                        with self._lock:
                            if self._end_after_read is not None:
                                self._queue.append(self._end_after_read)
                                self._end_after_read = None
                        if not answered:
                            self._request += data
                            answered = b"\r\n\r\n" in self._request
                            if answered:
                                self._answer()
                    if events & selectors.EVENT_WRITE and out:
                        try:
                            sent = sock.send(out)
                        except (BlockingIOError, InterruptedError):
                            continue
                        except OSError:
                            return
                        del out[:sent]
        finally:
            selector.close()
            with contextlib.suppress(OSError):
                sock.close()

    def _answer(self) -> None:
        replay = self._replay
        head = replay.handshake(key_of(self._request))
        step = replay.opening()
        with self._lock:
            self._queue[:0] = [head, *step.frames, *([step.end] if step.end else [])]

    def _ready(self, out: bytearray) -> float | None:
        """Moves due items to ``out``; seconds until the next one is due (None: nothing
        waits)."""
        with self._lock:
            while self._queue:
                item = self._queue[0]
                if isinstance(item, bytes):
                    out += item
                elif isinstance(item, Frame):
                    due = self._replay.due(item.offset)
                    if due > 0:
                        return due
                    out += encode_frame(item)
                else:
                    due = self._replay.due(item.due)
                    if due > 0:
                        return due
                    self._ended = item
                    self._queue.clear()
                    return None
                self._queue.pop(0)
        return None

    def _end_reached(self) -> str | None:
        end = self._ended
        if end is None:
            return None
        action = end.action
        return "held" if action == "hold" else action


def _drain(sock: socket.socket) -> None:
    """Reads what the client already wrote, so closing ``sock`` does not reset it."""
    with contextlib.suppress(OSError):
        while sock.recv(1 << 16):
            pass
