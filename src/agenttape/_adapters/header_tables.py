"""Raw header pairs decoded once, however often a client sends them.

A client sends the same request headers on nearly every call and a server repeats most of
its response headers; a recording keeps every one of them. Sharing the decoded pairs (they
are immutable tuples) saves decoding them again and keeps one copy in memory instead of one
per interaction. The headers are tuples too: a recording keeps them for the rest of its
cassette's life, and a tuple of strings is one object fewer for every garbage collection to
walk (a list stays tracked).
"""

from __future__ import annotations

import email.message
import re
from collections.abc import Iterable

from .._core.models import Headers

# Bounded so that headers that never repeat (a request id, a date) cannot grow the tables
# without limit: a full table starts again empty. Whole header sets are larger and a client
# sends few distinct ones, so fewer of them are kept.
_LIMIT = 4096
_SET_LIMIT = 1024

_Pair = tuple[str, str]
Encoded = tuple[bytes, bytes, bytes]
"""A header pair as httpx keeps it: the name as sent, the name lowered, the value."""

_pairs: dict[tuple[bytes, bytes], _Pair] = {}
_sets: dict[tuple[tuple[bytes, bytes], ...], tuple[_Pair, ...]] = {}
_texts: dict[bytes, str] = {}


def decode_pair(name: bytes, value: bytes) -> _Pair:
    key = (name, value)
    pair = _pairs.get(key)
    if pair is None:
        if len(_pairs) >= _LIMIT:
            _pairs.clear()
        pair = _pairs[key] = (name.decode("latin-1"), value.decode("latin-1"))
    return pair


def decode_headers(raw: Iterable[tuple[bytes, bytes]]) -> Headers:
    """Latin-1 decoded pairs, each byte one character, so the exact bytes come back."""
    raw = tuple(raw)
    decoded = tuple(map(_pairs.get, raw))  # one pass in C for pairs seen before
    if None in decoded:
        decoded = tuple(
            [
                pair if pair is not None else decode_pair(*key)
                for pair, key in zip(decoded, raw, strict=True)
            ]
        )
    return decoded  # type: ignore[return-value]


def decode_header_set(raw: Iterable[tuple[bytes, bytes]]) -> Headers:
    """As ``decode_headers``, for headers sent again as a whole (a client's request headers)."""
    key = tuple(raw)
    decoded = _sets.get(key)
    if decoded is None:
        if len(_sets) >= _SET_LIMIT:
            _sets.clear()
        decoded = _sets[key] = tuple([decode_pair(name, value) for name, value in key])
    return decoded


def decode_text(raw: bytes) -> str:
    """A short latin-1 text that repeats (a reason phrase, an HTTP version)."""
    text = _texts.get(raw)
    if text is None:
        if len(_texts) >= _LIMIT:
            _texts.clear()
        text = _texts[raw] = raw.decode("latin-1")
    return text


# The characters RFC 5322 allows in a header name, as ``email`` checks them.
_ODD_NAME_CHARACTER = re.compile("[^\041-\071\073-\176]")


def _email_checks_names() -> bool:
    """Whether the running Python's ``email`` package refuses a name RFC 5322 does not allow
    (3.14 on): asked of it, not of its version."""
    try:
        email.message.Message()["x\x01"] = ""
    except ValueError:
        return True
    return False


EMAIL_CHECKS_NAMES = _email_checks_names()
"""Where true, a library that hands response headers to ``email`` (httpx's cookie jar, on
every response) fails deep inside itself on a header name a cassette edited by hand holds."""


def name_email_refuses(headers: Headers) -> str | None:
    """The first header name ``email`` refuses, said as a problem (``EMAIL_CHECKS_NAMES``
    says whether it refuses any)."""
    for name, _value in headers:
        if not name or _ODD_NAME_CHARACTER.search(name):
            return f"the header name {name!r} is not one RFC 5322 allows"
    return None
