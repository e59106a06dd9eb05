"""HTTP/1.1 on the wire, for adapters that record below a library's parser and replay by
handing the library the bytes it would have read from a socket.

The cassette stores a response body with its transfer framing removed (the body as the
``Content-Encoding`` left it) and its pieces as they arrived; these helpers take framing off
while recording and put it back, piece by piece, for replay.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from operator import itemgetter

from .._core.models import Headers, Response

_NO_BODY_STATUS = (204, 304)
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BREAKS = re.compile(r"[\r\n\x00]")
# Header names joined by a colon, which no token holds: each one a token (none empty) when
# this matches and the colons are the joins alone.
_TOKENS = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+(?::[!#$%&'*+\-.^_`|~0-9A-Za-z]+)*")
_name_of = itemgetter(0)
# By header names joined as above (valid ones): whether they hold Content-Length and
# Transfer-Encoding. A process meets few sets of names (one or two per server), so their
# checks are made once; past the bound, each time.
_FRAMING: dict[str, tuple[bool, bool]] = {}
_FRAMING_KEPT = 256


def unframeable(response: Response) -> str | None:
    """Why the head of ``response`` cannot be written as HTTP/1.1 for a strict parser to
    read back as recorded: a header name that is not a token (non-ASCII, a control
    character, a space or colon), or a line break or NUL in a value, the reason phrase or
    the version. None when it can. A cassette from elsewhere may hold such a head; written
    out, it would be refused inside the library or read as other headers."""
    headers = response.headers
    # Every replayed response is asked: the names and the texts are checked joined, in two
    # scans, and a head that fails is looked at header by header for the message.
    names, values = zip(*headers, strict=True) if headers else ((), ())
    joined = ":".join(names)
    if (
        not names or (_TOKENS.fullmatch(joined) and joined.count(":") == len(names) - 1)
    ) and not _BREAKS.search("".join((*values, response.reason, response.http_version))):
        return None
    for name, value in headers:
        if not _TOKEN.fullmatch(name):
            return f"response header name {name!r} is not an HTTP token"
        if _BREAKS.search(value):
            return f"response header {name!r} holds a line break or NUL: {value!r}"
    for what, text in (("reason phrase", response.reason), ("HTTP version", response.http_version)):
        if _BREAKS.search(text):
            return f"the {what} holds a line break or NUL: {text!r}"
    return None


def header(headers: Iterable[tuple[str, str]], name: str) -> str | None:
    lowered = name.lower()
    for key, value in headers:
        if key.lower() == lowered:
            return value
    return None


def is_chunked(headers: Iterable[tuple[str, str]]) -> bool:
    encoding = header(headers, "transfer-encoding")
    return encoding is not None and encoding.lower().rstrip().endswith("chunked")


class BodyDecoder:
    """Takes transfer framing off a response body fed in arbitrary pieces.

    ``length`` None and not chunked means the body runs to the end of the connection.
    Malformed framing never raises here (the library reports it): the rest passes as is.
    """

    __slots__ = ("_line", "_remaining", "_state", "done")

    def __init__(self, chunked: bool, length: int | None) -> None:
        self._line = b""
        self._remaining = 0
        self.done = False
        if chunked:
            self._state = "size"
        elif length is None:
            self._state = "eof"
        else:
            self._state = "length"
            self._remaining = length
            self.done = length == 0

    @property
    def runs_to_eof(self) -> bool:
        return self._state == "eof"

    def feed(self, data: bytes) -> bytes:
        out: list[bytes] = []
        position, end = 0, len(data)
        while position < end and not self.done:
            state = self._state
            if state in ("length", "data"):
                take = min(self._remaining, end - position)
                out.append(data[position : position + take])
                position += take
                self._remaining -= take
                if not self._remaining:
                    if state == "length":
                        self.done = True
                    else:
                        self._state = "data_end"
            elif state == "eof":
                out.append(data[position:])
                position = end
            else:
                newline = data.find(b"\n", position)
                if newline < 0:
                    self._line += data[position:]
                    break
                line, self._line = self._line + data[position:newline], b""
                position = newline + 1
                if state == "size":
                    try:
                        size = int(line.split(b";", 1)[0].strip(), 16)
                    except ValueError:
                        self._state = "eof"
                        continue
                    if size:
                        self._state, self._remaining = "data", size
                    else:
                        self._state = "trailer"
                elif state == "data_end":
                    self._state = "size"
                elif not line.strip():
                    self.done = True
        return b"".join(out)


def parse_head(raw: bytes) -> tuple[str, str, str, Headers]:
    """``(first, second, rest, headers)`` of a request or status line and its header block."""
    lines = raw.decode("latin-1").split("\n")
    first = lines[0].rstrip("\r").split(" ", 2)
    while len(first) < 3:
        first.append("")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        line = line.rstrip("\r")
        if not line:
            continue
        if line[0] in " \t" and headers:
            name, value = headers[-1]
            headers[-1] = (name, f"{value} {line.strip()}")
            continue
        name, _colon, value = line.partition(":")
        headers.append((name, value.strip(" \t")))
    return first[0], first[1], first[2], headers


def parse_request(raw: bytes) -> tuple[str, str, Headers, bytes]:
    """Method, target, headers and body (framing removed) of a whole request as sent."""
    split = raw.find(b"\r\n\r\n")
    if split < 0:
        head, body = raw, b""
    else:
        head, body = raw[:split], raw[split + 4 :]
    method, target, _version, headers = parse_head(head)
    if is_chunked(headers):
        body = BodyDecoder(chunked=True, length=None).feed(body)
    return method, target, headers, body


class ResponseParser:
    """Follows a response as raw socket reads: the head (skipping 1xx interim responses),
    then the body with its framing removed, one piece per read."""

    __slots__ = ("_buffer", "_head_only", "body", "head")

    def __init__(self, head_only: bool = False) -> None:
        self._buffer = b""
        self._head_only = head_only
        self.head: tuple[int, str, str, Headers] | None = None
        self.body: BodyDecoder | None = None

    def feed(self, data: bytes) -> bytes:
        """Body bytes carried by ``data``; fills ``head`` once the head is complete."""
        if self.body is not None:
            return self.body.feed(data)
        self._buffer += data
        while self.head is None:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return b""
            raw, self._buffer = self._buffer[:end], self._buffer[end + 4 :]
            version, status_text, reason, headers = parse_head(raw)
            try:
                status = int(status_text)
            except ValueError:
                status = 0
            if 100 <= status < 200 and status != 101:
                continue
            self.head = (status, reason, version, headers)
            length_text = header(headers, "content-length")
            length: int | None
            try:
                length = int(length_text) if length_text is not None else None
            except ValueError:
                length = None
            if self._head_only or status in _NO_BODY_STATUS or 100 <= status < 200:
                length = 0
            chunked = is_chunked(headers) and length != 0
            self.body = BodyDecoder(chunked=chunked, length=None if chunked else length)
        rest, self._buffer = self._buffer, b""
        assert self.body is not None
        return self.body.feed(rest)


def render_head(response: Response) -> bytes:
    version = response.http_version if response.http_version.startswith("HTTP/1.") else "HTTP/1.1"
    status_line = f"{version} {response.status} {response.reason}\r\n"
    headers = response.headers
    if not headers:
        return f"{status_line}\r\n".encode("latin-1")
    lines = "\r\n".join(map(": ".join, headers))
    return f"{status_line}{lines}\r\n\r\n".encode("latin-1")


def render_whole(response: Response, method: str) -> tuple[bytes, bool] | None:
    """A complete response whose body is at most one piece (``Response.pieces``) as one
    read, head and framed body as a server writes them; and whether its body runs to the
    end of the connection (``runs_to_eof``). None when the head cannot be written as
    recorded (``unframeable`` says why): checked on the rendered text, whose line breaks
    are the ones rendering put there exactly when no part holds one of its own."""
    headers = response.headers
    version = response.http_version
    if not version.startswith("HTTP/1."):
        if _BREAKS.search(version):
            return None
        version = "HTTP/1.1"
    status = response.status
    length = chunked = False
    if headers:
        names = ":".join(map(_name_of, headers))
        framing = _FRAMING.get(names)
        if framing is None:
            if not _TOKENS.fullmatch(names) or names.count(":") != len(headers) - 1:
                return None
            lowered = f":{names.lower()}:"  # colons on both sides: whole names are found
            framing = (":content-length:" in lowered, ":transfer-encoding:" in lowered)
            if len(_FRAMING) < _FRAMING_KEPT:
                _FRAMING[names] = framing
        length, encoded = framing
        if encoded:
            chunked = is_chunked(headers)
        lines = "\r\n".join(map(": ".join, headers))
        text = f"{version} {status} {response.reason}\r\n{lines}\r\n\r\n"
    else:
        text = f"{version} {status} {response.reason}\r\n\r\n"
    breaks = len(headers) + 2
    if text.count("\n") != breaks or text.count("\r") != breaks or "\x00" in text:
        return None
    body = response.body
    if chunked:
        body = b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n"
    to_eof = not (
        length or chunked or method == "HEAD" or status in _NO_BODY_STATUS or 100 <= status < 200
    )
    return text.encode("latin-1") + body, to_eof


def render_body(response: Response, complete: bool, end_apart: bool = False) -> list[bytes]:
    """The recorded pieces as they would arrive; chunked bodies get one HTTP chunk per piece
    and, when the recording ended cleanly, the terminating chunk: with the last piece, as
    servers write it, or as a piece of its own with ``end_apart`` (an end that waits for its
    turn, see ``Schedule``)."""
    pieces = response.pieces()
    if not is_chunked(response.headers):
        return pieces
    framed = [b"%x\r\n%b\r\n" % (len(piece), piece) for piece in pieces]
    if complete:
        if framed and not end_apart:
            framed[-1] += b"0\r\n\r\n"
        else:
            framed.append(b"0\r\n\r\n")
    return framed


def runs_to_eof(response: Response, method: str) -> bool:
    """True when the body is delimited by the connection closing (no length, not chunked)."""
    status = response.status
    if method == "HEAD" or status in _NO_BODY_STATUS or 100 <= status < 200:
        return False
    return not is_chunked(response.headers) and header(response.headers, "content-length") is None
