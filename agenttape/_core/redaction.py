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
from operator import itemgetter
from urllib.parse import unquote_plus

from . import jsonpath
from .models import Headers, Request
from .secrets import (
    REDACTED,
    SECRET_HEADERS,
    SECRET_QUERY_NAMES,
    may_hold_secret_text,
    scrub_bytes,
    scrub_text,
)

RULE_KINDS = ("header", "query", "json", "regex")
_SEEN_HEADERS_LIMIT = 1024
_UNSEEN: list[tuple[str, str]] = []


_first = itemgetter(0)


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
    # Finds any secret query name inside a lowercased query: a query without one needs no
    # look at its names one by one.
    _names_in: Callable[[str], re.Match[str] | None] = field(
        init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        names = "|".join(re.escape(name) for name in sorted(self.query)) or "(?!)"
        object.__setattr__(self, "_names_in", re.compile(names).search)

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

    def _text(self, text: str) -> str:
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
            new_value = REDACTED if name.lower() in self.headers else self._text(value)
            changed = changed or new_value != value
            redacted.append((name, new_value))
        return redacted if changed else None

    def _url(self, url: str) -> str:
        url = _without_password(url)
        clean = not self.patterns and not may_hold_secret_text(url)
        base, question, query = url.partition("?")
        if question and not (clean and self._names_plain(query)):
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
                if plain.lower() in self.query or self._text(decoded) != decoded:
                    pairs[index] = f"{name}={REDACTED}"
                    changed = True
            if changed:
                url = f"{base}?{'&'.join(pairs)}{hash_}{fragment}"
        return url if clean else self._text(url)

    def _names_plain(self, query: str) -> bool:
        """True when no value is encoded and no secret name occurs anywhere in the query.
        With no credential shape in the URL either, the per-value scan (which decodes each
        value) cannot change anything, and the common URL skips it."""
        if "%" in query or "+" in query or not query.isascii():
            return False
        return self._names_in(query.lower()) is None

    def _body(self, body: bytes) -> bytes:
        if not body:
            return body
        body = scrub_bytes(body)
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

    def request(self, request: Request) -> Request:
        """``request`` itself when nothing in it is secret: the common case allocates nothing."""
        url = self._url(request.url)
        headers = self._headers(request.headers)
        body = self._body(request.body)
        if url is request.url and headers is request.headers and body is request.body:
            return request
        return Request(method=request.method, url=url, headers=headers, body=body)

    def response_headers(self, headers: Headers) -> Headers:
        """Only the secret headers (set-cookie): response bodies stay byte-exact."""
        secret = self.headers
        if secret.isdisjoint(map(str.lower, map(_first, headers))):
            return headers
        return [(name, REDACTED if name.lower() in secret else value) for name, value in headers]


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
