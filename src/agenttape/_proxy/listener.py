"""The recording proxy's engine: a listener on 127.0.0.1, HTTP/1.1 (h11) and HTTP/2 (h2)
towards the programs, ``CONNECT`` tunnels opened with a certificate the local CA signs for
the host, and base-URL mode (``--upstream``) for SDKs given a base URL instead of a proxy.

Each client connection has a thread of its own; an HTTP/2 connection also gives each request
stream a thread. Only the connection's thread reads its socket, and writes go through one
lock, so a TLS socket is never used from two threads at once.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator

from .adapter import ProxyAdapter
from .ca import CertificateAuthority
from .guard import is_loopback
from .http1 import H1Connection, peek
from .http2 import H2Connection
from .upstream import (
    READ_SIZE,
    ClientGone,
    Origin,
    UpstreamError,
    UpstreamPool,
    origin_of,
    upstream_context,
)

TLS_HANDSHAKE = 0x16
# Handshake failures that mean the client does not trust the certificate it was shown.
_DISTRUST = (
    "UNKNOWN_CA",
    "BAD_CERTIFICATE",
    "CERTIFICATE_UNKNOWN",
    "UNSUPPORTED_CERTIFICATE",
    "DECRYPT_ERROR",
    "EOF",
)


class ProxyServer:
    """Listens on 127.0.0.1 and serves every connection through ``adapter``.

    ``live`` says the tape may reach servers (it records): a TLS client is then offered the
    protocol the server agrees to, learnt by connecting to it before the client's handshake is
    answered.

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
        live: bool = False,
    ) -> None:
        self.adapter = adapter
        self.live = live
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
        # Its threads, and the ones they start, leave the process's signals to the main
        # thread: one delivered to them waits until the main thread next runs Python code,
        # which may be blocked waiting for a command the signal was meant to stop.
        with _signals_blocked(_PROCESS_SIGNALS):
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
            H1Connection(self, sock, pool, tunnel=None).run()
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
        first = pending[:1] or peek(sock, 1)
        if not first:
            return
        if first[0] != TLS_HANDSHAKE:
            H1Connection(self, sock, pool, Origin("http", host, port), pending).run()
            return
        if pending or self.ca is None:
            return  # a handshake sent before the tunnel was confirmed is not supported
        origin = Origin("https", host, port)
        protocols = self._protocols(origin, pool)
        try:
            secure = self.ca.context_for(host, protocols).wrap_socket(sock, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            self._refused(host, exc)
            return
        with self._lock:
            self._connections.add(secure)
        try:
            # A client that checks the certificate once the handshake is done (curl 8) resets
            # the connection before its first byte where another would refuse the handshake.
            try:
                first_bytes = secure.recv(READ_SIZE)
            except OSError as exc:  # SSLError included
                self._refused(host, exc)
                return
            if not first_bytes:
                return
            if secure.selected_alpn_protocol() == "h2":
                H2Connection(self, secure, pool, origin, first_bytes).run()
            else:
                H1Connection(self, secure, pool, origin, first_bytes).run()
        finally:
            with self._lock:
                self._connections.discard(secure)
            with contextlib.suppress(OSError):
                secure.close()

    def _protocols(self, origin: Origin, pool: UpstreamPool) -> tuple[str, ...]:
        """What to offer a TLS client by ALPN: the client gets the protocol the server spoke.
        Replaying, the HTTP version the tape recorded for this origin; recording, what the
        server agrees to (the connection opened to ask it serves the first request)."""
        recorded = self.adapter.recorded_version(origin)
        if recorded is not None:
            return ("h2",) if recorded.upper().startswith("HTTP/2") else ("http/1.1",)
        target = self.route(origin)
        if not self.live or target.scheme != "https":
            return ("http/1.1",)  # a miss answered in HTTP/1.1, or a cleartext stand-in
        try:
            connection = pool.connect(target)
        except UpstreamError:
            return ("http/1.1",)  # the request inside the tunnel meets the failure again
        pool.keep(connection)
        return (connection.protocol,)

    def _refused(self, host: str, exc: BaseException) -> None:
        reason = getattr(exc, "reason", None) or type(exc).__name__
        self.distrusted.append((host, str(reason)))
        if any(word in str(reason).upper() for word in _DISTRUST) or isinstance(
            exc, (ssl.SSLEOFError, ConnectionError)
        ):
            assert self.ca is not None
            self.log(
                f"the client closed the TLS handshake for {host} ({reason}): it does not trust "
                f"the agenttape CA, or it checked the certificate (made for {host}) against "
                f"another name. Trust {self.ca.cert_path} (agenttape proxy --print-ca "
                "prints it), or start the program with agenttape run, which sets "
                "SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE"
            )
        else:
            self.log(f"TLS handshake with the client for {host} failed: {exc}")


_PROCESS_SIGNALS = frozenset(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


@contextlib.contextmanager
def _signals_blocked(numbers: frozenset[int]) -> Iterator[None]:
    """Threads started inside inherit a mask that blocks ``numbers`` (on POSIX)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, numbers)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
