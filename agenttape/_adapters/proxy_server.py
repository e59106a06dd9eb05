"""The recording proxy's engine: a listener on 127.0.0.1, HTTP/1.1 (h11) and HTTP/2 (h2)
towards the programs, ``CONNECT`` tunnels opened with a certificate the local CA signs for
the host, and base-URL mode (``--upstream``) for SDKs given a base URL instead of a proxy.

Each client connection has a thread of its own; an HTTP/2 connection also gives each request
stream a thread. Only the connection's thread reads its socket, and writes go through one
lock, so a TLS socket is never used from two threads at once.
"""

from __future__ import annotations

import contextlib
import http
import ipaddress
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import h11

from .._core.models import Headers, Request, Response
from .header_tables import decode_header_set
from .proxy import ProxyAdapter, ProxyRequest
from .proxy_ca import CertificateAuthority
from .proxy_upstream import (
    ClientGone,
    Origin,
    UpstreamPool,
    Waiter,
    reset,
    upstream_context,
    upstream_headers,
)
from .wire import header, is_chunked

READ_SIZE = 64 * 1024
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
TLS_HANDSHAKE = 0x16
_H2_DROPPED = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"}
)
# Handshake failures that mean the client does not trust the certificate it was shown.
_DISTRUST = (
    "UNKNOWN_CA",
    "BAD_CERTIFICATE",
    "CERTIFICATE_UNKNOWN",
    "UNSUPPORTED_CERTIFICATE",
    "DECRYPT_ERROR",
    "EOF",
)


def origin_of(url: str) -> Origin:
    """The origin of an ``http(s)://host[:port]`` URL."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http:// or https:// URL")
    return Origin(scheme, parts.hostname, parts.port or (443 if scheme == "https" else 80))


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


class ProxyServer:
    """Listens on 127.0.0.1 and serves every connection through ``adapter``.

    ``upstream`` (base-URL mode) is where requests that name no host go; ``routes`` sends a
    recorded origin's live traffic elsewhere (a local stand-in) while the cassette keeps the
    origin the program asked for.
    """

    def __init__(
        self,
        adapter: ProxyAdapter,
        ca: CertificateAuthority | None,
        *,
        port: int = 0,
        upstream: str | None = None,
        routes: dict[Origin, Origin] | None = None,
        log: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.adapter = adapter
        self.ca = ca
        self.log = log
        self.upstream = upstream.rstrip("/") if upstream else None
        self.upstream_origin = origin_of(upstream) if upstream else None
        self.routes = dict(routes or {})
        self.distrusted: list[tuple[str, str]] = []
        self._listener = socket.create_server(("127.0.0.1", port), backlog=128)
        self.port: int = self._listener.getsockname()[1]
        self._upstream_tls: ssl.SSLContext | None = None
        self._connections: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self._stopping = False
        self._thread = threading.Thread(target=self._accept, name="agenttape-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ProxyServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops listening and closes every client connection still open."""
        self._stopping = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=5)
        with self._lock:
            connections = list(self._connections)
            threads = list(self._threads)
        for sock in connections:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        # Exchanges under way see their sockets close and seal what they recorded.
        deadline = time.monotonic() + 2.0
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def upstream_tls(self) -> ssl.SSLContext:
        if self._upstream_tls is None:
            self._upstream_tls = upstream_context()
        return self._upstream_tls

    def route(self, origin: Origin) -> Origin:
        return self.routes.get(origin, origin)

    # -- connections ---------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stopping:
            try:
                sock, address = self._listener.accept()
            except OSError:
                return
            if not is_loopback(address[0]):
                # Never reached while listening on 127.0.0.1; kept should that ever change.
                self.log(
                    f"refused a connection from {address[0]}: the proxy serves this machine only"
                )
                sock.close()
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            thread = threading.Thread(
                target=self._serve, args=(sock,), name="agenttape-proxy-client", daemon=True
            )
            with self._lock:
                self._threads.add(thread)
            thread.start()

    def _serve(self, sock: socket.socket) -> None:
        with self._lock:
            self._connections.add(sock)
        pool = UpstreamPool(self.upstream_tls)
        try:
            _H1Connection(self, sock, pool, tunnel=None).run()
        except Exception as exc:  # a broken client never stops the proxy
            if not self._stopping and not isinstance(exc, (OSError, ClientGone)):
                self.log(f"client connection failed: {type(exc).__name__}: {exc}")
        finally:
            pool.close()
            with contextlib.suppress(OSError):
                sock.close()
            with self._lock:
                self._connections.discard(sock)
                self._threads.discard(threading.current_thread())

    def open_tunnel(
        self, sock: socket.socket, target: str, pending: bytes, pool: UpstreamPool
    ) -> None:
        """After ``CONNECT target``: TLS with a certificate for the host when the client starts
        a handshake, else plain HTTP inside the tunnel."""
        host, _colon, port_text = target.rpartition(":")
        if not host or not port_text.isdigit():
            host, port_text = target, "443"
        host = host.strip("[]")
        port = int(port_text)
        first = pending[:1] or _peek(sock, 1)
        if not first:
            return
        if first[0] != TLS_HANDSHAKE:
            _H1Connection(self, sock, pool, Origin("http", host, port), pending).run()
            return
        if pending or self.ca is None:
            return  # a handshake sent before the tunnel was confirmed is not supported
        try:
            secure = self.ca.context_for(host).wrap_socket(sock, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            self._refused(host, exc)
            return
        origin = Origin("https", host, port)
        with self._lock:
            self._connections.add(secure)
        try:
            if secure.selected_alpn_protocol() == "h2":
                _H2Connection(self, secure, pool, origin).run()
            else:
                _H1Connection(self, secure, pool, origin).run()
        finally:
            with self._lock:
                self._connections.discard(secure)
            with contextlib.suppress(OSError):
                secure.close()

    def _refused(self, host: str, exc: BaseException) -> None:
        reason = getattr(exc, "reason", None) or type(exc).__name__
        self.distrusted.append((host, str(reason)))
        if any(word in str(reason).upper() for word in _DISTRUST) or isinstance(
            exc, (ssl.SSLEOFError, ConnectionError)
        ):
            assert self.ca is not None
            self.log(
                f"the client closed the TLS handshake for {host} ({reason}): it does not trust "
                f"the agenttape CA. Trust {self.ca.cert_path} (agenttape proxy --print-ca "
                "prints it), or start the program with agenttape run, which sets "
                "SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE"
            )
        else:
            self.log(f"TLS handshake with the client for {host} failed: {exc}")


def _peek(sock: socket.socket, size: int) -> bytes:
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


# -- HTTP/1.1 ----------------------------------------------------------------------------


class _H1Connection:
    """One client connection speaking HTTP/1.1 (a proxy connection, or a tunnel's inside)."""

    def __init__(
        self,
        server: ProxyServer,
        sock: socket.socket,
        pool: UpstreamPool,
        tunnel: Origin | None,
        pending: bytes = b"",
    ) -> None:
        self.server = server
        self.sock = sock
        self.pool = pool
        self.tunnel = tunnel
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=256 * 1024)
        self.pending = pending

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
        plain = not isinstance(self.sock, ssl.SSLSocket)
        if plain and (
            self.pending.startswith(H2_PREFACE[:4])
            or (not self.pending and _peek(self.sock, len(H2_PREFACE)) == H2_PREFACE)
        ):
            # HTTP/2 with prior knowledge, without TLS (h2c).
            origin = self.tunnel or self.server.upstream_origin
            if origin is not None:
                _H2Connection(
                    self.server, self.sock, self.pool, origin, self.pending, self.tunnel is None
                ).run()
            return
        if self.pending:
            self.conn.receive_data(self.pending)
        while True:
            try:
                event = self._next()
            except h11.RemoteProtocolError as exc:
                self._refuse(400, f"malformed request: {exc}")
                return
            if not isinstance(event, h11.Request):
                return
            method = event.method.decode("ascii", "replace")
            target = event.target.decode("latin-1")
            headers = decode_header_set(event.headers.raw_items())
            if method == "CONNECT":
                self._connect(target)
                return
            body = []
            while True:
                part = self._next()
                if isinstance(part, h11.Data):
                    body.append(part.data)
                elif isinstance(part, h11.EndOfMessage):
                    break
                else:
                    return
            incoming = self._incoming(method, target, headers, b"".join(body))
            if incoming is None:
                return
            if "websocket" in (header(headers, "upgrade") or "").lower():
                # The connection is the session's from here on, whatever its outcome.
                pending, _closed = self.conn.trailing_data
                self.server.adapter.handle_websocket(incoming, self.sock, self.pool, pending)
                return
            client = _H1Client(self, method)
            self.server.adapter.handle(incoming, client, self.pool)
            if client.closed or client.close_after:
                if not client.closed:
                    with contextlib.suppress(OSError):
                        self.sock.close()
                return
            # h11 follows along: the answer went out as recorded, byte for byte, not via h11.
            self.conn.send(h11.Response(status_code=200, headers=[(b"content-length", b"0")]))
            self.conn.send(h11.EndOfMessage())
            try:
                self.conn.start_next_cycle()
            except h11.LocalProtocolError:
                return

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

    def __init__(self, connection: _H1Connection, method: str) -> None:
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

    def __init__(self, connection: _H1Connection, client: _H1Client) -> None:
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


# -- HTTP/2 ------------------------------------------------------------------------------


class _Stream:
    __slots__ = ("body", "gone", "headers", "stream_id")

    def __init__(self, stream_id: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.stream_id = stream_id
        self.headers = headers
        self.body: list[bytes] = []
        self.gone = threading.Event()


class _H2Connection:
    """One client connection speaking HTTP/2; each request stream is served in a thread."""

    def __init__(
        self,
        server: ProxyServer,
        sock: socket.socket,
        pool: UpstreamPool,
        origin: Origin,
        pending: bytes = b"",
        base_url: bool = False,
    ) -> None:
        import h2.config
        import h2.connection

        self.base_url = base_url
        self.server = server
        self.sock = sock
        self.pool = pool
        self.origin = origin
        self.pending = pending
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        self.lock = threading.RLock()
        self.window = threading.Condition(self.lock)
        self.streams: dict[int, _Stream] = {}

    def flush(self) -> None:
        """Sends what h2 has queued; the caller holds the lock."""
        data = self.conn.data_to_send()
        if not data:
            return
        view = memoryview(data)
        while view:
            try:
                sent = self.sock.send(view)
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                select.select([], [self.sock], [], 1.0)
                continue
            view = view[sent:]

    def run(self) -> None:
        import h2.events
        import h2.exceptions

        with self.lock:
            self.conn.initiate_connection()
            self.conn.increment_flow_control_window(2**24)
            self.flush()
        self.sock.setblocking(False)
        data: bytes | None = self.pending
        try:
            while True:
                if not data:
                    data = self._read()
                    if data is None:
                        continue
                    if not data:
                        return
                with self.lock:
                    try:
                        events = self.conn.receive_data(data)
                    except h2.exceptions.ProtocolError:
                        self.flush()
                        return
                    data = b""
                    for event in events:
                        self._on(event, h2.events)
                    self.flush()
        finally:
            with self.lock:
                for stream in self.streams.values():
                    stream.gone.set()
                self.window.notify_all()

    def _read(self) -> bytes | None:
        sock = self.sock
        if not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
            select.select([sock], [], [])
        with self.lock:
            try:
                return sock.recv(READ_SIZE)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                return None
            except (OSError, ValueError):
                return b""

    def _on(self, event: Any, events: Any) -> None:
        conn = self.conn
        if isinstance(event, events.RequestReceived):
            self.streams[event.stream_id] = _Stream(event.stream_id, list(event.headers))
        elif isinstance(event, events.DataReceived):
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                stream.body.append(event.data)
            conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, events.StreamEnded):
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                threading.Thread(
                    target=self._serve, args=(stream,), name="agenttape-proxy-stream", daemon=True
                ).start()
        elif isinstance(event, events.StreamReset):
            stream = self.streams.pop(event.stream_id, None)
            if stream is not None:
                stream.gone.set()
            self.window.notify_all()
        elif isinstance(event, (events.WindowUpdated, events.RemoteSettingsChanged)):
            self.window.notify_all()
        elif isinstance(event, events.ConnectionTerminated):
            for stream in self.streams.values():
                stream.gone.set()
            self.window.notify_all()

    def _serve(self, stream: _Stream) -> None:
        method = dict(stream.headers).get(b":method", b"GET").decode("ascii", "replace")
        client = _H2Client(self, stream, method)
        try:
            incoming = self._incoming(stream)
            self.server.adapter.handle(incoming, client, self.pool)
        except ClientGone:
            pass
        except Exception as exc:
            self.server.log(f"HTTP/2 stream failed: {type(exc).__name__}: {exc}")
            client.reset()
        finally:
            with self.lock:
                self.streams.pop(stream.stream_id, None)

    def _incoming(self, stream: _Stream) -> ProxyRequest:
        pseudo: dict[bytes, bytes] = {}
        regular: list[tuple[bytes, bytes]] = []
        for name, value in stream.headers:
            if name.startswith(b":"):
                pseudo[name] = value
            else:
                regular.append((name, value))
        method = pseudo.get(b":method", b"GET").decode("ascii")
        path = pseudo.get(b":path", b"/").decode("latin-1")
        authority = pseudo.get(b":authority", self.origin.authority.encode()).decode("latin-1")
        headers = list(decode_header_set(regular))
        body = b"".join(stream.body)
        if not any(name == "host" for name, _ in headers):
            headers.insert(0, ("host", authority))
        if body and not any(name in ("content-length", "transfer-encoding") for name, _ in headers):
            headers.append(("content-length", str(len(body))))
        server = self.server
        if self.base_url and server.upstream:
            base = urlsplit(server.upstream)
            path = base.path.rstrip("/") + path
            headers = [(n, self.origin.authority) if n == "host" else (n, v) for n, v in headers]
        url = f"{self.origin.scheme}://{self.origin.authority}{path}"
        request = Request(method, url, upstream_headers(headers), body)
        return ProxyRequest(request, server.route(self.origin), path)


class _H2Client:
    """Writes one response on an HTTP/2 stream: header names in lower case and without the
    connection-specific ones HTTP/2 forbids; no reason phrase exists in HTTP/2."""

    def __init__(self, connection: _H2Connection, stream: _Stream, method: str) -> None:
        self._connection = connection
        self._stream = stream
        self._method = method
        self._body = True
        self.waiter: Waiter = _H2Waiter(stream)

    def _call(self, action: Callable[[Any], None]) -> None:
        import h2.exceptions

        connection = self._connection
        with connection.lock:
            if self._stream.gone.is_set():
                raise ClientGone()
            try:
                action(connection.conn)
                connection.flush()
            except (h2.exceptions.H2Error, OSError) as exc:
                self._stream.gone.set()
                raise ClientGone() from exc

    def head(self, response: Response) -> None:
        self._body = self._method != "HEAD" and response.status not in (204, 304)
        headers = [(b":status", str(response.status).encode())]
        headers += [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in response.headers
            if name.lower() not in _H2_DROPPED
        ]
        self._call(lambda conn: conn.send_headers(self._stream.stream_id, headers))

    def data(self, chunk: bytes) -> None:
        if not self._body:
            return
        connection, stream_id = self._connection, self._stream.stream_id
        view = memoryview(chunk)
        while view:
            with connection.lock:
                while True:
                    if self._stream.gone.is_set():
                        raise ClientGone()
                    try:
                        window = connection.conn.local_flow_control_window(stream_id)
                    except Exception as exc:
                        raise ClientGone() from exc
                    if window > 0:
                        break
                    connection.window.wait(1.0)
                size = min(window, connection.conn.max_outbound_frame_size, len(view))
                self._call(_sender(stream_id, bytes(view[:size])))
            view = view[size:]

    def end(self) -> None:
        self._call(lambda conn: conn.end_stream(self._stream.stream_id))

    def flush(self) -> None:
        """Everything is sent as it is written."""

    def reset(self) -> None:
        from h2.errors import ErrorCodes

        with contextlib.suppress(ClientGone):
            self._call(
                lambda conn: conn.reset_stream(self._stream.stream_id, ErrorCodes.INTERNAL_ERROR)
            )

    def hold(self) -> None:
        self._stream.gone.wait()


def _sender(stream_id: int, piece: bytes) -> Callable[[Any], None]:
    def send(conn: Any) -> None:
        conn.send_data(stream_id, piece)

    return send


class _H2Waiter(Waiter):
    poll = 0.2

    def __init__(self, stream: _Stream) -> None:
        self._stream = stream

    def gone(self) -> bool:
        return self._stream.gone.is_set()
