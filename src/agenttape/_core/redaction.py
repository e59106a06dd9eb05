"""Keeps secrets off the disk; applied to every request before it is matched or stored.

Redacting the live request before matching is what lets a replay made with another key (or
none) still match the recording.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import unquote_plus

from . import jsonpath
from .encoding import encodings_of
from .models import Headers, Request
from .secrets import (
    JSON_SECRET_REGEX,
    REDACTED,
    SECRET_HEADERS,
    SECRET_QUERY_NAMES,
    json_field_replacement,
    may_hold_json_field,
    may_hold_secret,
    may_hold_secret_text,
    scrub_bytes,
    scrub_json_fields,
    scrub_text,
    secret_bytes_regex,
)
from .substitution import Rule, TooLarge, rewrite_encoded

RULE_KINDS = ("header", "query", "json", "regex")
REDACT_LIMIT = 64 << 20
"""Decoded bytes of one compressed body that redaction reads. A compressed request body that
inflates to more is stored as ``<redacted>`` whole: what could not be read could not be
proven free of secrets."""
_REDACTED_BYTES = REDACTED.encode()
_URL_HEADERS = frozenset({"location", "content-location"})
_FORM = "application/x-www-form-urlencoded"
_MULTIPART = "multipart/form-data"
_PART_NAME = re.compile(rb';\s*name\s*=\s*(?:"([^"]*)"|([^;\s]+))', re.IGNORECASE)
_SEEN_HEADERS_LIMIT = 1024
_UNSEEN: list[tuple[str, str]] = []


class Recorded(Protocol):
    """What replay has stored: a request part exactly as recorded was redacted when it was
    stored, by built-in rules that leave what they wrote as it is."""

    def recorded_body(self, body: bytes) -> bool: ...
    def recorded_url(self, url: str) -> bool: ...


@dataclass(slots=True, frozen=True)
class Redactor:
    headers: frozenset[str] = SECRET_HEADERS
    query: frozenset[str] = SECRET_QUERY_NAMES
    json_paths: tuple[str, ...] = ()
    patterns: tuple[re.Pattern[str], ...] = field(default=())
    # A client sends the same header list again and again: its redacted form is kept, so the
    # replay hot path pays one lookup instead of a scan per header.
    _seen_headers: dict[tuple[tuple[str, str], ...], Headers | None] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )
    # Per response header name, whether it is a secret or a URL header.
    _name_kinds: dict[str, bool] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )
    # Finds any secret query name inside a lowercased query: a query without one needs no
    # look at its names one by one.
    _names_in: Callable[[str], re.Match[str] | None] = field(
        init=False, repr=False, compare=False, hash=False
    )
    # No rule of the user's reads a URL: one exactly as recorded needs no second look.
    _builtin_url_rules: bool = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        names = "|".join(re.escape(name) for name in sorted(self.query)) or "(?!)"
        object.__setattr__(self, "_names_in", re.compile(names).search)
        object.__setattr__(
            self, "_builtin_url_rules", not self.patterns and self.query == SECRET_QUERY_NAMES
        )

    @classmethod
    def from_rules(cls, rules: Iterable[str] | None) -> Redactor:
        """Build from rules such as ``"header:x-org-id"``, ``"query:sig"``,
        ``"json:user.email"`` or ``"regex:acct_[0-9]+"``, added to the defaults."""
        if rules is None:
            return _default()
        if isinstance(rules, str):
            rules = [rules]
        headers, query, json_paths, patterns = set(SECRET_HEADERS), set(SECRET_QUERY_NAMES), [], []
        for rule in rules:
            kind, sep, value = rule.partition(":") if isinstance(rule, str) else ("", "", "")
            if not sep or not value or kind not in RULE_KINDS:
                raise ValueError(
                    f"redact rule {rule!r} is not one of "
                    "'header:NAME', 'query:NAME', 'json:PATH', 'regex:PATTERN'"
                )
            if kind == "header":
                headers.add(value.lower())
            elif kind == "query":
                query.add(value.lower())
            elif kind == "json":
                jsonpath.parse(value)
                json_paths.append(value)
            else:
                try:
                    patterns.append(re.compile(value))
                except re.error as exc:
                    raise ValueError(f"redact rule {rule!r}: bad regex ({exc})") from None
        return cls(frozenset(headers), frozenset(query), tuple(json_paths), tuple(patterns))

    def text(self, text: str) -> str:
        """``text`` with credential shapes and the user's regexes replaced."""
        text = scrub_text(text)
        for pattern in self.patterns:
            text = pattern.sub(REDACTED, text)
        return text

    def _headers(self, headers: Headers) -> Headers:
        """The redacted list, or ``headers`` itself when nothing in it is secret."""
        seen = self._seen_headers
        try:
            key = tuple(headers)
            # One lookup: another thread may empty the table between a test and a read.
            known = seen.get(key, _UNSEEN)
            if known is not _UNSEEN:
                return headers if known is None else list(known)
        except TypeError:  # unhashable pairs: redact without remembering
            return self._redact_headers(headers) or headers
        known = self._redact_headers(headers)
        if len(seen) >= _SEEN_HEADERS_LIMIT:
            seen.clear()
        seen[key] = known
        return headers if known is None else list(known)

    def _redact_headers(self, headers: Headers) -> Headers | None:
        """None when no value changes."""
        redacted, changed = [], False
        for name, value in headers:
            new_value = REDACTED if name.lower() in self.headers else self.text(value)
            changed = changed or new_value != value
            redacted.append((name, new_value))
        return redacted if changed else None

    def _url(self, url: str) -> str:
        if "@" in url:  # no '@', no user part: the common URL, untouched
            url = _without_password(url)
        clean = not self.patterns and not may_hold_secret_text(url)
        base, question, query = url.partition("?")
        # With no credential shape in the URL, no value encoded and no secret name anywhere
        # in the query, the per-value scan (which decodes each value) cannot change anything,
        # and the common URL skips it.
        if question and not (
            clean
            and query.isascii()
            and "%" not in query
            and "+" not in query
            and self._names_in(query.lower()) is None
        ):
            query, hash_, fragment = query.partition("#")
            pairs = query.split("&")
            changed = False
            for index, pair in enumerate(pairs):
                name, equals, value = pair.partition("=")
                if not equals:
                    continue
                # unquote_plus is the identity on text without '%' or '+'.
                plain = unquote_plus(name) if "%" in name or "+" in name else name
                # Values are looked at decoded: an encoded credential ("Bearer%20...",
                # "%2F" inside a token) escapes the patterns otherwise.
                decoded = unquote_plus(value) if "%" in value or "+" in value else value
                if plain.lower() in self.query or self.text(decoded) != decoded:
                    pairs[index] = f"{name}={REDACTED}"
                    changed = True
            if changed:
                url = f"{base}?{'&'.join(pairs)}{hash_}{fragment}"
        return url if clean else self.text(url)

    def rules(self) -> tuple[Rule, ...]:
        """What this redactor replaces in any text, as rules for a body read as a stream:
        credential shapes, the values of credential JSON keys, and the user's regexes."""
        return (
            Rule(secret_bytes_regex(), _REDACTED_BYTES, may_hold_secret),
            Rule(JSON_SECRET_REGEX, json_field_replacement, may_hold_json_field),
            *(Rule(re.compile(p.pattern.encode()), _REDACTED_BYTES) for p in self.patterns),
        )

    def _body(self, body: bytes, headers: Headers, stored: Recorded | None = None) -> bytes:
        if not body:
            return body
        content_type = encoded = None
        for name, value in headers:  # one pass for both: most requests have neither
            lowered = name.lower()
            if lowered == "content-type" and content_type is None:
                content_type = value
            elif lowered == "content-encoding" and encoded is None:
                encoded = value
        if encoded is not None and encoded.strip().lower() not in ("", "identity"):
            return self._encoded_body(body, encodings_of(headers))
        if (
            stored is not None
            and not self.json_paths
            and not self.patterns
            and stored.recorded_body(body)
        ):
            # Redacted when it was stored, by rules that leave what they wrote as it is.
            return body
        body = scrub_json_fields(scrub_bytes(body))
        if content_type is not None:
            body = _form_fields(body, content_type)
        if self.json_paths and body.lstrip()[:1] in (b"{", b"["):
            try:
                document = json.loads(body)
            except (ValueError, RecursionError):
                document = None
            if document is not None:
                changed = False
                for path in self.json_paths:
                    changed = jsonpath.replace(document, path, REDACTED) or changed
                if changed:
                    body = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()
        if self.patterns:
            text = body.decode("latin-1")
            for pattern in self.patterns:
                text = pattern.sub(REDACTED, text)
            body = text.encode("latin-1", "replace")
        return body

    def _encoded_body(self, body: bytes, codings: list[str]) -> bytes:
        """A compressed body redacted under its encoding (decoded, rewritten and encoded
        again as a stream), so a key inside a gzip body never reaches the disk."""
        try:
            return rewrite_encoded(scrub_bytes(body), codings, self.rules(), REDACT_LIMIT)
        except TooLarge:
            return _REDACTED_BYTES

    def request(
        self, request: Request, *, stored: Recorded | None = None, headers: bool = True
    ) -> Request:
        """``request`` itself when nothing in it is secret: the common case allocates nothing.
        Without ``headers``, its headers are left as they are: for a request only matched
        against recorded ones by a matcher that reads none of them, and then dropped.

        A URL or plain body that ``stored`` says is exactly one stored before is not scanned
        again (replay matches each request against recorded ones, which were redacted as
        they were stored, and the built-in rules change nothing in what they wrote); with
        rules of the user's that read it (query names or patterns for a URL, JSON paths or
        patterns for a body), it is."""
        url = request.url
        if stored is None or not self._builtin_url_rules or not stored.recorded_url(url):
            url = self._url(url)
        pairs = self._headers(request.headers) if headers else request.headers
        body = request.body
        if body:
            body = self._body(body, request.headers, stored)
        if url is request.url and pairs is request.headers and body is request.body:
            return request
        if body is not request.body:
            pairs = _with_length(pairs, len(body))
        return Request(method=request.method, url=url, headers=pairs, body=body)

    def frame(self, payload: bytes) -> bytes:
        """A client WebSocket frame's payload as stored and matched: redacted as a request
        body is (credential shapes, credential JSON keys, the user's JSON paths and regexes)."""
        return self._body(payload, [])

    def response_headers(self, headers: Headers) -> Headers:
        """Response headers as stored: secret headers' values replaced, URLs (``Location``
        of a redirect) redacted as request URLs are, credential shapes in any value
        replaced. Response bodies stay byte-exact."""
        kinds = self._name_kinds
        values = []
        for name, value in headers:
            kind = kinds.get(name)
            if kind is None:
                kind = self._name_kind(name)
            if kind:
                return self._response_headers(headers)
            values.append(value)
        # One look for credential shapes in all the values: the pieces it looks for hold no
        # line break, so none is found across two values, and most heads have none at all.
        return (
            self._response_headers(headers) if may_hold_secret_text("\n".join(values)) else headers
        )

    def _name_kind(self, name: str) -> bool:
        """Whether a header of this name is a secret or a URL: kept per name, since a server
        sends the same names again and again."""
        lowered = name.lower()
        kind = lowered in self.headers or lowered in _URL_HEADERS
        kinds = self._name_kinds
        if len(kinds) >= _SEEN_HEADERS_LIMIT:
            kinds.clear()
        kinds[name] = kind
        return kind

    def _response_headers(self, headers: Headers) -> Headers:
        redacted = None
        shapes = may_hold_secret_text("\n".join([value for _name, value in headers]))
        for index, (name, value) in enumerate(headers):
            lowered = name.lower()
            if lowered in self.headers:
                new = REDACTED
            elif lowered in _URL_HEADERS:
                new = self._url(value)
            elif shapes:
                new = scrub_text(value)
            else:
                continue
            if new != value:
                if redacted is None:
                    redacted = list(headers)
                redacted[index] = (name, new)
        return headers if redacted is None else redacted


def _with_length(headers: Headers, length: int) -> Headers:
    """``headers`` with Content-Length saying ``length``: a body redaction made shorter or
    longer is stored with a length that matches it."""
    if not any(name.lower() == "content-length" for name, _value in headers):
        return headers
    return [
        (name, str(length) if name.lower() == "content-length" else value)
        for name, value in headers
    ]


def _form_fields(body: bytes, content_type: str) -> bytes:
    """A form-encoded or multipart body with its credential fields' values replaced (see
    ``credential_fields``); everything else byte for byte."""
    spans = credential_fields(body, content_type)
    if not spans:
        return body
    pieces, last = [], 0
    for _name, start, end in spans:
        pieces += [body[last:start], _REDACTED_BYTES]
        last = end
    pieces.append(body[last:])
    return b"".join(pieces)


def credential_fields(body: bytes, content_type: str) -> list[tuple[str, int, int]]:
    """(name, start, end) of each value in a form-encoded or multipart body that holds a
    credential: its field is named so (``SECRET_QUERY_NAMES``), or its decoded value has a
    credential's shape. Values already ``<redacted>`` are left out. Default redaction
    replaces these; ``agenttape audit`` reports them."""
    kind = content_type.partition(";")[0].strip().lower()
    if kind == _FORM:
        return _form_spans(body)
    if kind == _MULTIPART:
        boundary = _boundary(content_type)
        return _multipart_spans(body, boundary) if boundary else []
    return []


def _form_spans(body: bytes) -> list[tuple[str, int, int]]:
    spans = []
    start = 0
    for pair in body.split(b"&"):
        name, equals, value = pair.partition(b"=")
        value_start = start + len(name) + 1
        start += len(pair) + 1
        if not equals or not value or value == _REDACTED_BYTES:
            continue
        plain = unquote_plus(name.decode("latin-1"))
        decoded = unquote_plus(value.decode("latin-1"))
        if plain.lower() in SECRET_QUERY_NAMES or scrub_text(decoded) != decoded:
            spans.append((plain, value_start, value_start + len(value)))
    return spans


def _boundary(content_type: str) -> bytes | None:
    for parameter in content_type.split(";")[1:]:
        key, _equals, value = parameter.strip().partition("=")
        if key.strip().lower() == "boundary" and value:
            return value.strip().strip('"').encode("latin-1")
    return None


def _multipart_spans(body: bytes, boundary: bytes) -> list[tuple[str, int, int]]:
    """The contents of the parts named as credentials (``name="password"``); a file part
    (one with a ``filename``) is data, not a field, and is left out."""
    delimiter = b"--" + boundary
    spans = []
    start = body.find(delimiter)
    while start != -1:
        head_start = start + len(delimiter)
        following = body.find(delimiter, head_start)
        end = len(body) if following == -1 else following
        head_end = body.find(b"\r\n\r\n", head_start, end)
        if head_end != -1:
            head = body[head_start:head_end]
            found = _PART_NAME.search(head)
            if found is not None and b"filename" not in head.lower():
                name = (found.group(1) if found.group(1) is not None else found.group(2)) or b""
                content_start = head_end + 4
                content_end = end - 2 if body[end - 2 : end] == b"\r\n" else end
                content = body[content_start:content_end]
                plain = name.decode("latin-1")
                if content != _REDACTED_BYTES and (
                    plain.lower() in SECRET_QUERY_NAMES or scrub_bytes(content) != content
                ):
                    spans.append((plain, content_start, content_end))
        start = following
    return spans


def _without_password(url: str) -> str:
    """``scheme://user:<redacted>@host...``: a password in a URL is a secret in any header."""
    start = url.find("://")
    if start == -1 or "@" not in url:  # no '@', no user part: the common URL, untouched
        return url
    start += 3
    end = len(url)
    for stop in "/?#":
        found = url.find(stop, start)
        if found != -1:
            end = min(end, found)
    at = url.rfind("@", start, end)
    user, colon, password = url[start:at].partition(":")
    if at == -1 or not colon or password == REDACTED:
        return url
    return f"{url[:start]}{user}:{REDACTED}{url[at:]}"


@functools.cache
def _default() -> Redactor:
    """The default rules, built once: every cassette and run without rules of its own shares
    them (and their table of headers already seen)."""
    return Redactor()


class Redacting:
    """A tape that keeps response headers and client WebSocket frames as its ``redactor``
    leaves them."""

    redactor: Redactor

    def response_headers(self, headers: Headers) -> Headers:
        return self.redactor.response_headers(headers)

    def client_frame(self, payload: bytes) -> bytes:
        return self.redactor.frame(payload)
