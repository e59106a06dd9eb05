"""Which recorded interaction serves a request: a hashable key per request, and a readable
field-by-field difference for the error raised when no key matches."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Literal

from .. import jsonpath
from ..models import Interaction, Request
from ..urls import ParsedURL, parse_url, split_url
from ..wire import grpc as grpc_wire

URL_FIELDS = ("scheme", "host", "port", "path", "query")
DEFAULT_MATCH_ON = ("method", *URL_FIELDS, "body")
_ALIASES = {"url": URL_FIELDS, "uri": URL_FIELDS}

JsonValue = Any


def _parts_getter(names: tuple[str, ...]) -> Callable[[ParsedURL], tuple[Any, ...]]:
    """The named URL parts as a tuple, in one C call when there are several."""
    if len(names) > 1:
        return attrgetter(*names)
    return lambda url: tuple(getattr(url, name) for name in names)


def _looks_like_json(body: bytes) -> bool:
    return body.lstrip()[:1] in (b"{", b"[")


Part = tuple[bytes, bytes]
"""A multipart body's part: its header block and its content."""


def multipart_parts(body: bytes) -> tuple[Part, ...] | None:
    """The parts of a multipart body, or None when it is not one. The boundary is read from
    the body's first line: a client draws it at random per request, so two uploads of the
    same parts differ in it alone, and it is no part of what the request says."""
    if body[:2] != b"--":
        return None
    line_end = body.find(b"\r\n")
    boundary = body[2:line_end]
    if not 0 < len(boundary) <= 200 or not body.rstrip(b"\r\n").endswith(b"--" + boundary + b"--"):
        return None
    delimiter = b"\r\n--" + boundary
    pieces = (b"\r\n" + body).split(delimiter)
    parts = []
    for piece in pieces[1:-1]:  # before the first delimiter: nothing; after the last: "--"
        head, separator, content = piece.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        if not separator:
            return None
        parts.append((head, content))
    return tuple(parts)


def _part_name(head: bytes) -> str:
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-disposition:"):
            for field in line.split(b";")[1:]:
                key, _, value = field.strip().partition(b"=")
                if key.lower() == b"name":
                    return value.strip(b'"').decode("latin-1")
    return ""


@dataclass(slots=True)
class Candidate:
    """A recorded interaction close to a request that missed, and how it differs."""

    index: int
    interaction: Interaction
    differences: list[str]
    played: bool
    note: str = ""
    """Why it was not served where no difference and no play says so: never left empty for
    a candidate that is neither (the matcher that compared it says what to look at)."""

    def __str__(self) -> str:
        request = self.interaction.request
        state = " (already played)" if self.played else ""
        lines = [f"#{self.index} {request.method} {request.url}{state}"]
        lines += [f"    {line}" for line in self.differences]
        if self.note:
            lines.append(f"    {self.note}")
        elif not self.differences:
            lines.append("    identical request")
        return "\n".join(lines)


Remember = Literal[False, True, "hashes"]
"""How ``Matcher.key`` remembers a recorded request's URL and body: not at all, as they are,
or (for a cassette decoded as it plays, whose requests are not held) the body by its hash
alone: its URL is then not remembered (a set of hashes costs more than the URL scan it
saves)."""


class Digest:
    """A recorded body's match key known by its hash alone: a request whose body hashes as a
    recorded one's gets it without a JSON parse. It equals what hashes alike: the few
    positions a hash leads to are then told apart by the raw bytes (``ReplayQueue``)."""

    __slots__ = ("code",)

    def __init__(self, code: int) -> None:
        self.code = code

    def __hash__(self) -> int:
        return self.code

    def __eq__(self, other: object) -> bool:
        return hash(other) == self.code

    def __repr__(self) -> str:
        return f"Digest({self.code:#x})"


class Matcher:
    """Turns a request into the key the index is built on.

    Bodies compare as canonical JSON when they parse as JSON, else as bytes; the canonical form
    of each recorded body is remembered by its raw bytes (or, ``"hashes"``, by their hash), so
    a replayed request whose bytes equal the recording's costs one dict lookup instead of a
    JSON parse.
    """

    def __init__(
        self,
        match_on: Iterable[str] | None = None,
        ignore_json_fields: Iterable[str] = (),
    ) -> None:
        fields: list[str] = []
        for name in DEFAULT_MATCH_ON if match_on is None else match_on:
            if isinstance(name, str) and name in _ALIASES:
                fields.extend(_ALIASES[name])
            elif name in (*DEFAULT_MATCH_ON, "headers") or (
                isinstance(name, str) and name.startswith("headers:") and len(name) > 8
            ):
                if name == "headers":
                    raise ValueError("match_on 'headers' needs a name: 'headers:x-foo'")
                fields.append(name)
            else:
                raise ValueError(
                    f"unknown match_on field {name!r}; use method, url, scheme, host, port, "
                    "path, query, body or 'headers:NAME'"
                )
        self.fields = tuple(dict.fromkeys(fields))
        self.ignore_json_fields = tuple(ignore_json_fields)
        for path in self.ignore_json_fields:
            jsonpath.parse(path)
        self._url_fields = tuple(f for f in self.fields if f in URL_FIELDS)
        self._url_parts = _parts_getter(self._url_fields)
        self._header_fields = tuple(f[8:].lower() for f in self.fields if f.startswith("headers:"))
        self.reads_headers = bool(self._header_fields)
        """Whether a request's key holds any of its headers."""
        self._match_body = "body" in self.fields
        self._match_method = "method" in self.fields
        # The default key's fields (method, URL parts, body; no header), in their order: made
        # in one expression, as most requests' keys are.
        self._default_shape = (
            self._match_method
            and len(self._url_fields) > 1
            and not self._header_fields
            and self._match_body
        )
        self._body_keys: dict[bytes, Hashable] = {}
        # A dict, not a set: for the thousands of URLs of a large cassette it takes a third
        # of the memory.
        self._urls: dict[str, None] = {}
        self._body_digests: dict[int, int] = {}  # a body's hash: its key's

    def _canonical_json(self, document: JsonValue) -> str:
        for path in self.ignore_json_fields:
            jsonpath.delete(document, path)
        return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def body_key(self, body: bytes, remember: Remember = False, exact: bool = False) -> Hashable:
        """``body``'s part of a key; ``exact``, never a ``Digest``."""
        if not body:
            return b""
        known = self._body_keys.get(body)
        if known is not None:
            return known
        if self._body_digests and not exact:
            code = self._body_digests.get(hash(body))
            if code is not None:
                return Digest(code)
        key: Hashable = body
        if _looks_like_json(body):
            try:
                key = ("json", self._canonical_json(json.loads(body)))
            except (ValueError, RecursionError):
                key = body
        else:
            parts = multipart_parts(body)
            if parts is not None:
                key = (
                    "multipart",
                    tuple((head, self.body_key(content)) for head, content in parts),
                )
        if remember == "hashes":
            self._body_digests[hash(body)] = hash(key)
        elif remember:
            self._body_keys[body] = key
        return key

    def remembers_body(self, body: bytes) -> bool:
        """Whether ``body`` is byte for byte one keyed with ``remember`` (a recorded one; by
        its hash, one remembered by ``"hashes"``)."""
        return body in self._body_keys or (
            bool(self._body_digests) and hash(body) in self._body_digests
        )

    def remembers_url(self, url: str) -> bool:
        """Whether ``url`` is exactly one keyed with ``remember`` (a recorded one)."""
        return url in self._urls

    def key(self, request: Request, remember: Remember = False, exact: bool = False) -> Hashable:
        """``request``'s match key; ``exact``, made from its fields alone (no ``Digest``)."""
        parse: Callable[[str], ParsedURL] = parse_url
        if remember == "hashes":
            parse = split_url
        elif remember:
            self._urls[request.url] = None
            parse = split_url
        if self._default_shape:
            body = request.body
            return (
                request.method.upper(),
                *self._url_parts(parse(request.url)),
                self.body_key(body, remember, exact) if body else b"",
            )
        parts: list[Hashable] = []
        if self._match_method:
            parts.append(request.method.upper())
        if self._url_fields:
            url = parse(request.url)
            parts.extend(self._url_parts(url))
        for header in self._header_fields:
            parts.append(tuple(v for k, v in request.headers if k.lower() == header))
        if self._match_body:
            parts.append(self.body_key(request.body, remember, exact))
        return tuple(parts)

    def differences(self, recorded: Request, request: Request) -> list[str]:
        """What stops ``recorded`` from matching ``request``, in the user's terms."""
        diffs: list[str] = []
        if self._match_method and recorded.method.upper() != request.method.upper():
            diffs.append(f"method: expected {recorded.method!r}, got {request.method!r}")
        if self._url_fields:
            want, got = parse_url(recorded.url), parse_url(request.url)
            for name in self._url_fields:
                if name == "query":
                    diffs.extend(_query_differences(want.query, got.query))
                elif getattr(want, name) != getattr(got, name):
                    diffs.append(
                        f"url.{name}: expected {getattr(want, name)!r}, got {getattr(got, name)!r}"
                    )
        for header in self._header_fields:
            want_h = [v for k, v in recorded.headers if k.lower() == header]
            got_h = [v for k, v in request.headers if k.lower() == header]
            if want_h != got_h:
                diffs.append(
                    f"headers.{header}: expected {show_value(want_h)}, got {show_value(got_h)}"
                )
        if self._match_body and self.body_key(recorded.body) != self.body_key(request.body):
            if grpc_wire.is_grpc(request) and grpc_wire.is_grpc(recorded):
                found = grpc_wire.message_differences(
                    request.url, recorded.body, request.body, json_differences
                )
            else:
                found = self._body_differences(recorded.body, request.body)
            # Bodies the match tells apart are named even where their parsed values compare
            # equal (a JSON string that is no object or array is matched as bytes).
            diffs.extend(
                found
                or [f"body: expected {_show_bytes(recorded.body)}, got {_show_bytes(request.body)}"]
            )
        return diffs

    def _body_differences(self, want: bytes, got: bytes, path: str = "body") -> list[str]:
        want_parts, got_parts = multipart_parts(want), multipart_parts(got)
        if want_parts is not None and got_parts is not None:
            return self._part_differences(want_parts, got_parts, path)
        try:
            want_doc, got_doc = json.loads(want), json.loads(got)
        except (ValueError, RecursionError):
            return [f"{path}: expected {_show_bytes(want)}, got {_show_bytes(got)}"]
        for ignored in self.ignore_json_fields:
            jsonpath.delete(want_doc, ignored)
            jsonpath.delete(got_doc, ignored)
        diffs: list[str] = []
        json_differences(path, want_doc, got_doc, diffs)
        return diffs

    def _part_differences(
        self, want: tuple[Part, ...], got: tuple[Part, ...], path: str
    ) -> list[str]:
        """Part by part, each named by its form field: ``body.part[1](file)...``."""
        diffs: list[str] = []
        for index in range(max(len(want), len(got))):
            name = _part_name((want[index] if index < len(want) else got[index])[0])
            where = f"{path}.part[{index}]" + (f"({name})" if name else "")
            if index >= len(got):
                diffs.append(f"{where}: expected, missing")
            elif index >= len(want):
                diffs.append(f"{where}: not recorded, got {_show_bytes(got[index][1])}")
            elif want[index][0] != got[index][0]:
                diffs.append(
                    f"{where}.headers: expected {_show_bytes(want[index][0])}, "
                    f"got {_show_bytes(got[index][0])}"
                )
            elif self.body_key(want[index][1]) != self.body_key(got[index][1]):
                diffs.extend(self._body_differences(want[index][1], got[index][1], where))
        return diffs


def _query_differences(
    want: tuple[tuple[str, str], ...], got: tuple[tuple[str, str], ...]
) -> list[str]:
    return pair_differences("url.query", want, got)


def pair_differences(
    where: str, want: Iterable[tuple[str, str]], got: Iterable[tuple[str, str]]
) -> list[str]:
    """The names whose values differ between two lists of pairs (a query's, headers with
    their names lower-cased), each value list in the order given, in the user's terms."""
    want, got = list(want), list(got)
    diffs = []
    for name in dict.fromkeys(name for name, _ in (*want, *got)):
        want_v = [v for k, v in want if k == name]
        got_v = [v for k, v in got if k == name]
        if want_v == got_v:
            continue
        if not want_v:
            diffs.append(f"{where}.{name}: not recorded, got {show_value(got_v)}")
        elif not got_v:
            diffs.append(f"{where}.{name}: expected {show_value(want_v)}, missing")
        else:
            diffs.append(f"{where}.{name}: expected {show_value(want_v)}, got {show_value(got_v)}")
    return diffs


def json_differences(path: str, want: JsonValue, got: JsonValue, out: list[str]) -> None:
    """Append to ``out`` one line per differing JSON path, stopping once there are eight, so a
    miss (or a ``diff`` of two runs) names the fields that changed instead of both documents."""
    if len(out) >= 8:
        return
    if isinstance(want, dict) and isinstance(got, dict):
        for key in dict.fromkeys([*want, *got]):
            child = f"{path}.{key}"
            if key not in got:
                out.append(f"{child}: expected {show_value(want[key])}, missing")
            elif key not in want:
                out.append(f"{child}: not recorded, got {show_value(got[key])}")
            else:
                json_differences(child, want[key], got[key], out)
    elif isinstance(want, list) and isinstance(got, list):
        for index in range(max(len(want), len(got))):
            child = f"{path}[{index}]"
            if index >= len(got):
                out.append(f"{child}: expected {show_value(want[index])}, missing")
            elif index >= len(want):
                out.append(f"{child}: not recorded, got {show_value(got[index])}")
            else:
                json_differences(child, want[index], got[index], out)
    elif isinstance(want, str) and isinstance(got, str) and want != got:
        start = max(0, _common_prefix(want, got) - 24)
        out.append(f"{path}: expected {_show_from(want, start)}, got {_show_from(got, start)}")
    elif want != got or type(want) is not type(got) or _signed_zeros(want, got):
        out.append(f"{path}: expected {show_value(want)}, got {show_value(got)}")


def _signed_zeros(want: JsonValue, got: JsonValue) -> bool:
    """0.0 and -0.0: equal in Python, different in canonical JSON (and so in the match)."""
    return isinstance(want, float) and isinstance(got, float) and str(want) != str(got)


def _common_prefix(a: str, b: str) -> int:
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return min(len(a), len(b))


def _show_from(text: str, start: int, limit: int = 60) -> str:
    """A string shown from near the first difference, so long prompts point at the change."""
    piece = text[start : start + limit]
    return ("..." if start else "") + repr(piece) + ("..." if start + limit < len(text) else "")


def show_value(value: Any, limit: int = 80) -> str:
    """A value as one short line for a difference message, cut at ``limit`` characters."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        value = value[0]
    text = repr(value) if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def show_change(before: Any, after: Any, limit: int = 40) -> str:
    """``before, now after`` in one short line. Two strings too long to show whole are shown
    from a little before their first difference, cut on either side with ``...``: two long
    prompts that differ near their end do not read as the same value twice."""
    if (
        isinstance(before, str)
        and isinstance(after, str)
        and before != after
        and max(len(repr(before)), len(repr(after))) > limit
    ):
        start = max(0, _common_prefix(before, after) - limit // 2)
        width = limit - 8  # the quotes and the ellipses
        return f"{_show_from(before, start, width)}, now {_show_from(after, start, width)}"
    return f"{show_value(before, limit)}, now {show_value(after, limit)}"


def _show_bytes(body: bytes, limit: int = 80) -> str:
    if not body:
        return "empty"
    text = repr(body[:limit]) + ("..." if len(body) > limit else "")
    return f"{len(body)} bytes {text}"
