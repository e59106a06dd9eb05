"""gRPC calls in the library-neutral model: what every gRPC adapter, the matcher and the
tools share, so a call recorded in-process and one recorded through the proxy are one form.

A call is an HTTP/2 exchange as on the wire: ``POST grpc://host:port/pkg.Service/Method``,
the request metadata as headers, the body the length-prefixed messages (one byte flag, four
bytes big-endian length, the message), the response headers the initial metadata, one body
chunk per message with its arrival offset, and the trailers the status (``grpc-status``,
``grpc-message`` percent-encoded) and trailing metadata. Binary metadata (``-bin`` names)
is stored base64, as gRPC sends it.
"""

from __future__ import annotations

import base64
import gzip
import struct
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import quote, unquote

from ..models import Headers, Interaction, Request, Response, first_header

SCHEMES = ("grpc://", "grpcs://")
CONTENT_TYPE = "application/grpc"
PREFIX = struct.Struct(">BI")
OK, UNKNOWN = 0, 2

RESERVED = frozenset(
    (
        "content-type",
        "te",
        "grpc-status",
        "grpc-message",
        "grpc-encoding",
        "grpc-accept-encoding",
        "grpc-timeout",
        "user-agent",
        "content-length",
        "accept-encoding",
    )
)
"""Header names gRPC keeps for itself: never handed to an application as metadata."""

Decoder = Callable[[bytes], Any]
_decoders: dict[tuple[str, str], Decoder] = {}


def is_grpc(request: Request) -> bool:
    """Whether ``request`` is a gRPC call (its URL, or a proxied call's content type)."""
    if request.url.startswith(SCHEMES):
        return True
    kind = request.header("content-type")
    return kind is not None and kind.startswith(CONTENT_TYPE)


def url(target: str, method: str) -> str:
    """``grpc://host:port/pkg.Service/Method`` for a channel target (``dns:///h:p``,
    ``ipv4:h:p``, ``h:p``; port 443 when none is given) and a method path."""
    host = target
    for prefix in ("dns:///", "ipv4:", "ipv6:", "dns:"):
        if host.startswith(prefix):
            host = host[len(prefix) :]
            break
    if host.startswith("dns://"):  # dns://authority/host:port
        host = host[6:].partition("/")[2]
    host = host.split(",")[0]
    if "/" in host or host.startswith("unix"):
        host = quote(host, safe="")
    elif not (host.rsplit(":", 1)[-1].isdigit() and (":" in host)):
        host = f"{host}:443"
    return f"grpc://{host}{method if method.startswith('/') else '/' + method}"


def method_of(url_text: str) -> str:
    """The method path (``/pkg.Service/Method``) of a gRPC URL."""
    rest = url_text.split("://", 1)[-1]
    return "/" + rest.split("/", 1)[1] if "/" in rest else "/"


def frame(message: bytes, compressed: bool = False) -> bytes:
    """One message as gRPC sends it: flag, length, bytes."""
    return PREFIX.pack(1 if compressed else 0, len(message)) + message


def frames(messages: Iterable[bytes]) -> bytes:
    return b"".join(frame(message) for message in messages)


def split(body: bytes, encoding: str | None = None) -> list[bytes]:
    """The messages of a length-prefixed body, decompressed (gzip, deflate); raises
    ValueError for a body that is not whole messages."""
    messages: list[bytes] = []
    reader = MessageReader(encoding)
    messages.extend(reader.feed(body))
    if reader.pending:
        raise ValueError(f"{reader.pending} bytes after the last whole message")
    return messages


class MessageReader:
    """Cuts pieces of a body (as the network cut them) into whole messages."""

    __slots__ = ("_buffer", "encoding")

    def __init__(self, encoding: str | None = None) -> None:
        self._buffer = b""
        self.encoding = encoding

    @property
    def pending(self) -> int:
        return len(self._buffer)

    def feed(self, piece: bytes) -> list[bytes]:
        buffer = self._buffer + piece if self._buffer else piece
        messages = []
        start = 0
        while len(buffer) - start >= PREFIX.size:
            flag, size = PREFIX.unpack_from(buffer, start)
            end = start + PREFIX.size + size
            if end > len(buffer):
                break
            message = buffer[start + PREFIX.size : end]
            messages.append(_decompressed(message, self.encoding) if flag & 1 else message)
            start = end
        self._buffer = buffer[start:]
        return messages


def _decompressed(message: bytes, encoding: str | None) -> bytes:
    if encoding == "gzip":
        return gzip.decompress(message)
    if encoding == "deflate":
        return zlib.decompress(message)
    raise ValueError(f"a message compressed with {encoding or 'no named encoding'!r}")


def metadata_headers(metadata: Iterable[tuple[str, str | bytes]] | None) -> list[tuple[str, str]]:
    """gRPC metadata as header pairs: binary values (``-bin`` names) base64, as sent."""
    headers = []
    for key, value in metadata or ():
        if isinstance(value, bytes):
            text = base64.b64encode(value).decode("ascii").rstrip("=")
        else:
            text = value.encode("utf-8").decode("latin-1")
        headers.append((key, text))
    return headers


def header_metadata(headers: Headers) -> tuple[tuple[str, str | bytes], ...]:
    """Header pairs as the metadata gRPC hands an application: reserved names left out,
    ``-bin`` values decoded."""
    metadata: list[tuple[str, str | bytes]] = []
    for name, text in headers:
        key = name.lower()
        if key in RESERVED or key.startswith(":"):
            continue
        if key.endswith("-bin"):
            metadata.append((key, base64.b64decode(text + "=" * (-len(text) % 4))))
        else:
            metadata.append((key, text.encode("latin-1").decode("utf-8", "replace")))
    return tuple(metadata)


def status_trailers(
    code: int, details: str | None, metadata: Iterable[tuple[str, str | bytes]] | None
) -> list[tuple[str, str]]:
    """The trailers that carry a call's end: status, details (percent-encoded), metadata."""
    trailers = [("grpc-status", str(code))]
    if details:
        trailers.append(("grpc-message", quote(details, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")))
    trailers.extend(metadata_headers(metadata))
    return trailers


def status(response: Response) -> tuple[int, str]:
    """(code, details) of a recorded call: from the trailers, or the headers of a
    trailers-only answer; UNKNOWN when neither says."""
    for headers in (response.trailers, response.headers):
        code = first_header(headers, "grpc-status")
        if code is not None:
            details = first_header(headers, "grpc-message") or ""
            return (int(code) if code.strip().isdigit() else UNKNOWN), unquote(details)
    return UNKNOWN, f"no grpc-status (HTTP status {response.status})"


def first_status(response: Response) -> str | None:
    """The ``grpc-status`` a response carries (trailers, else a trailers-only head)."""
    for headers in (response.trailers, response.headers):
        code = first_header(headers, "grpc-status")
        if code is not None:
            return code
    return None


def trailing_metadata(response: Response) -> tuple[tuple[str, str | bytes], ...]:
    """The trailing metadata of a recorded call (a trailers-only answer's too)."""
    if response.trailers:
        return header_metadata(response.trailers)
    if first_header(response.headers, "grpc-status") is not None:
        return header_metadata(response.headers)
    return ()


def register(method: str, side: str, decoder: Decoder) -> None:
    """Lets the matcher and the tools show ``side`` (``request`` or ``response``) messages
    of ``method`` with their field names: an adapter registers the message classes it saw."""
    _decoders[(method, side)] = decoder


def documents(request_url: str, body: bytes, side: str, encoding: str | None = None) -> list[Any]:
    """The messages of a body, each decoded for reading: a registered decoder's document,
    else the protobuf wire format read without a schema (field numbers as keys), else the
    raw bytes. Raises ValueError for a body that is not whole messages."""
    decoder = _decoders.get((method_of(request_url), side))
    decoded: list[Any] = []
    for message in split(body, encoding):
        document: Any = None
        if decoder is not None:
            try:
                document = decoder(message)
            except Exception:
                document = None
        if document is None:
            document = decode_raw(message)
        decoded.append(message if document is None else document)
    return decoded


def decode_raw(data: bytes, depth: int = 0) -> dict[str, Any] | None:
    """The protobuf wire format without a schema, as ``protoc --decode_raw`` reads it: field
    numbers as keys, a length-delimited field as a nested message when it reads as one, else
    text when it is UTF-8, else hex. None when ``data`` is not protobuf."""
    fields: dict[str, Any] = {}
    position = 0
    try:
        while position < len(data):
            key, position = _varint(data, position)
            number, wire = key >> 3, key & 7
            if number == 0:
                return None
            value: Any
            if wire == 0:
                value, position = _varint(data, position)
            elif wire == 1:
                value = struct.unpack_from("<Q", data, position)[0]
                position += 8
            elif wire == 5:
                value = struct.unpack_from("<I", data, position)[0]
                position += 4
            elif wire == 2:
                size, position = _varint(data, position)
                chunk = data[position : position + size]
                if len(chunk) != size:
                    return None
                position += size
                value = _length_delimited(chunk, depth)
            else:
                return None
            name = str(number)
            if name in fields:
                known = fields[name]
                fields[name] = [*known, value] if isinstance(known, list) else [known, value]
            else:
                fields[name] = value
    except (IndexError, struct.error):
        return None
    return fields


def _length_delimited(chunk: bytes, depth: int) -> Any:
    if chunk and depth < 32:
        nested = decode_raw(chunk, depth + 1)
        if nested:
            try:
                text = chunk.decode("utf-8")
            except UnicodeDecodeError:
                return nested
            if not _readable(text):
                return nested
    try:
        text = chunk.decode("utf-8")
    except UnicodeDecodeError:
        return chunk.hex(" ")
    return text if _readable(text) else chunk.hex(" ")


def _readable(text: str) -> bool:
    return all(character.isprintable() or character in "\t\n\r" for character in text)


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
        if shift > 63:
            raise IndexError("varint too long")


def message_differences(
    request_url: str, want: bytes, got: bytes, json_differences: Callable[..., None]
) -> list[str]:
    """What differs between two request bodies of a gRPC call, message by message: the
    protobuf fields when the messages decode, else the first differing bytes."""
    try:
        want_docs = documents(request_url, want, "request")
        got_docs = documents(request_url, got, "request")
    except ValueError:
        return [f"body: expected {show_hex(want)}, got {show_hex(got)}"]
    diffs: list[str] = []
    if len(want_docs) != len(got_docs):
        diffs.append(f"body: expected {len(want_docs)} messages, got {len(got_docs)}")
    for index, (one, other) in enumerate(zip(want_docs, got_docs, strict=False)):
        if one == other:
            continue
        where = f"body.messages[{index}]"
        if isinstance(one, dict) and isinstance(other, dict):
            before = len(diffs)
            json_differences(where, one, other, diffs)
            if len(diffs) > before:
                continue
        diffs.append(f"{where}: expected {show_hex(_raw(one))}, got {show_hex(_raw(other))}")
    return diffs or [f"body: expected {show_hex(want)}, got {show_hex(got)}"]


def _raw(document: Any) -> bytes:
    return document if isinstance(document, bytes) else repr(document).encode()


def show_hex(data: bytes, limit: int = 32) -> str:
    if not data:
        return "empty"
    text = data[:limit].hex(" ")
    return f"{len(data)} bytes {text}{' ...' if len(data) > limit else ''}"


def summary(interaction: Interaction) -> tuple[str, int, str] | None:
    """(method path, status code, details) of a gRPC interaction; None for any other."""
    if not is_grpc(interaction.request):
        return None
    response = interaction.response
    code, details = status(response) if response is not None else (UNKNOWN, "no response")
    return method_of(interaction.request.url), code, details


STATUS_NAMES: Sequence[str] = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)


def status_name(code: int) -> str:
    return STATUS_NAMES[code] if 0 <= code < len(STATUS_NAMES) else str(code)


def status_number(code: int | str) -> int:
    """A gRPC status given as its number or its name (``UNAVAILABLE``, ``unavailable``).
    Raises ValueError for anything else."""
    if isinstance(code, int) and not isinstance(code, bool):
        if 0 <= code < len(STATUS_NAMES):
            return code
    elif isinstance(code, str):
        name = code.strip().upper()
        if name in STATUS_NAMES:
            return STATUS_NAMES.index(name)
        if name.isdigit():
            return status_number(int(name))
    raise ValueError(
        f"{code!r} is not a gRPC status; use a name such as RESOURCE_EXHAUSTED, UNAVAILABLE "
        "or DEADLINE_EXCEEDED"
    )


def status_response(code: int | str, details: str) -> Response:
    """A call that ends at once with status ``code``, no message, as a server that refuses
    it answers: the head, then the status in the trailers."""
    return Response(
        200,
        "",
        "HTTP/2",
        [("content-type", CONTENT_TYPE)],
        trailers=status_trailers(status_number(code), details, None),
    )
