"""libcurl's easy handle, as its Python bindings (curl_cffi, pycurl) drive it: shared by their
adapters, which differ only in how the binding's handle is patched (``Flavour``).

Their sockets live in libcurl, where no Python patch reaches: the request is what the handle
was told through ``setopt`` (URL, method, headers, body), kept as it is set. At ``perform``
the tape decides. Replay hands the handle's own header and write callbacks the recorded head
and body pieces, as libcurl would, and answers ``getinfo`` from the interaction; recording
puts tees in front of those callbacks for the one live perform, and puts the user's back.
A failure is the binding's own error with libcurl's code (7 couldn't connect, 28 timed out).
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._core.models import Failure, FailureKind, Interaction, Request
from .._core.tape import Recording

URL = 10002
PROXY = 10004
HTTPHEADER = 10023
POSTFIELDS = 10015
COPYPOSTFIELDS = 10165
POST = 47
UPLOAD = 46
NOBODY = 44
HTTPGET = 80
CUSTOMREQUEST = 10036
WRITEFUNCTION = 20011
WRITEDATA = 10001
HEADERFUNCTION = 20079
HEADERDATA = 10029
READFUNCTION = 20012
READDATA = 10009
CONNECT_ONLY = 141
ACCEPT_ENCODING = 10102
HTTP_CONTENT_DECODING = 158
"""Set for a WebSocket or raw connection (curl_cffi's ``ws_connect``): not an HTTP exchange;
it is not recorded, and blocked while the network is."""

_WAYS: dict[int, tuple[int, ...]] = {
    HTTPGET: (POST, POSTFIELDS, COPYPOSTFIELDS, UPLOAD, NOBODY),
    POST: (HTTPGET, UPLOAD, NOBODY),
    UPLOAD: (HTTPGET, POST, NOBODY),
    NOBODY: (HTTPGET, POST, UPLOAD),
}

# getinfo codes (CURLINFO_*): the type is in the high bits.
_STRING, _LONG, _DOUBLE, _SLIST, _OFF_T = 0x100000, 0x200000, 0x300000, 0x400000, 0x600000
EFFECTIVE_URL = _STRING + 1
RESPONSE_CODE = _LONG + 2
TOTAL_TIME = _DOUBLE + 3
HEADER_SIZE = _LONG + 11
CONTENT_TYPE = _STRING + 18
REDIRECT_COUNT = _LONG + 20
HTTP_VERSION = _LONG + 46
SIZE_DOWNLOAD_T = _OFF_T + 8
SIZE_DOWNLOAD = _DOUBLE + 8
TOTAL_TIME_T = _OFF_T + 50
CONTENT_LENGTH_DOWNLOAD_T = _OFF_T + 15

_VERSIONS = {"HTTP/1.0": 1, "HTTP/1.1": 2, "HTTP/2": 3, "HTTP/2.0": 3, "HTTP/3": 30}

# libcurl error codes, by the failure kind they stand for.
_KINDS: dict[int, FailureKind] = {
    1: "unsupported_protocol",
    5: "proxy_error",
    6: "connect_error",
    7: "connect_error",
    35: "connect_error",
    52: "protocol_error",
    55: "write_error",
    56: "read_error",
    97: "proxy_error",
}
_CODES: dict[FailureKind, int] = {
    "connect_error": 7,
    "connect_timeout": 28,
    "read_timeout": 28,
    "write_timeout": 28,
    "pool_timeout": 28,
    "read_error": 56,
    "write_error": 55,
    "protocol_error": 52,
    "proxy_error": 5,
    "unsupported_protocol": 1,
}
_CODE_IN_MESSAGE = re.compile(r"curl: \((\d+)\)")
WRITE_ERROR = 23


@dataclass(frozen=True, slots=True)
class Flavour:
    """What differs between two bindings of libcurl."""

    library: str
    text: Callable[[str], Any]
    """A string as the binding's ``getinfo`` returns it (bytes, or str)."""
    error: Callable[[int, str], BaseException]
    """The binding's error for libcurl code ``code`` and its message."""
    aborts: Callable[[Any, int], bool]
    """Whether a write or header callback's return value for ``size`` bytes stops the
    transfer (libcurl's write error)."""


@dataclass(slots=True)
class Easy:
    """What one handle was told through ``setopt`` since it was made or reset, and the
    interaction its last perform replayed (``getinfo`` answers from it)."""

    options: dict[int, Any] = field(default_factory=dict)
    impersonate: str | None = None
    replayed: Interaction | None = None

    def set(self, option: int, value: Any) -> None:
        """Keeps what ``setopt(option, value)`` told the handle. Setting one way of sending
        (``HTTPGET``, ``POST``, ``UPLOAD``, ``NOBODY``) turns the others off, as in libcurl."""
        if value and option in _WAYS:
            for other in _WAYS[option]:
                self.options.pop(other, None)
        self.options[option] = value

    def request(self, library: str) -> Request:
        """The request the handle would make, as its options say."""
        options = self.options
        url = _text(options.get(URL, ""))
        headers: list[tuple[str, str]] = []
        for line in options.get(HTTPHEADER) or ():
            name, colon, value = _text(line).partition(":")
            if not colon:
                name, semicolon, _rest = name.partition(";")
                if semicolon:
                    headers.append((name.strip(), ""))  # "Name;" sends an empty header
                continue
            if value.strip():  # "Name:" alone takes a header libcurl would add away
                headers.append((name.strip(), value.strip()))
        if self.impersonate:
            headers.append((f"{library}-impersonate", self.impersonate))
        body = self._body()
        method = _text(options.get(CUSTOMREQUEST) or "")
        if not method:
            if options.get(NOBODY):
                method = "HEAD"
            elif options.get(UPLOAD):
                method = "PUT"
            elif options.get(POST) or POSTFIELDS in options or COPYPOSTFIELDS in options:
                method = "POST"
            else:
                method = "GET"
        return Request(method=method.upper(), url=url, headers=headers, body=body)

    def _body(self) -> bytes:
        options = self.options
        fields = options.get(POSTFIELDS, options.get(COPYPOSTFIELDS))
        if fields is not None:
            return fields.encode() if isinstance(fields, str) else bytes(fields)
        reader = options.get(READFUNCTION)
        source = options.get(READDATA)
        if reader is None and source is not None and hasattr(source, "read"):
            reader = source.read
        if reader is None or not (options.get(UPLOAD) or options.get(POST)):
            return b""
        parts: list[bytes] = []
        while piece := reader(65536):
            parts.append(piece.encode() if isinstance(piece, str) else bytes(piece))
        body = b"".join(parts)
        self.options[READFUNCTION] = _Replay(body).read  # read again by a live perform
        self.options.pop(READDATA, None)
        return body

    def writer(self) -> Callable[[bytes], Any] | None:
        function = self.options.get(WRITEFUNCTION)
        if function is None and WRITEDATA in self.options:
            function = getattr(self.options[WRITEDATA], "write", None)
        return function

    def header_writer(self) -> Callable[[bytes], Any] | None:
        function = self.options.get(HEADERFUNCTION)
        if function is None and HEADERDATA in self.options:
            function = getattr(self.options[HEADERDATA], "write", None)
        return function


class _Replay:
    """A body read once to be recorded, read again by libcurl for the live perform."""

    __slots__ = ("_body", "_position")

    def __init__(self, body: bytes) -> None:
        self._body = body
        self._position = 0

    def read(self, size: int) -> bytes:
        piece = self._body[self._position : self._position + size]
        self._position += len(piece)
        return piece


def _text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")
    return str(value)


def head_lines(interaction: Interaction) -> list[bytes]:
    """The header lines libcurl hands its header callback for the recorded response."""
    response = interaction.response
    assert response is not None
    reason = f" {response.reason}" if response.reason else " "
    lines = [f"{response.http_version} {response.status}{reason}\r\n".encode("latin-1")]
    lines += [f"{name}: {value}\r\n".encode("latin-1") for name, value in response.headers]
    lines.append(b"\r\n")
    return lines


def replay(easy: Easy, interaction: Interaction, flavour: Flavour) -> None:
    """One perform served from ``interaction``: the header lines, then the body pieces, to
    the handle's callbacks (a callback that stops the transfer ends it with libcurl's write
    error); a recorded failure raises the binding's error."""
    easy.replayed = interaction
    response = interaction.response
    if response is None:
        raise error_for(interaction.error, flavour)
    header = easy.header_writer()
    if header is not None:
        for line in head_lines(interaction):
            if flavour.aborts(header(line), len(line)):
                raise flavour.error(WRITE_ERROR, "Failed writing header")
    write = easy.writer()
    if write is None:
        write = sys.stdout.buffer.write  # libcurl's default: the body goes to stdout
    decoder = Decoder(response.headers) if decoding(easy) else None
    for piece in response.iter_chunks():
        if decoder is not None:
            piece = decoder.feed(piece)
        if piece and flavour.aborts(write(piece), len(piece)):
            raise flavour.error(WRITE_ERROR, "Failure writing output to destination")
    if interaction.error is not None:
        raise error_for(interaction.error, flavour)


def error_for(failure: Failure | None, flavour: Flavour) -> BaseException:
    assert failure is not None
    found = _CODE_IN_MESSAGE.search(failure.message)
    code = int(found.group(1)) if found else _CODES.get(failure.kind, 56)
    return flavour.error(code, failure.message)


def plain(message: str) -> str:
    """A recorded message without the ``curl: (N)`` that ``failure_of`` put before it."""
    found = _CODE_IN_MESSAGE.match(message)
    return message[found.end() :].lstrip() if found else message


def failure_of(code: int, message: str, type_name: str) -> Failure:
    """libcurl's error ``code`` as a failure; the message says the code (``curl: (N)``, as
    curl_cffi's own messages do) for replay."""
    if not _CODE_IN_MESSAGE.search(message):
        message = f"curl: ({code}) {message}"
    kind = _KINDS.get(code)
    if code == 28:
        lowered = message.lower()
        connecting = "connection timed out" in lowered or "resolving timed out" in lowered
        kind = "connect_timeout" if connecting else "read_timeout"
    return Failure(kind or "transport_error", type_name, message)


def info(easy: Easy, option: int, flavour: Flavour) -> Any:
    """``getinfo(option)`` after a replayed perform: what the recording says, else what
    libcurl answers for a transfer that sent and received nothing of the kind."""
    interaction = easy.replayed
    assert interaction is not None
    response = interaction.response
    status = response.status if response is not None else 0
    body = response.body if response is not None else b""
    if option == EFFECTIVE_URL:
        return flavour.text(interaction.request.url)
    if option == RESPONSE_CODE:
        return status
    if option == HTTP_VERSION:
        return _VERSIONS.get(response.http_version if response else "", 0)
    if option == CONTENT_TYPE:
        value = response.header("content-type") if response is not None else None
        return None if value is None else flavour.text(value)
    if option in (TOTAL_TIME,):
        return float(interaction.duration or 0.0)
    if option == TOTAL_TIME_T:
        return int((interaction.duration or 0.0) * 1_000_000)
    if option in (SIZE_DOWNLOAD_T, SIZE_DOWNLOAD):
        return len(body) if option == SIZE_DOWNLOAD_T else float(len(body))
    if option == HEADER_SIZE:
        return sum(len(line) for line in head_lines(interaction)) if response else 0
    if option == CONTENT_LENGTH_DOWNLOAD_T:
        length = response.header("content-length") if response is not None else None
        return int(length) if length and length.strip().isdigit() else -1
    kind = option & 0xF00000
    if kind == _STRING:
        return flavour.text("")
    if kind == _SLIST:
        return []
    if kind == _DOUBLE:
        return 0.0
    return 0


def _layer(coding: str) -> Callable[[bytes], bytes] | None:
    """A streaming decoder of one content coding, or None when none can be had here."""
    if coding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress
    if coding == "deflate":
        return _Deflate().feed
    if coding == "identity":
        return bytes
    module = {"br": ("brotli", "brotlicffi"), "zstd": ("zstandard",)}.get(coding, ())
    for name in module:
        try:
            found = importlib.import_module(name)
        except ImportError:
            continue
        if coding == "br":
            decompressor = found.Decompressor()
            process: Callable[[bytes], bytes] = (
                getattr(decompressor, "process", None) or decompressor.decompress
            )
            return process
        return found.ZstdDecompressor().decompressobj().decompress  # type: ignore[no-any-return]
    return None


class _Deflate:
    """``deflate`` as servers send it: zlib-wrapped, or (some) raw."""

    __slots__ = ("_decompress",)

    def __init__(self) -> None:
        self._decompress: Callable[[bytes], bytes] | None = None

    def feed(self, data: bytes) -> bytes:
        if self._decompress is None:
            wrapped = data[:1] and (data[0] & 0x0F) == 8
            bits = zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS
            self._decompress = zlib.decompressobj(bits).decompress
        return self._decompress(data)


_LIBCURL_CODINGS = ("gzip", "deflate", "br", "zstd")
"""What libcurl decodes when told ``ACCEPT_ENCODING`` "" (all it knows)."""


def decoding(easy: Easy) -> bool:
    """Whether libcurl would decode the body for this handle, and agenttape can do it in its
    place: then the body is recorded as it came and decoded for the callback, as libcurl
    would have."""
    accept = easy.options.get(ACCEPT_ENCODING)
    if accept is None or easy.options.get(HTTP_CONTENT_DECODING, 1) == 0:
        return False
    codings = [part.strip().lower() for part in _text(accept).split(",") if part.strip()]
    return all(_decodable(coding) for coding in codings or _LIBCURL_CODINGS)


@functools.cache
def _decodable(coding: str) -> bool:
    """Whether a decoder of ``coding`` can be had here (asked once per coding: a failed
    import is not cached by Python)."""
    return _layer(coding) is not None


class Decoder:
    """The body's Content-Encoding undone piece by piece, as libcurl undoes it for the write
    callback; a coding it cannot undo passes the bytes as they are."""

    __slots__ = ("_layers",)

    def __init__(self, headers: list[tuple[str, str]] | Any) -> None:
        value = ", ".join(v for k, v in headers if k.lower() == "content-encoding")
        codings = [part.strip().lower() for part in value.split(",") if part.strip()]
        layers = [_layer(coding) for coding in reversed(codings)]
        self._layers = [layer for layer in layers if layer is not None]

    def feed(self, data: bytes) -> bytes:
        given = data
        try:
            for layer in self._layers:
                data = layer(data)
        except Exception:
            # Not encoded as its head says: recorded where libcurl decoded it (no decoder
            # for one of the codings asked for was at hand then): handed over as stored.
            self._layers = []
            return given
        return data


class Tee:
    """The recording side of one live perform: header lines and body pieces pass on to the
    user's callbacks, and the recording gets the last response head (a redirect libcurl
    followed is not the answer) and the body as it arrives."""

    __slots__ = ("_decoder", "_header", "_headers", "_status", "_write", "decoding", "recording")

    def __init__(self, easy: Easy, recording: Recording) -> None:
        self.recording = recording
        self._header = easy.header_writer()
        self._write = easy.writer()
        self._status: tuple[str, int, str] | None = None
        self._headers: list[tuple[str, str]] = []
        self.decoding = decoding(easy)
        """Whether libcurl is told not to decode (``HTTP_CONTENT_DECODING`` 0) and the tee
        decodes for the callback: the body is recorded as it came."""
        self._decoder: Decoder | None = None

    def header(self, line: bytes) -> Any:
        text = line.decode("latin-1").rstrip("\r\n")
        if text.startswith("HTTP/"):
            version, _space, rest = text.partition(" ")
            code, _space, reason = rest.partition(" ")
            self._status = (version, int(code) if code.isdigit() else 0, reason.strip())
            self._headers = []
        elif text[:1] in (" ", "\t") and self._headers:
            name, value = self._headers[-1]
            self._headers[-1] = (name, f"{value} {text.strip()}")
        elif text:
            name, _colon, value = text.partition(":")
            self._headers.append((name.strip(), value.strip()))
        return None if self._header is None else self._header(line)

    def write(self, data: bytes) -> Any:
        self.responded()
        self.recording.chunk(data)
        write = self._write or sys.stdout.buffer.write
        if not self.decoding:
            return write(data)
        if self._decoder is None:
            self._decoder = Decoder(self._headers)
        decoded = self._decoder.feed(data)
        if not decoded:
            return len(data)
        returned = write(decoded)
        # libcurl counts the bytes it handed over, not those the callback was given.
        return len(data) if returned in (None, len(decoded)) else returned

    def responded(self) -> None:
        """Hands the recording the response head, once, when the body starts or the
        transfer ends."""
        if self.recording.interaction.response is None and self._status is not None:
            version, status, reason = self._status
            self.recording.respond(status, reason, version, self._headers)

    def ended(self, failure: Failure | None) -> None:
        """The live perform ended: with ``failure``, or whole."""
        self.responded()
        if failure is None:
            self.recording.finish()
        elif self.recording.interaction.response is not None:
            self.recording.finish(truncated=True)
        else:
            self.recording.fail(failure)


RUN_USER_PROXIES = "AGENTTAPE_RUN_USER_PROXIES"
"""Set by ``agenttape run`` for the processes it starts: the proxies the user had (JSON). A
Python process that records in-process reads its proxies from it, not the run's proxy."""


def keep_off_the_run_proxy(easy: Easy, setopt: Callable[[int, Any], Any]) -> None:
    """Under ``agenttape run``, libcurl would take the run's recording proxy from the
    environment, and the request this process records in-process would be recorded by the
    proxy too. Its live perform is given the user's own proxy for the URL instead (none: an
    empty one), as ``urllib.request`` gives it to httpx and requests. A proxy the caller set
    on the handle is left as it is."""
    if os.environ.get(RUN_USER_PROXIES) is None or PROXY in easy.options:
        return
    import urllib.parse
    import urllib.request

    url = _text(easy.options.get(URL, ""))
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = (
        ""
        if urllib.request.proxy_bypass(parts.hostname or "")
        else proxies.get(parts.scheme.lower(), proxies.get("all", ""))
    )
    setopt(PROXY, proxy.encode())
