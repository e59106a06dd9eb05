"""The request, rendered in memory by a copy of urllib3's own connection: the exact bytes it
would send, before any socket opens, and the head shapes that let later requests skip it."""

from __future__ import annotations

import http.client
import io
import socket
import sys
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from ..._core.models import Headers


class _ReadableFd:
    """A descriptor that always polls readable: botocore waits on the socket for a
    ``100 Continue`` before sending a body, and must not wait on an in-memory one."""

    _lock = threading.Lock()
    _socket: socket.socket | None = None

    @classmethod
    def fileno(cls) -> int:
        with cls._lock:
            if cls._socket is None:
                ours, theirs = socket.socketpair()
                theirs.close()
                cls._socket = ours
            return cls._socket.fileno()


class _CaptureSocket:
    """Collects what a connection sends; answers an Expect header with ``100 Continue``."""

    def __init__(self) -> None:
        self.sent = bytearray()

    def sendall(self, data: Any) -> None:
        self.sent += data

    def makefile(self, *args: Any, **kwargs: Any) -> io.BytesIO:
        return io.BytesIO(b"HTTP/1.1 100 Continue\r\n\r\n")

    def fileno(self) -> int:
        return _ReadableFd.fileno()

    def settimeout(self, timeout: float | None) -> None:
        pass

    def setsockopt(self, *args: Any) -> None:
        pass

    def close(self) -> None:
        pass


def _fresh_copy(conn: Any, sock: Any) -> Any:
    """A shallow copy of ``conn`` in the idle state, talking to ``sock``; the pooled
    connection itself is never touched."""
    scratch = object.__new__(type(conn))
    scratch.__dict__.update(vars(conn))
    scratch.sock = sock
    scratch._buffer = []
    scratch._HTTPConnection__state = http.client._CS_IDLE  # type: ignore[attr-defined]
    scratch._HTTPConnection__response = None
    scratch._response_options = None
    if hasattr(scratch, "_expect_header_set"):
        scratch._expect_header_set = False
    return scratch


def render_request(conn: Any, arguments: dict[str, Any]) -> tuple[Any, bytes]:
    """A copy of ``conn`` that has sent the request into memory (left waiting for its
    response, as after a real send), and the bytes it sent."""
    capture = _CaptureSocket()
    scratch = _fresh_copy(conn, capture)
    options = {
        name: arguments[name]
        for name in ("chunked", "preload_content", "decode_content", "enforce_content_length")
        if name in arguments
    }
    scratch.request(
        arguments["method"],
        arguments["url"],
        body=arguments.get("body"),
        headers=arguments.get("headers"),
        **options,
    )
    return scratch, bytes(capture.sent)


# The head urllib3 renders depends on the connection's class and address, the method, the
# headers and the body, never on a target in origin form: rendered once, it is reused for
# every target (the first render of each key checks that the copy left waiting for its
# response is the one ``sent_copy`` makes). Header values that are plain text are sent as
# they are, each on its own line, in the order given: the head is then kept as a shape
# (what urllib3 adds before and after the given headers) and reused for any values.
POOL_HEADS: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], tuple[HeadShape, Any]]] = (
    weakref.WeakKeyDictionary()
)
RENDERED: dict[tuple[Any, ...], HeadShape] = {}


_RENDERED_MAX = 512


_RENDER_METHODS = (
    "request",
    "putrequest",
    "putheader",
    "endheaders",
    "send",
    "_send_output",
    "_send_request",
    "_validate_path",
    "_validate_host",
    "_encode_request",
    "host",
)


_plain_classes: dict[type, bool] = {}


def _renders_plainly(cls: type) -> bool:
    """Whether ``cls`` renders a request with urllib3's own code, or with botocore's, which
    renders as urllib3's but for waiting on a ``100 Continue`` when the request carries an
    ``Expect`` header (never reused: see ``render_key``)."""
    plain = _plain_classes.get(cls)
    if plain is None:
        import urllib3.connection

        base = urllib3.connection.HTTPConnection
        botocore = getattr(sys.modules.get("botocore.awsrequest"), "AWSConnection", None)
        plain = issubclass(cls, base) and all(
            getattr(cls, name, None) is getattr(base, name, None)
            or (botocore is not None and getattr(cls, name, None) is getattr(botocore, name, None))
            for name in _RENDER_METHODS
        )
        _plain_classes[cls] = plain
    return plain


def render_key(conn: Any, arguments: dict[str, Any]) -> tuple[tuple[Any, ...], Given] | None:
    """What the rendered head depends on, and the given headers, or None when it cannot be
    reused: a target that is not a plain ASCII origin form, a body that is not bytes, a
    connection class of its own, headers that are not text."""
    url = arguments["url"]
    body = arguments.get("body")
    headers = arguments.get("headers")
    method = arguments["method"]
    if (
        type(url) is not str
        or not plain_target(url)
        or (body is not None and type(body) is not bytes)
        or type(method) is not str
        or not _renders_plainly(type(conn))
    ):
        return None
    try:
        given = Given.of(headers) if headers is not None else _NO_HEADERS
        if given.waits_for_continue:
            return None  # botocore's connections wait for a 100 Continue while rendering
        key = (
            type(conn),
            conn.host,
            conn.port,
            conn.default_port,
            conn._tunnel_host,
            conn._tunnel_port,
            conn._http_vsn_str,
            method,
            given.shape,
            None if body is None else len(body),
            bool(arguments.get("chunked")),
        )
        hash(key)
    except (AttributeError, TypeError):
        return None
    return key, given


@dataclass(slots=True)
class Given:
    """The headers a caller gave urllib3: ``shape`` is what the rendered head depends on —
    their names when every value is plain text (printable ASCII, as ``str`` or ``bytes``, no
    blank at either end, not urllib3's skip marker, and not a header whose value changes the
    framing), else the pairs themselves; ``sent`` are the pairs as the head carries them."""

    sent: tuple[tuple[str, str], ...]
    shape: tuple[Any, ...]
    plain: bool
    waits_for_continue: bool

    @staticmethod
    def of(headers: Any) -> Given:
        pairs = tuple(headers.items())
        for name, value in pairs:
            if type(name) is not str or type(value) is not str:
                return Given._read(pairs)
        known = _PLAIN_GIVEN.get(pairs)
        if known is None:
            known = Given._read(pairs)
            if known.plain:
                if len(_PLAIN_GIVEN) >= _PLAIN_GIVEN_LIMIT:
                    _PLAIN_GIVEN.clear()
                _PLAIN_GIVEN[pairs] = known
        return known

    @staticmethod
    def _read(pairs: tuple[Any, ...]) -> Given:
        names = []
        sent = []
        plain = True
        waits = False
        for name, value in pairs:
            if type(name) is not str:
                plain = False
                waits = waits or (isinstance(name, bytes) and name.lower() == b"expect")
                continue
            lowered = name.lower()
            if lowered == "expect":
                waits = True
            if type(value) is bytes and value.isascii():
                value = value.decode("ascii")
            if (
                type(value) is not str
                or lowered in _SHAPED_BY_VALUE
                or not value.isascii()
                or not value.isprintable()
                or value.strip(" ") != value
                or value == _SKIP_HEADER
            ):
                plain = False
                continue
            names.append(name)
            sent.append((name, value))
        if not plain:
            return Given((), pairs, False, waits)
        return Given(tuple(sent), tuple(names), True, waits)


_NO_HEADERS = Given((), (), True, False)

# A client gives the same headers on nearly every request: what they are read as is kept, by
# the pairs (bounded: a full table starts again empty). Only pairs of ``str`` alone, looked up
# and kept, whose equality is exact (``b"1" == memoryview(b"1")``, and the heads differ).
_PLAIN_GIVEN: dict[tuple[Any, ...], Given] = {}
_PLAIN_GIVEN_LIMIT = 1024


_SHAPED_BY_VALUE = frozenset(("transfer-encoding", "expect"))


_SKIP_HEADER = "@@@SKIP_HEADER@@@"  # urllib3.util.request.SKIP_HEADER: the header is left out


@dataclass(frozen=True, slots=True)
class HeadShape:
    """A rendered head: what urllib3 sent before the given headers, after them, and whether
    the given ones go between (else ``before`` is the whole head, for these very headers)."""

    before: tuple[tuple[str, str], ...]
    after: tuple[tuple[str, str], ...]
    takes_given: bool

    def head(self, given: Given) -> tuple[tuple[str, str], ...]:
        if not self.takes_given:
            return self.before
        if not given.sent:
            return self.before + self.after
        return self.before + given.sent + self.after

    @staticmethod
    def learn(headers: Headers, given: Given) -> HeadShape | None:
        """The shape of ``headers`` rendered for ``given``; None when the given pairs are not
        found in it exactly once, side by side, as given."""
        sent = tuple(headers)
        if not given.plain:
            return HeadShape(sent, (), False)
        count = len(given.sent)
        if not count:
            return HeadShape(sent, (), True)
        found = [
            start
            for start in range(len(sent) - count + 1)
            if sent[start : start + count] == given.sent
        ]
        if len(found) != 1:
            return None
        start = found[0]
        return HeadShape(sent[:start], sent[start + count :], True)


def sent_copy(conn: Any, arguments: dict[str, Any]) -> Any:
    """A copy of ``conn`` in the state its ``request()`` leaves it: sent, waiting for the
    response with the options urllib3 keeps for it."""
    import urllib3.connection

    scratch = _fresh_copy(conn, _CaptureSocket())
    method = arguments["method"]
    scratch._method = method
    scratch._HTTPConnection__state = http.client._CS_REQ_SENT  # type: ignore[attr-defined]
    scratch._response_options = urllib3.connection._ResponseOptions(
        request_method=method,
        request_url=arguments["url"],
        preload_content=arguments.get("preload_content", True),
        decode_content=arguments.get("decode_content", True),
        enforce_content_length=arguments.get("enforce_content_length", True),
    )
    return scratch


_SENT_STATE = (
    "_method",
    "_HTTPConnection__state",
    "_HTTPConnection__response",
    "_response_options",
)


def remember(
    keyed: tuple[tuple[Any, ...], Given],
    scratch: Any,
    arguments: dict[str, Any],
    headers: Headers,
    body: bytes,
) -> HeadShape | None:
    """Keeps a rendered head's shape for reuse when the render took the target as it is,
    sent the body unframed, and left the copy as ``sent_copy`` would; the shape when kept."""
    if body != (arguments.get("body") or b""):
        return None
    made = sent_copy(arguments["conn"], arguments)
    if any(getattr(made, name, None) != getattr(scratch, name, None) for name in _SENT_STATE):
        return None
    shape = HeadShape.learn(headers, keyed[1])
    if shape is None:
        return None
    if len(RENDERED) >= _RENDERED_MAX:
        RENDERED.clear()
    RENDERED[keyed[0]] = shape
    return shape


def remember_for_pool(
    pool: Any, conn: Any, arguments: dict[str, Any], given: Given, shape: HeadShape
) -> None:
    """Keeps the head's shape for ``urlopen`` too when every connection of the pool renders
    it alike: the pool's own connection class, no proxy, no tunnel."""
    if type(conn) is not getattr(pool, "ConnectionCls", None) or pool.proxy is not None:
        return
    if conn._tunnel_host is not None:
        return
    heads = POOL_HEADS.get(pool)
    if heads is None:
        heads = POOL_HEADS.setdefault(pool, {})
    body = arguments.get("body")
    key = (
        arguments["method"],
        given.shape,
        None if body is None else len(body),
        bool(arguments.get("chunked")),
    )
    if key in heads:
        return
    if len(heads) >= _RENDERED_MAX:
        heads.clear()
    heads[key] = (shape, _fresh_copy(conn, None))


def plain_target(url: str) -> bool:
    """A target in origin form the head takes as it is."""
    return url.startswith("/") and url.isascii() and url.isprintable() and " " not in url


def url_of(pool: Any, target: str) -> str:
    if "://" in target.split("?", 1)[0]:
        return target  # absolute form, sent to a forward proxy
    host = pool.host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    default = 443 if pool.scheme == "https" else 80
    port = f":{pool.port}" if pool.port and pool.port != default else ""
    return f"{pool.scheme}://{host}{port}{target}"
