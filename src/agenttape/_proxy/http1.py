"""HTTP/1.1 towards a client of the recording proxy, on h11: a proxy connection, or the
inside of a ``CONNECT`` tunnel."""

from __future__ import annotations

import contextlib
import http
import select
import socket
import ssl
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import h11

from .._adapters.header_tables import decode_header_set
from .._adapters.wire import header, is_chunked
from .._core.models import Headers, Request, Response
from .adapter import ProxyRequest
from .guard import foreign_host, framing_problem, from_web_page
from .http2 import H2_PREFACE, ClientConnection, H2Connection
from .upstream import (
    READ_SIZE,
    ClientGone,
    Origin,
    UpstreamPool,
    Waiter,
    origin_of,
    reset,
    upstream_headers,
)

if TYPE_CHECKING:
    from .listener import ProxyServer


def peek(sock: socket.socket, size: int) -> bytes:
    try:
        return sock.recv(size, socket.MSG_PEEK)
    except OSError:
        return b""


def _status_line(response: Response) -> bytes:
    version = response.http_version if response.http_version.startswith("HTTP/1.") else "HTTP/1.1"
    reason = response.reason
    if not reason and not response.http_version.startswith("HTTP/1."):
        with contextlib.suppress(ValueError):
            reason = http.HTTPStatus(response.status).phrase  # HTTP/2 recordings carry none
    return f"{version} {response.status} {reason}\r\n".encode("latin-1")


class H1Connection(ClientConnection):
    """One client connection speaking HTTP/1.1 (a proxy connection, or a tunnel's inside)."""

    def __init__(
        self,
        server: ProxyServer,
        sock: socket.socket,
        pool: UpstreamPool,
        tunnel: Origin | None,
        pending: bytes = b"",
    ) -> None:
        super().__init__(server, sock, pool, pending)
        self.tunnel = tunnel
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=256 * 1024)

    def _next(self) -> Any:
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            if self.conn.they_are_waiting_for_100_continue:
                self.sock.sendall(
                    self.conn.send(h11.InformationalResponse(status_code=100, headers=[])) or b""
                )
            data = self.sock.recv(READ_SIZE)
            self.conn.receive_data(data)

    def run(self) -> None:
        """Serve the connection's requests one after another, or hand it to HTTP/2."""
        if self._served_as_h2c():
            return
        if self.pending:
            self.conn.receive_data(self.pending)
        while self._serve_one():
            pass

    def _served_as_h2c(self) -> bool:
        """HTTP/2 with prior knowledge, without TLS (h2c): served by ``H2Connection``."""
        plain = not isinstance(self.sock, ssl.SSLSocket)
        if not plain or not (
            self.pending.startswith(H2_PREFACE[:4])
            or (not self.pending and peek(self.sock, len(H2_PREFACE)) == H2_PREFACE)
        ):
            return False
        origin = self.tunnel or self.server.upstream_origin
        if origin is not None:
            H2Connection(
                self.server, self.sock, self.pool, origin, self.pending, self.tunnel is None
            ).run()
        return True

    def _serve_one(self) -> bool:
        """One request, forwarded or replayed; False once the connection is done with."""
        try:
            event = self._next()
        except h11.RemoteProtocolError as exc:
            self._refuse(400, f"malformed request: {exc}")
            return False
        if not isinstance(event, h11.Request):
            return False
        method = event.method.decode("ascii", "replace")
        target = event.target.decode("latin-1")
        headers = decode_header_set(event.headers.raw_items())
        if method == "CONNECT":
            self._connect(target)
            return False
        problem = framing_problem(headers)
        if problem is not None:
            # Never forwarded nor recorded: a server may read the body as another request.
            self.server.log(f"refused {method} {target}: ambiguous framing ({problem})")
            self._refuse(400, f"ambiguous request framing: {problem}")
            return False
        body = self._body()
        incoming = None if body is None else self._incoming(method, target, headers, body)
        if incoming is None:
            return False
        if "websocket" in (header(headers, "upgrade") or "").lower():
            # The connection is the session's from here on, whatever its outcome.
            pending, _closed = self.conn.trailing_data
            self.server.adapter.handle_websocket(incoming, self.sock, self.pool, pending)
            return False
        return self._answer(incoming, method)

    def _body(self) -> bytes | None:
        """The request's body; None when the client sent something else before its end."""
        body = []
        while True:
            part = self._next()
            if isinstance(part, h11.Data):
                body.append(part.data)
            elif isinstance(part, h11.EndOfMessage):
                return b"".join(body)
            else:
                return None

    def _answer(self, incoming: ProxyRequest, method: str) -> bool:
        """Answer through the adapter; False when the connection closes after it."""
        client = _H1Client(self, method)
        self.server.adapter.handle(incoming, client, self.pool)
        if client.closed or client.close_after:
            if not client.closed:
                with contextlib.suppress(OSError):
                    self.sock.close()
            return False
        # h11 follows along: the answer went out as recorded, byte for byte, not via h11.
        self.conn.send(h11.Response(status_code=200, headers=[(b"content-length", b"0")]))
        self.conn.send(h11.EndOfMessage())
        try:
            self.conn.start_next_cycle()
        except h11.LocalProtocolError:
            return False
        return True

    def _connect(self, target: str) -> None:
        if self.tunnel is not None:
            self._refuse(405, "CONNECT inside a tunnel is not supported")
            return
        self.conn.send(h11.Response(status_code=200, headers=[]))
        self.sock.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        pending, _closed = self.conn.trailing_data
        self.server.open_tunnel(self.sock, target, pending, self.pool)

    def _incoming(
        self, method: str, target: str, headers: Headers, body: bytes
    ) -> ProxyRequest | None:
        server = self.server
        upgrade = (header(headers, "upgrade") or "").lower()
        if (
            upgrade and "websocket" not in upgrade
        ):  # h2c: answered in HTTP/1.1, as a server that ignores the offer would
            headers = [(n, v) for n, v in headers if n.lower() not in ("upgrade", "http2-settings")]
        if self.tunnel is not None:
            origin = self.tunnel
            path = target if target.startswith("/") else _path_of(target)
            url = f"{origin.scheme}://{origin.authority}{path}"
        elif target.startswith(("http://", "https://")):
            try:
                origin = origin_of(target)
            except ValueError:
                self._refuse(400, f"cannot proxy {target!r}")
                return None
            path, url = _path_of(target), target
        elif target.startswith("/") and server.upstream_origin is not None:
            refused = foreign_host(header(headers, "host")) or from_web_page(headers)
            if refused is not None:
                server.log(f"refused {method} {target}: {refused}")
                self._refuse(403, f"refused: {refused}; the proxy serves programs on this machine")
                return None
            origin = server.upstream_origin
            base = urlsplit(server.upstream or "")
            path = base.path.rstrip("/") + target
            url = f"{origin.scheme}://{origin.authority}{path}"
            headers = [
                (name, origin.authority) if name.lower() == "host" else (name, value)
                for name, value in headers
            ]
        else:
            self._refuse(
                400,
                "this is agenttape's recording proxy: send requests through it as a proxy "
                "(HTTPS_PROXY/HTTP_PROXY), or start it with --upstream URL to use it as a base URL",
            )
            return None
        request = Request(method, url, upstream_headers(headers), body)
        return ProxyRequest(request, server.route(origin), path)

    def _refuse(self, status: int, message: str) -> None:
        body = f"agenttape proxy: {message}\n".encode()
        head = (
            f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        with contextlib.suppress(OSError):
            self.sock.sendall(head.encode() + body)


def _path_of(url: str) -> str:
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


class _H1Client:
    """Writes one response to an HTTP/1.1 client as recorded: status line, headers in their
    order and case, each body piece framed as one chunk when the body is chunked.

    The head waits to go out with the first piece of the body (one write, one wake-up of the
    client) unless the exchange is about to wait first (``flush``)."""

    def __init__(self, connection: H1Connection, method: str) -> None:
        self._connection = connection
        self._sock = connection.sock
        self._method = method
        self._body = True
        self._chunked = False
        self._eof = False
        self._head = b""
        self.closed = False
        self.close_after = False
        self.waiter: Waiter = _H1Waiter(connection, self)

    def _send(self, data: bytes) -> None:
        if self._head:
            data, self._head = self._head + data, b""
        try:
            self._sock.sendall(data)
        except OSError as exc:
            self.closed = True
            raise ClientGone() from exc

    def flush(self) -> None:
        if self._head:
            self._send(b"")

    def head(self, response: Response) -> None:
        status, headers = response.status, response.headers
        self._body = not (self._method == "HEAD" or status in (204, 304) or 100 <= status < 200)
        self._chunked = self._body and is_chunked(headers)
        self._eof = self._body and not self._chunked and header(headers, "content-length") is None
        connection = (header(headers, "connection") or "").lower()
        self.close_after = self._eof or "close" in connection
        lines = [_status_line(response)]
        lines += [f"{name}: {value}\r\n".encode("latin-1") for name, value in headers]
        lines.append(b"\r\n")
        self._head = b"".join(lines)

    def data(self, chunk: bytes) -> None:
        if not self._body or not chunk:
            return
        self._send(b"%x\r\n%b\r\n" % (len(chunk), chunk) if self._chunked else chunk)

    def end(self) -> None:
        if self._chunked:
            self._send(b"0\r\n\r\n")
        else:
            self.flush()

    def reset(self) -> None:
        with contextlib.suppress(ClientGone):
            self.flush()  # a head that arrived before the failure reached the client
        self.closed = True
        reset(self._sock)

    def close(self) -> None:
        with contextlib.suppress(ClientGone):
            self.flush()
        self.closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()

    def hold(self) -> None:
        with contextlib.suppress(ClientGone):
            self.flush()
        while not self.closed:
            try:
                select.select([self._sock], [], [])
            except (OSError, ValueError):
                break
            if self.waiter.gone():
                break
        self.closed = True
        with contextlib.suppress(OSError):
            self._sock.close()


class _H1Waiter(Waiter):
    """An HTTP/1.1 client is gone when its socket reads end-of-file; bytes it sent meanwhile
    (a pipelined request) are kept for the parser."""

    def __init__(self, connection: H1Connection, client: _H1Client) -> None:
        self._connection = connection
        self._client = client

    def fds(self) -> list[Any]:
        return [self._connection.sock]

    def flush(self) -> None:
        self._client.flush()

    def gone(self) -> bool:
        sock = self._connection.sock
        try:
            sock.setblocking(False)
            try:
                data = sock.recv(READ_SIZE)
            finally:
                sock.setblocking(True)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
            return False
        except (OSError, ValueError):
            return True
        if not data:
            return True
        self._connection.conn.receive_data(data)
        return False
