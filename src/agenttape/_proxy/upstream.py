"""The recording proxy's side towards the real server: HTTP/1.1 over a plain or TLS socket.

The request goes out as the client wrote it (header order and case, its own framing); h11,
the parser httpcore and so httpx and the OpenAI and Anthropic SDKs use, reads the response,
so a body is recorded in the same pieces as an in-process recording of those clients. Each
client connection keeps its own upstream connections alive between requests.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import h11

from .._core.models import FailureKind, Headers, Request

READ_SIZE = 64 * 1024  # what httpcore reads per call, so pieces come out as in-process
CONNECT_TIMEOUT = 30.0
_HOP_BY_HOP = frozenset({"proxy-connection", "proxy-authorization"})


class UpstreamError(Exception):
    """Reaching or reading the upstream failed; ``kind`` is how it is recorded."""

    def __init__(self, kind: FailureKind, type_name: str, message: str) -> None:
        super().__init__(message)
        self.kind: FailureKind = kind
        self.type_name = type_name


class ClientGone(Exception):
    """The client closed its connection (or reset its stream) while the proxy waited."""


@dataclass(frozen=True, slots=True)
class Origin:
    scheme: str
    host: str
    port: int

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def origin_of(url: str) -> Origin:
    """The origin of an ``http(s)://host[:port]`` URL."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http:// or https:// URL")
    return Origin(scheme, parts.hostname, parts.port or (443 if scheme == "https" else 80))


class Waiter:
    """What a waiting read watches besides the upstream socket: the client going away.
    ``flush`` runs before the read blocks, so output held back to be sent together goes out
    before any wait."""

    poll: float | None = None

    def fds(self) -> list[Any]:
        return []

    def gone(self) -> bool:
        return False

    def flush(self) -> None:
        pass


def upstream_headers(headers: Headers) -> Headers:
    """The client's headers without those addressed to the proxy itself."""
    return [(name, value) for name, value in headers if name.lower() not in _HOP_BY_HOP]


class UpstreamConnection:
    __slots__ = ("_conn", "origin", "reused", "sock")

    def __init__(self, origin: Origin, sock: socket.socket) -> None:
        self.origin = origin
        self.sock = sock
        self.reused = False
        self._conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=256 * 1024)

    def send(self, request: Request, target: str) -> None:
        """Writes the request as the client framed it; h11 follows along to read the answer."""
        headers = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in request.headers]
        lines = [request_head(request.method, target, request.headers)]
        chunked = any(
            n.lower() == b"transfer-encoding" and v.lower().rstrip().endswith(b"chunked")
            for n, v in headers
        )
        body = request.body
        if chunked:
            lines.append((b"%x\r\n%b\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n")
        else:
            lines.append(body)
        try:
            self._conn.send(
                h11.Request(method=request.method, target=target, headers=_framing(headers, body))
            )
            if body:
                self._conn.send(h11.Data(data=body))
            self._conn.send(h11.EndOfMessage())
        except h11.LocalProtocolError as exc:
            raise UpstreamError("protocol_error", "LocalProtocolError", str(exc)) from exc
        try:
            self.sock.sendall(b"".join(lines))
        except OSError as exc:
            raise UpstreamError("write_error", type(exc).__name__, str(exc)) from exc

    def next_event(self, waiter: Waiter) -> Any:
        """The next response event; waits for the upstream, or raises ClientGone."""
        conn = self._conn
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise UpstreamError("protocol_error", "RemoteProtocolError", str(exc)) from exc
            if event is not h11.NEED_DATA:
                return event
            self._wait(waiter)
            try:
                data = self.sock.recv(READ_SIZE)
            except TimeoutError as exc:
                raise UpstreamError("read_timeout", "ReadTimeout", str(exc)) from exc
            except OSError as exc:
                raise UpstreamError("read_error", type(exc).__name__, str(exc)) from exc
            conn.receive_data(data)

    def _wait(self, waiter: Waiter) -> None:
        sock = self.sock
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return
        waiter.flush()
        watched = [sock, *waiter.fds()]
        while True:
            try:
                ready, _, _ = select.select(watched, [], [], waiter.poll)
            except (OSError, ValueError) as exc:  # the client's socket was closed under us
                raise ClientGone() from exc
            if sock in ready:
                return
            if waiter.gone():
                raise ClientGone()

    @property
    def protocol(self) -> str:
        """The protocol the server agreed to by ALPN: ``h2`` or ``http/1.1`` (also when it
        chose none, or the connection is plain)."""
        sock = self.sock
        chosen = sock.selected_alpn_protocol() if isinstance(sock, ssl.SSLSocket) else None
        return chosen or "http/1.1"

    @property
    def reusable(self) -> bool:
        conn = self._conn
        if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
            return False
        try:
            conn.start_next_cycle()
        except h11.LocalProtocolError:
            return False
        return True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def request_head(method: str, target: str, headers: Headers) -> bytes:
    """A request line and headers as the client wrote them (order and case kept)."""
    lines = [f"{method} {target} HTTP/1.1", *(f"{n}: {v}" for n, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _framing(headers: list[tuple[bytes, bytes]], body: bytes) -> list[tuple[bytes, bytes]]:
    """What h11 needs to follow the exchange (it never writes these): a Host, the framing of
    what is sent, and the headers that decide whether the connection stays open."""
    kept = [(b"Host", b"upstream")]
    kept += [(n, v) for n, v in headers if n.lower() in (b"connection", b"expect")]
    if body:
        kept.append((b"Content-Length", b"%d" % len(body)))
    return kept


def open_socket(origin: Origin, tls: Callable[[], ssl.SSLContext]) -> socket.socket:
    """A connection to ``origin`` (TLS from ``tls()`` for https), its failures as the
    ``UpstreamError`` the client is answered with."""
    try:
        sock = socket.create_connection((origin.host, origin.port), timeout=CONNECT_TIMEOUT)
    except TimeoutError as exc:
        raise UpstreamError("connect_timeout", "ConnectTimeout", str(exc)) from exc
    except OSError as exc:
        raise UpstreamError("connect_error", type(exc).__name__, str(exc)) from exc
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if origin.scheme == "https":
        try:
            sock = tls().wrap_socket(sock, server_hostname=origin.host)
        except TimeoutError as exc:
            sock.close()
            raise UpstreamError("connect_timeout", "ConnectTimeout", str(exc)) from exc
        except (OSError, ssl.CertificateError) as exc:
            sock.close()
            raise UpstreamError("connect_error", type(exc).__name__, str(exc)) from exc
    sock.settimeout(None)
    return sock


class UpstreamPool:
    """Idle upstream connections of one client connection, by origin."""

    def __init__(self, tls: Callable[[], ssl.SSLContext]) -> None:
        self._tls = tls
        self._idle: dict[Origin, list[UpstreamConnection]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def acquire(self, origin: Origin) -> UpstreamConnection:
        with self._lock:
            idle = self._idle.get(origin)
            while idle:
                connection = idle.pop()
                if _still_open(connection.sock):
                    connection.reused = True
                    return connection
                connection.close()
        return self.connect(origin)

    def connect(self, origin: Origin) -> UpstreamConnection:
        return UpstreamConnection(origin, open_socket(origin, self._tls))

    def keep(self, connection: UpstreamConnection) -> None:
        """An idle connection opened ahead of its first request (to learn the server's ALPN)."""
        with self._lock:
            if not self._closed:
                self._idle.setdefault(connection.origin, []).append(connection)
                return
        connection.close()

    def release(self, connection: UpstreamConnection) -> None:
        if connection.reusable and not self._closed:
            with self._lock:
                self._idle.setdefault(connection.origin, []).append(connection)
        else:
            connection.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for connections in self._idle.values():
                for connection in connections:
                    connection.close()
            self._idle.clear()


def _still_open(sock: socket.socket) -> bool:
    """An idle connection the server has not closed (nothing to read yet)."""
    try:
        ready, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not ready


def reset(sock: socket.socket) -> None:
    """Closes with a TCP reset (no TLS close_notify, no FIN): what a dropped connection is."""
    raw = sock
    if isinstance(sock, ssl.SSLSocket):
        with contextlib.suppress(OSError):
            raw = socket.socket(fileno=sock.detach())
    with contextlib.suppress(OSError):
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        raw.close()


def upstream_context() -> ssl.SSLContext:
    """How the proxy verifies real servers: the default trust store (``SSL_CERT_FILE`` of the
    proxy's own environment included), HTTP/1.1 only."""
    context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])
    return context
