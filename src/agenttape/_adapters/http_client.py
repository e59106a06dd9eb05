"""The standard library's ``http.client`` (and ``urllib.request``, which sends through it),
and every library built on its connection classes (urllib3 1.x, and so requests and botocore
on urllib3 1.26).

Under a tape a connection's ``connect`` is put off and, from ``putrequest`` on, what the
client sends (request line, headers, body, in as many ``send`` calls as it makes) is kept:
``getresponse`` holds the whole request as sent. There the tape decides. Replay hands ``http.client`` the recorded
response over an in-memory socket (no socket is ever opened); recording opens the connection
then, sends the kept bytes as they were, and tees the body as the caller reads it. The state
machine of ``HTTPConnection`` (``putrequest``, ``endheaders``, ``getresponse``) runs as
live, so ``urlopen``, redirects, chunked uploads and streamed reads behave as they do live.

A class of the library's own that overrides ``connect`` (urllib3 1.x's) is put off as well
through ``defer_connect``. Live traffic inside another adapter (urllib3 2's, which sits on
these classes too) is never seen here: no tape is active inside an adapter.
"""

from __future__ import annotations

import http.client
import re
import socket
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

from .._core import runtime
from .._core.blame import passed_through
from .._core.exchange import Live, Replay, begin, serving
from .._core.models import Failure, Request
from .._core.tape import Tape
from . import ledger, wire
from .urllib3.record import KIND_BY_EXCEPTION, failure_of, hook_response
from .urllib3.replay import parsed_response, socket_for

__tracebackhide__ = passed_through

_BEGUN = "_agenttape_begun"
_KEPT = "_agenttape_kept"
"""On a connection whose ``connect`` was put off: the bytes sent since (a bytearray)."""


def install(module: ModuleType) -> list[ledger.Patch]:
    connection = module.HTTPConnection
    for name in ("set_tunnel", "auto_open"):
        getattr(connection, name)
    # The original ``send`` as this install finds it: ``getresponse`` sends through it.
    original_send = connection.send
    return [
        defer_connect(connection),
        defer_connect(module.HTTPSConnection),
        ledger.wrap(connection, "putrequest", _make_putrequest),
        ledger.wrap(connection, "send", _make_send),
        ledger.wrap(
            connection, "getresponse", lambda found: _make_getresponse(original_send, found)
        ),
    ]


_elsewhere: tuple[type, ...] = ()


def served_elsewhere(cls: type) -> None:
    """Leaves the connections of ``cls`` to the adapter of the library that made them (urllib3
    2's, which renders and replays requests on these classes itself)."""
    global _elsewhere
    if cls not in _elsewhere:
        _elsewhere = (*_elsewhere, cls)


def _serving(connection: Any) -> bool:
    """Whether a request made on ``connection`` is the tape's here: one is active, this
    adapter is in place, and no other adapter serves that kind of connection."""
    return runtime.active() is not None and not isinstance(connection, _elsewhere)


def defer_connect(cls: type) -> ledger.Patch:
    """Puts off ``cls.connect`` (and that of a class that overrides ``http.client``'s) under
    a tape: the connection opens only if the request is recorded."""
    return ledger.Patch(cls, "connect", _make_connect, expect=lambda found: "connect" in vars(cls))


def _make_connect(original: Callable[[Any], None]) -> Callable[[Any], None]:
    def connect(self: Any) -> None:
        if not _serving(self):
            original(self)

    connect.__wrapped__ = original  # type: ignore[attr-defined]
    return connect


def _make_putrequest(original: Callable[..., None]) -> Callable[..., None]:
    def putrequest(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if _serving(self):
            vars(self)[_KEPT] = bytearray()  # the request starts: keep what is sent

    return putrequest


def _make_send(original: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    def send(self: Any, data: Any) -> None:
        kept = vars(self).get(_KEPT)
        if kept is None:
            if self.sock is None and self.auto_open:
                _connect_live(self)  # bytes sent outside a request: as live
            original(self, data)
            return
        if hasattr(data, "read"):
            while block := data.read(self.blocksize):
                kept += block.encode("iso-8859-1") if isinstance(block, str) else block
        elif isinstance(data, (bytes, bytearray, memoryview)):
            kept += data
        else:
            for piece in data:
                kept += piece
        if complete(kept):
            _begin(self, original)
        elif self.sock is None and _awaits_continue(kept):
            self.sock = _Continue.answering()

    return send


def complete(kept: bytearray) -> bool:
    """Whether ``kept`` holds a whole request: its head, and the body its head announces."""
    split = kept.find(b"\r\n\r\n")
    if split < 0:
        return False
    headers = wire.parse_head(bytes(kept[:split]))[3]
    body = bytes(kept[split + 4 :])
    if wire.is_chunked(headers):
        decoder = wire.BodyDecoder(chunked=True, length=None)
        decoder.feed(body)
        return decoder.done
    length = wire.header(headers, "content-length")
    return length is None or not length.strip().isdigit() or len(body) >= int(length)


class _Begun:
    """A request whose whole bytes were sent: the tape's plan for it, and how to serve it."""

    __slots__ = ("plan", "request", "tape")

    def __init__(self, tape: Tape, request: Request, plan: Replay | Live) -> None:
        self.tape = tape
        self.request = request
        self.plan = plan


def _begin(connection: Any, send: Callable[[Any, Any], None]) -> None:
    """The request is whole: the tape decides now, where the last byte would have left. A
    recording opens the connection and sends the request here, so an error connecting or
    sending is raised where it is live (``urlopen`` turns it into ``URLError``)."""
    raw = bytes(vars(connection).pop(_KEPT))
    if isinstance(connection.sock, _Continue):
        connection.sock.close()
        connection.sock = None
    tape = runtime.active()
    if tape is None:
        if connection.sock is None:
            _connect_live(connection)
        send(connection, raw)
        return
    method, target, headers, body = wire.parse_request(raw)
    url = _url_of(connection, target)
    request = Request(method=method, url=url, headers=headers, body=body)
    plan = begin(tape, request)
    if isinstance(plan, Replay):
        interaction = plan.interaction
        error = interaction.error
        if interaction.response is None and error is not None and error.kind in _SENDING_FAILURES:
            raise _exception_for(error, connection)  # it failed connecting or sending, as live
        vars(connection)[_BEGUN] = _Begun(tape, request, plan)
        return
    vars(connection)[_BEGUN] = _Begun(tape, request, plan)
    with serving(tape, plan, failure_of):
        if connection.sock is None:
            connection.connect()
        send(connection, raw)


_SENDING_FAILURES = frozenset(("connect_error", "connect_timeout", "write_error", "write_timeout"))


class _Continue(socket.socket):
    """What a client that waits for ``100 Continue`` before sending its body (botocore's
    connection) reads while its connection is put off: that answer, at once, from a local
    socket pair. The connection opens, if the request is recorded, once the body is sent."""

    @classmethod
    def answering(cls) -> _Continue:
        ours, theirs = socket.socketpair()
        theirs.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        theirs.close()
        return cls(fileno=ours.detach())


def _awaits_continue(kept: bytearray) -> bool:
    split = kept.find(b"\r\n\r\n")
    if split < 0:
        return False
    expect = wire.header(wire.parse_head(bytes(kept[:split]))[3], "expect")
    return expect is not None and expect.strip().lower() == "100-continue"


def _connect_live(connection: Any) -> None:
    token = runtime.enter_adapter()
    try:
        connection.connect()
    finally:
        runtime.exit_adapter(token)


def _make_getresponse(
    send: Callable[[Any, Any], None], original: Callable[..., Any]
) -> Callable[..., Any]:
    def getresponse(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs:
            # Arguments it does not take (urllib3 1.x tries buffering=True first) raise as
            # they do unpatched, before anything else.
            return original(self, *args, **kwargs)
        if _KEPT in vars(self):  # a request cut short: served as it stands
            _begin(self, send)
        begun = vars(self).pop(_BEGUN, None)
        if begun is None:
            return original(self)
        method = begun.request.method

        plan = begun.plan
        with serving(begun.tape, plan, _failure_of_reading):
            if isinstance(plan, Live):
                undo = hook_response(self, plan.recording, method)
                try:
                    return self.getresponse()
                finally:
                    undo()
            interaction, schedule = plan.interaction, plan.playback
            if interaction.response is None:
                schedule.wait(schedule.head)
                raise _exception_for(interaction.error)
            response_class, own = self.response_class, self.sock
            plain = response_class is http.client.HTTPResponse
            replayed = self.sock = socket_for(interaction, schedule, head=not plain)
            if plain:
                self.response_class = parsed_response
            try:
                return original(self)
            finally:
                self.response_class = response_class
                if self.sock is replayed:
                    self.sock = own

    return getresponse


def _failure_of_reading(exc: BaseException) -> Failure | None:
    """A socket timeout while the response is awaited is a read timeout."""
    failure = failure_of(exc)
    if failure is not None and isinstance(exc, TimeoutError):
        return Failure("read_timeout", "ReadTimeoutError", failure.message)
    return failure


def _url_of(connection: Any, target: str) -> str:
    if target.startswith(("http://", "https://")):
        return target  # through a proxy: the absolute form
    secure = getattr(connection, "default_port", None) == http.client.HTTPS_PORT
    host, port = connection.host, connection.port
    if getattr(connection, "_tunnel_host", None):
        host, port, secure = connection._tunnel_host, connection._tunnel_port, True
    scheme = "https" if secure else "http"
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != (443 if secure else 80):
        netloc = f"{netloc}:{port}"
    if not target.startswith("/"):
        target = "/" + target if urlsplit(target).scheme == "" and target != "*" else target
    return f"{scheme}://{netloc}{target}"


def _exception_for(error: Failure | None, connection: Any = None) -> Exception:
    """What ``http.client`` or its socket raised live, by kind; urllib3 1.x's own connection
    errors as themselves (its retry logic tells them apart)."""
    assert error is not None
    message = error.message
    own = getattr(sys.modules.get("urllib3.exceptions"), error.type, None)
    if error.type in ("NewConnectionError", "ConnectTimeoutError") and own is not None:
        return own(connection, message)  # type: ignore[no-any-return]
    kind = KIND_BY_EXCEPTION.get(error.type, error.kind)
    if kind == "connect_error":
        if error.type == "gaierror":
            return _name_not_resolved(message)
        if error.type == "ConnectionRefusedError" or "refused" in message.lower():
            return ConnectionRefusedError(message)
        return OSError(message)
    if kind in ("connect_timeout", "read_timeout", "write_timeout", "pool_timeout"):
        return TimeoutError(message or "timed out")
    if kind == "protocol_error":
        return http.client.RemoteDisconnected(message)
    if kind == "write_error":
        return BrokenPipeError(message)
    return ConnectionResetError(message or "connection reset by peer")


def _name_not_resolved(message: str) -> socket.gaierror:
    """``socket.gaierror`` as ``getaddrinfo`` raised it (``[Errno -2] Name or service not
    known``): httplib2 turns it into its own ``ServerNotFoundError``."""
    found = re.fullmatch(r"\[Errno (-?\d+)\] (.*)", message, re.DOTALL)
    if found is None:
        return socket.gaierror(message)
    return socket.gaierror(int(found.group(1)), found.group(2))
