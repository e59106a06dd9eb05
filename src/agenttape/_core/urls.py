"""URLs split into the parts requests are compared and classified by.

Kept apart from the matcher so that every reader of URLs (matching, live/frozen scopes, the
LLM call reader) shares one parser without importing the others.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import parse_qsl, urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


@dataclass(slots=True, frozen=True)
class ParsedURL:
    scheme: str
    host: str
    port: int | None
    path: str
    query: tuple[tuple[str, str], ...]


# The shape nearly every recorded URL has: lower-case http(s), a plain host, a port, and a path
# and query free of escapes, '+', ';', fragments and whitespace. For it urlsplit and parse_qsl
# reduce to plain splits (tests check both ways agree); everything else takes the general path.
_URL_CHARS = r"[A-Za-z0-9._~!$&'()*,=:@/\-]"
_SIMPLE_URL = re.compile(
    rf"(https?)://([a-z0-9.\-]+)(?::([0-9]{{1,5}}))?(/{_URL_CHARS}*)?(?:\?({_URL_CHARS}*))?"
)


def _parse_simple(url: str) -> ParsedURL | None:
    simple = _SIMPLE_URL.fullmatch(url)
    if simple is None:
        return None
    scheme, host, port_text, path, query = simple.groups()
    if port_text is None:
        port = _DEFAULT_PORTS[scheme]
    else:
        port = int(port_text)
        if port > 65535:
            return None
    pairs = []
    if query:
        for piece in query.split("&"):
            if piece:
                name, _equals, value = piece.partition("=")
                pairs.append((name, value))
    return ParsedURL(
        scheme=scheme, host=host, port=port, path=path or "/", query=tuple(sorted(pairs))
    )


def split_url(url: str) -> ParsedURL:
    """``parse_url`` without its cache: for URLs split once (a cassette's, as its index is
    built), which would otherwise push the live ones out and stay held by the cache."""
    simple = _parse_simple(url)
    if simple is not None:
        return simple
    return _parse_general(url)


parse_url = lru_cache(maxsize=8192)(split_url)


def _parse_general(url: str) -> ParsedURL:
    try:
        parts = urlsplit(url)
    except ValueError:
        # Unparseable (a cassette edited by hand, an unbalanced IPv6 bracket): it can still
        # match the same text, compared whole.
        return ParsedURL(scheme="", host="", port=None, path=url, query=())
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return ParsedURL(
        scheme=scheme,
        host=(parts.hostname or "").lower(),
        port=port if port is not None else _DEFAULT_PORTS.get(scheme),
        path=parts.path or "/",
        query=tuple(sorted(parse_qsl(parts.query, keep_blank_values=True))),
    )
