"""tornado's ``AsyncHTTPClient`` (``simple_httpclient``): ``fetch`` with its streaming and
header callbacks, redirects, decompression and errors.

Under a tape a request's connection is put off: ``_HTTPConnection`` gets a stream over a
local socket pair instead, and tornado's own ``HTTP1Connection`` writes the request into it
and reads the response from it, as it would from the network. What it wrote is the request as
sent; the tape decides there. Replay writes the recorded response back, head then each body
piece as it arrived; recording opens the real connection then, sends the request's bytes, and
passes on each read it gets (teed into the recording, still gzip, framing taken off). So
tornado parses, decodes, follows redirects (each hop its own exchange), calls
``header_callback`` and ``streaming_callback`` and builds its ``HTTPResponse`` and its errors
(``HTTPClientError`` for a 4xx or 5xx) itself, replayed or live.

A timeout tornado raised while recording (``HTTPTimeoutError``) replays through tornado's
own timeout handler; a connection error as the exception tornado reported.
"""

from __future__ import annotations

import asyncio
import collections
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

from .._core import runtime
from .._core.blame import passed_through
from .._core.exchange import Replay, begin, serving
from .._core.models import Failure, Interaction, Request
from .._core.playback import Schedule
from .._core.tape import Recording, Tape
from . import ledger, wire
from .http_client import complete

__tracebackhide__ = passed_through

_TAP = "_agenttape_tap"
"""On an ``_HTTPConnection`` whose connection was put off: its ``_Tap``."""

_PIECE = 65536


def install(module: ModuleType) -> list[ledger.Patch]:
    connection = module._HTTPConnection
    iostream = _pieced(module.IOStream)  # what the put-off connection hands tornado
    connection._handle_exception  # noqa: B018 - what the replayed timeout goes through
    timeout_error = module.HTTPTimeoutError
    return [
        ledger.wrap(connection, "run", lambda found: _make_run(found, iostream, timeout_error)),
        ledger.wrap(connection, "_create_connection", _make_create_connection),
        ledger.wrap(connection, "_on_timeout", _make_on_timeout),
    ]


def _pieced(iostream: Any) -> type:
    """tornado's ``IOStream`` reading what the other end writes one piece at a time: a read
    stops where a piece stops, and says when it found nothing more (``hungry``), so that the
    next piece is written only then. tornado then hands on each body piece as it did each
    read when recorded: a socket would run pieces written in a row together, and tornado
    (6.6) joins chunks it finds already waiting."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        iostream.__init__(self, *args, **kwargs)
        self.pieces = collections.deque()
        self.hungry = asyncio.Event()

    def read_from_fd(self: Any, buf: Any) -> int | None:
        pieces: collections.deque[int] = self.pieces
        if pieces:
            buf = memoryview(buf)[: pieces[0]]
        read: int | None = iostream.read_from_fd(self, buf)
        if read and pieces:
            pieces[0] -= read
            if not pieces[0]:
                pieces.popleft()
        elif read is None and not pieces:
            self.hungry.set()
        return read

    namespace = {"__init__": __init__, "read_from_fd": read_from_fd, "__module__": __name__}
    return type("PiecedIOStream", (iostream,), namespace)


def _make_run(original: Callable[..., Any], iostream: type, timeout_error: type) -> Any:
    async def run(self: Any) -> None:
        tape = runtime.active()
        if tape is not None:
            self.tcp_client = _PutOff(self, tape, self.tcp_client, iostream, timeout_error)
        await original(self)

    return run


def _make_create_connection(original: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def _create_connection(self: Any, stream: Any) -> Any:
        made = original(self, stream)
        tap = vars(self).get(_TAP)
        if tap is None or stream is not tap.stream:
            return made
        return _Tapped(made, tap)

    return _create_connection


def _make_on_timeout(original: Callable[..., None]) -> Callable[..., None]:
    def _on_timeout(self: Any, info: str | None = None) -> None:
        tap = vars(self).get(_TAP)
        if tap is not None:
            tap.timed_out(f"Timeout {info}" if info else "Timeout")
        original(self, info)

    return _on_timeout


@dataclass(slots=True, eq=False)
class _PutOff:
    """Stands in for the client's ``TCPClient`` for one request: ``connect`` hands back a
    stream over a local socket pair at once; the real one is opened only to record."""

    _connection: Any
    _tape: Tape
    _tcp_client: Any
    _iostream: type
    _timeout_error: type

    async def connect(self, host: str, port: int, **options: Any) -> Any:
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        stream = self._iostream(theirs)
        connect = lambda: self._tcp_client.connect(host, port, **options)  # noqa: E731
        vars(self._connection)[_TAP] = _Tap(
            self._connection, self._tape, connect, ours, stream, self._timeout_error
        )
        return stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tcp_client, name)


class _Tapped:
    """tornado's ``HTTP1Connection`` over the put-off stream; reading the response is where
    the tape serves it."""

    def __init__(self, inner: Any, tap: _Tap) -> None:
        self._inner = inner
        self._tap = tap

    async def read_response(self, delegate: Any) -> bool:
        return await self._tap.serve(self._inner, delegate)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@dataclass(slots=True, eq=False)
class _Tap:
    """One request on a put-off connection: reads what tornado wrote, has the tape serve it,
    writes the response for tornado to read."""

    connection: Any
    tape: Tape
    connect: Callable[[], Any]
    ours: socket.socket
    stream: Any
    timeout_error: type
    recording: Recording | None = None
    pump: asyncio.Future[None] | None = None
    sent: bool = False

    def timed_out(self, message: str) -> None:
        """tornado's own timeout fired: a recording ends with it, the exchange stops."""
        recording = self.recording
        if recording is not None:
            recording.fail(Failure("read_timeout", "HTTPTimeoutError", message))
        if self.pump is not None:
            self.pump.cancel()

    async def serve(self, inner: Any, delegate: Any) -> bool:
        loop = asyncio.get_running_loop()
        try:
            kept = bytearray()
            while not complete(kept):
                data = await loop.sock_recv(self.ours, _PIECE)
                if not data:
                    break
                kept += data
            method, target, headers, body = wire.parse_request(bytes(kept))
            request = Request(method, self._url(target), headers, body)
            reading = asyncio.ensure_future(inner.read_response(delegate))
            pump = self.pump = asyncio.ensure_future(self._exchange(request, bytes(kept), method))
            # tornado done reading (a callback of the caller's raised): nothing more to send
            reading.add_done_callback(lambda _: pump.cancel())
            try:
                await pump
            except asyncio.CancelledError:
                if not pump.cancelled():
                    raise  # the caller was cancelled, not the exchange
            except BaseException:
                reading.cancel()
                raise
        finally:
            self.ours.close()
        served: bool = await reading
        return served

    def _url(self, target: str) -> str:
        if target.startswith(("http://", "https://")):
            return target
        parts = urlsplit(self.connection.request.url)
        netloc = parts.netloc.rpartition("@")[2]
        return f"{parts.scheme}://{netloc}{target}"

    async def _send(self, data: bytes) -> None:
        """Writes one piece for tornado, which reads it as a piece of its own, once it read
        the one before and looked for more."""
        if not data:
            return
        stream = self.stream
        if self.sent:
            await stream.hungry.wait()
        stream.hungry.clear()
        self.sent = True
        stream.pieces.append(len(data))
        await asyncio.get_running_loop().sock_sendall(self.ours, data)

    async def _exchange(self, request: Request, sent: bytes, method: str) -> None:
        """The exchange of the request tornado wrote, as a task of its own (tornado's read
        of the response runs beside it)."""
        plan = begin(self.tape, request)
        with serving(self.tape, plan, self._failure_of):
            if isinstance(plan, Replay):
                await self._replay(plan.interaction, plan.playback)
            else:
                await self._record(plan.recording, sent, method)

    async def _replay(self, interaction: Interaction, schedule: Schedule) -> None:
        response, error = interaction.response, interaction.error
        if response is None:
            await schedule.wait_async(schedule.head)
            assert error is not None
            if error.type == "HTTPTimeoutError" and error.kind == "read_timeout":
                info = error.message.removeprefix("Timeout").strip() or None
                self.connection._on_timeout(info)  # tornado's own handler, as live
                return
            if error.type != "HTTPStreamClosedError":  # that one: the stream just closes
                raise self._exception_for(error)
            return
        await schedule.wait_async(schedule.head)
        await self._send(wire.render_head(response))
        pieces = wire.render_body(response, complete=not response.truncated)
        for index, piece in enumerate(pieces):
            await schedule.wait_async(schedule.chunk(index))
            await self._send(piece)
        if error is not None and error.type != "HTTPStreamClosedError":
            raise self._exception_for(error)

    async def _record(self, recording: Recording, sent: bytes, method: str) -> None:
        self.recording = recording
        try:
            real = await self.connect()
        except TimeoutError as exc:
            raise self.timeout_error(str(exc) or "Timeout while connecting") from None
        try:
            await real.write(sent)
            parser = wire.ResponseParser(head_only=method == "HEAD")
            responded = False
            while not (parser.body is not None and parser.body.done):
                try:
                    data = await real.read_bytes(_PIECE, partial=True)
                except Exception as exc:
                    real_error = getattr(exc, "real_error", None)
                    if real_error is not None:
                        raise real_error from None
                    if parser.body is not None and parser.body.runs_to_eof:
                        break  # the end of a body the connection's end delimits
                    recording.fail(
                        Failure("protocol_error", "HTTPStreamClosedError", "Stream closed")
                    )
                    return
                body = parser.feed(data)
                if not responded and parser.head is not None:
                    status, reason, version, headers = parser.head
                    recording.respond(status, reason, version, headers)
                    responded = True
                recording.chunk(body)
                await self._send(data)
            recording.finish()
        finally:
            real.close()

    def _failure_of(self, exc: BaseException) -> Failure | None:
        if not isinstance(exc, Exception):
            return None
        real = getattr(exc, "real_error", None) or exc
        name = type(real).__name__
        if isinstance(real, self.timeout_error):
            return Failure("connect_timeout", name, str(real))
        if isinstance(real, (ConnectionRefusedError, socket.gaierror)):
            return Failure("connect_error", name, str(real))
        if isinstance(real, OSError):
            return Failure("read_error", name, str(real))
        return Failure("transport_error", name, str(real))

    def _exception_for(self, error: Failure) -> Exception:
        """What tornado reported live: its connect timeout, or the socket's own error."""
        if error.type == "HTTPTimeoutError":
            exception: Exception = self.timeout_error(error.message)
            return exception
        found = re.fullmatch(r"\[Errno (-?\d+)\] (.*)", error.message, re.DOTALL)
        kind = _OS_ERRORS.get(error.type, OSError)
        if found is None:
            return kind(error.message)
        return kind(int(found.group(1)), found.group(2))


_OS_ERRORS: dict[str, type[OSError]] = {
    "gaierror": socket.gaierror,
    "ConnectionRefusedError": ConnectionRefusedError,
    "ConnectionResetError": ConnectionResetError,
    "ConnectionAbortedError": ConnectionAbortedError,
    "BrokenPipeError": BrokenPipeError,
    "TimeoutError": TimeoutError,
}
