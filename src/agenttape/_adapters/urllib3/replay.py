"""Replay: the recorded response handed to ``http.client`` and urllib3 over an in-memory
socket, paced by the shared replay walk."""

from __future__ import annotations

import contextlib
import http.client
import io
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..._core.models import Failure, Interaction, Response
from ..._core.playback import Schedule, Walk
from .. import wire
from .record import KIND_BY_EXCEPTION


class _ReadOnly(io.BytesIO):
    """A recorded body as a file: ``http.client`` flushes its file when the response is
    collected, and a read-only file has nothing to flush, closed or not."""

    def flush(self) -> None:
        pass


class _BufferedReadOnly(io.BufferedReader):
    """As ``_ReadOnly``, over the replayed stream (closed when its cassette ends)."""

    def flush(self) -> None:
        pass


class _ReplayRaw(io.RawIOBase):
    """The recorded response as a socket would deliver it, as the replay walk hands it over:
    never more than one piece per read, then EOF, the recorded transport error, or, for a
    body the client closed early, nothing until it is closed or the socket's timeout fires.
    ``head`` False leaves the head out: it is handed over parsed."""

    def __init__(self, interaction: Interaction, schedule: Schedule, head: bool) -> None:
        super().__init__()
        response = interaction.response
        assert response is not None
        error = interaction.error
        complete = error is None and not response.truncated
        self._walk = Walk(
            schedule,
            wire.render_body(response, complete, schedule.waits(None)),
            error,
            head=wire.render_head(response) if head else None,
            timed_out=_socket_timeout,
        )
        self._steps = iter(self._walk)
        self._piece = b""
        self._position = 0

    @property
    def walk(self) -> Walk:
        return self._walk

    @property
    def timeout(self) -> float | None:
        return self._walk.timeout

    @timeout.setter
    def timeout(self, timeout: float | None) -> None:
        self._walk.timeout = timeout

    def head_arrives(self) -> None:
        """Returns when the head, handed over parsed, arrived live (at once but with
        ``realtime``); raises the socket's timeout when the client gives up first."""
        self._walk.arrives(self._walk.schedule.head)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._position >= len(self._piece):
            piece = next(self._steps, None)
            if piece is None:
                failure = self._walk.failure
                if failure is not None and failure.kind != "protocol_error":
                    raise self._walk.noted(_socket_error(failure))
                return 0
            self._piece, self._position = piece, 0
        piece = self._piece
        size = min(len(buffer), len(piece) - self._position)
        buffer[:size] = piece[self._position : self._position + size]
        self._position += size
        return size

    def close(self) -> None:
        self._walk.schedule.release()
        super().close()


def _socket_timeout() -> BaseException:
    return TimeoutError("timed out")


class _ReplaySocket:
    """What ``getresponse()`` reads from: the recorded response, nothing sent to it."""

    def __init__(self, interaction: Interaction, schedule: Schedule, head: bool) -> None:
        self.response = interaction.response
        self.source = _ReplayRaw(interaction, schedule, head)

    def head_arrives(self) -> None:
        self.source.head_arrives()

    def makefile(self, mode: str = "rb", buffering: int | None = None, **kwargs: Any) -> Any:
        if buffering == 0:
            return self.source
        return _BufferedReadOnly(self.source)

    def settimeout(self, timeout: float | None) -> None:
        self.source.timeout = timeout

    def shutdown(self, how: int) -> None:
        pass

    def close(self) -> None:
        pass


class WholeSocket:
    """``_ReplaySocket`` for a response with nothing to pace, hold, fail or wait for another
    request: its body, in at most one piece, read from memory."""

    def __init__(self, interaction: Interaction, piece: bytes) -> None:
        self.response = interaction.response
        self._piece = piece

    def makefile(self, mode: str = "rb", buffering: int | None = None, **kwargs: Any) -> Any:
        return _ReadOnly(self._piece)

    def head_arrives(self) -> None:
        pass

    def settimeout(self, timeout: float | None) -> None:
        pass

    def shutdown(self, how: int) -> None:
        pass

    def close(self) -> None:
        pass


def socket_for(interaction: Interaction, schedule: Schedule, head: bool) -> Any:
    response = interaction.response
    assert response is not None
    if (
        not head
        and not schedule.paced
        and not schedule.held
        and schedule.precedents is None
        and interaction.error is None
        and not response.truncated
    ):
        pieces = wire.render_body(response, True)
        if len(pieces) <= 1:
            return WholeSocket(interaction, pieces[0] if pieces else b"")
    return _ReplaySocket(interaction, schedule, head)


def replay_response(
    urllib3: ModuleType,
    pool: Any,
    scratch: Any,
    interaction: Interaction,
    schedule: Schedule,
    arguments: dict[str, Any],
) -> Any:
    """What ``_make_request`` returns, from the connection that rendered the request: its own
    ``getresponse()`` builds urllib3's response over the replay socket, with the read timeout
    ``_make_request`` gives it. With the plain ``http.client`` response class the head is
    handed over as recorded, not parsed again; any other class reads it from the socket as it
    would live."""
    timeout = urllib3.util.Timeout
    read_timeout = pool._get_timeout(arguments.get("timeout", timeout.DEFAULT_TIMEOUT)).read_timeout
    scratch.timeout = timeout.resolve_default_timeout(read_timeout)
    parsed = scratch.response_class is http.client.HTTPResponse
    scratch.sock = sock = socket_for(interaction, schedule, head=not parsed)
    if parsed:
        scratch.response_class = parsed_response
    pool.num_requests += 1
    try:
        response = scratch.getresponse()
    except TimeoutError:
        # The head was due after the client gave up: urllib3's own read timeout, as live.
        message = f"Read timed out. (read timeout={scratch.timeout})"
        raise urllib3.exceptions.ReadTimeoutError(pool, arguments["url"], message) from None
    if isinstance(sock, _ReplaySocket) and interaction.error is not None:
        _noting_errors(response, sock.source.walk)
    # As _make_request sets them, for the pool to take the connection back.
    response.retries = arguments.get("retries")
    response._connection = arguments.get("response_conn")
    response._pool = pool
    return response


# The header fields begin() looks at.
_HEAD_FIELDS = frozenset(
    ("transfer-encoding", "content-length", "connection", "keep-alive", "proxy-connection")
)


def parsed_response(
    sock: _ReplaySocket | WholeSocket, *args: Any, **kwargs: Any
) -> http.client.HTTPResponse:
    """An ``http.client`` response over the replay socket, its head set as ``begin()`` sets
    it from the same bytes, so ``begin()`` finds it read and returns."""
    response = http.client.HTTPResponse(sock, *args, **kwargs)  # type: ignore[arg-type]
    recorded = sock.response
    assert recorded is not None
    sock.head_arrives()
    set_head(response, recorded, head_of(recorded))
    if isinstance(sock, _ReplaySocket):
        _noting_reads(response, sock.source.walk)
    return response


_READS = ("read", "read1", "readinto", "readline", "peek")
"""The methods of ``http.client``'s response that read the body."""


def _noting_reads(response: Any, walk: Walk) -> None:
    """Puts the body-reading methods of ``response`` (``http.client``'s) inside
    ``walk.noting()`` when the recorded response ends in a failure: the exception the library
    raises of its own for a body cut short (``IncompleteRead``) says it was replayed."""
    if walk.failure is None:
        return
    for name in _READS:
        method = getattr(response, name, None)
        if method is not None:
            setattr(response, name, _noted(method, walk))


def _noting_errors(response: Any, walk: Walk) -> None:
    """urllib3 reads every body inside its response's ``_error_catcher``, which turns what
    the socket or ``http.client`` raised into its own ``ProtocolError``: that one says it
    was replayed."""
    catcher = getattr(response, "_error_catcher", None)
    if catcher is None:
        return

    @contextlib.contextmanager
    def error_catcher() -> Iterator[None]:
        with walk.noting(), catcher():
            yield

    response._error_catcher = error_catcher


def _noted(method: Any, walk: Walk) -> Any:
    def read(*args: Any, **kwargs: Any) -> Any:
        with walk.noting():
            return method(*args, **kwargs)

    return read


@dataclass(slots=True)
class Head:
    """What ``begin()`` makes of a recorded head; ``items`` are urllib3's header pairs for
    it, when asked for (None when urllib3 must work them out itself: it would log a defect
    or rewrite the message)."""

    version: int
    reason: str
    chunked: bool
    length: int | None
    closes: bool
    items: tuple[tuple[str, str], ...] | None


def head_of(recorded: Response, items: bool = False) -> Head:
    # The email parser yields these very pairs for the rendered head: names as sent, values
    # without the blank after the colon; begin() reads a few of them, the first of each name.
    seen: dict[str, str] = {}
    for name, value in recorded.headers:
        key = name.lower()
        if key in _HEAD_FIELDS and key not in seen:
            seen[key] = value
    version = 10 if recorded.http_version == "HTTP/1.0" else 11
    encoding = seen.get("transfer-encoding")
    chunked = encoding is not None and encoding.lower() == "chunked"
    length: int | None = None
    content_length = seen.get("content-length")
    if content_length and not chunked:
        try:
            length = int(content_length)
        except ValueError:
            length = None
        if length is not None and length < 0:
            length = None
    return Head(
        version,
        recorded.reason.strip(),
        chunked,
        length,
        _will_close(version, seen),
        _urllib3_items(recorded) if items else None,
    )


def message_of(recorded: Response) -> http.client.HTTPMessage:
    message = http.client.HTTPMessage()
    message._headers = list(recorded.headers)  # type: ignore[attr-defined]
    return message


def _urllib3_items(recorded: Response) -> tuple[tuple[str, str], ...] | None:
    """The header pairs urllib3's ``getresponse()`` gives its response for this head; None
    when it would log a defect or rewrite the message."""
    headers = recorded.headers
    for _, value in headers:  # a loop: no generator per replayed response
        if "\n" in value or "\r" in value:
            break
    else:
        # A message made from pairs has no defects, and with no line break in a value there
        # is no folded line to normalise: urllib3 takes the pairs as they are.
        return tuple(headers)
    import urllib3.connection
    import urllib3.util.response

    message = message_of(recorded)
    try:
        urllib3.util.response.assert_header_parsing(message)
    except Exception:
        return None
    normalize = getattr(urllib3.connection, "_normalize_header_values", None)
    items = normalize(message) if normalize is not None else message.items()
    if message._headers != list(recorded.headers):  # type: ignore[attr-defined]
        return None
    return tuple(items)


def set_head(response: http.client.HTTPResponse, recorded: Response, head: Head) -> None:
    status = recorded.status
    response.code = response.status = status  # type: ignore[attr-defined]
    response.reason = head.reason
    response.version = head.version
    response.headers = response.msg = message_of(recorded)
    response.chunked = head.chunked
    if head.chunked:
        response.chunk_left = None
    length = head.length
    if status in (204, 304) or 100 <= status < 200 or response._method == "HEAD":  # type: ignore[attr-defined]
        length = 0
    response.length = length
    response.will_close = head.closes or (not head.chunked and length is None)


def _will_close(version: int, seen: dict[str, str]) -> bool:
    """``HTTPResponse._check_close()``: whether the server closes after this response."""
    connection = seen.get("connection", "").lower()
    if version == 11:
        return "close" in connection
    if seen.get("keep-alive") or "keep-alive" in connection:
        return False
    return "keep-alive" not in seen.get("proxy-connection", "").lower()


def _socket_error(error: Failure) -> OSError:
    if error.kind in ("read_timeout", "connect_timeout", "write_timeout"):
        return TimeoutError(error.message or "timed out")
    return ConnectionResetError(error.message or "connection reset by peer")


def exception_for(
    urllib3: ModuleType, error: Failure | None, pool: Any, conn: Any, url: str
) -> Exception:
    """The exception ``_make_request`` raised live (by class name when it is one of urllib3's
    or the standard library's, else by kind), so urlopen's retry logic and the caller's
    ``except`` clauses see what they saw when recording."""
    assert error is not None
    exceptions = urllib3.exceptions
    message = error.message
    kind = KIND_BY_EXCEPTION.get(error.type, error.kind)
    if kind == "connect_error":
        return exceptions.NewConnectionError(conn, message)  # type: ignore[no-any-return]
    if kind == "connect_timeout":
        return exceptions.ConnectTimeoutError(conn, message)  # type: ignore[no-any-return]
    if kind in ("read_timeout", "pool_timeout"):
        return exceptions.ReadTimeoutError(pool, url, message)  # type: ignore[no-any-return]
    if kind == "write_timeout":
        return TimeoutError(message)
    if kind == "proxy_error":
        return exceptions.ProxyError(message, OSError(message))  # type: ignore[no-any-return]
    if kind == "protocol_error":
        if error.type == "ProtocolError":
            return exceptions.ProtocolError(message)  # type: ignore[no-any-return]
        return http.client.RemoteDisconnected(message)
    if kind == "read_error":
        return ConnectionResetError(message)
    if kind == "write_error":
        return BrokenPipeError(message)
    if kind == "unsupported_protocol":
        return exceptions.LocationParseError(message)  # type: ignore[no-any-return]
    return exceptions.ProtocolError(message)  # type: ignore[no-any-return]
